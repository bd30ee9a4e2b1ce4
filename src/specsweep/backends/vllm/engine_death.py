"""Whether vLLM's engine core has died, and the line of its log that says why.

vLLM runs the model in an engine-core process apart from its API server (AsyncLLM). When that process exits, the
API server logs `EngineDeadError` (or "Engine core proc EngineCore_DP0 died unexpectedly") and stops answering, so a
later request fails with a ConnectError that says nothing of the cause. The cause is in the log, as the last line of
the engine core's traceback: e.g. `ModuleNotFoundError: No module named 'flashinfer'` (issue 44, vLLM 0.26 on an H200),
or at start-up vLLM's own refusal with its fix, `ValueError: max_num_seqs (64) exceeds available Mamba cache blocks (44)
... lower max_num_seqs to at most 44 or increase gpu_memory_utilization` (issue 52), which the API server's wrapper
("RuntimeError: Engine core initialization failed. See root cause above") only points at. `start_failure` puts that
line, and the fix in the study's own keys (FIXES), on the line of a start that failed.
"""
from __future__ import annotations

import re
from pathlib import Path

from specsweep.run import tracebacks

# What vLLM logs when its engine core is gone (0.26 and 0.32: v1/engine/exceptions.py EngineDeadError, the
# core_client's "Engine core proc ... died unexpectedly", core.py's "EngineCore encountered a fatal error")
DEATH = re.compile(r"EngineDeadError|Engine core proc \S+ died|EngineCore encountered a fatal error|"
                   r"Engine core initialization failed|EngineCore failed to start")
# Exceptions that wrap the cause rather than state it: the engine's own death notice, the requests it failed, and the
# start-up failure that follows any engine-core exception (tracebacks.Wrappers; cancelled tasks count everywhere)
WRAPPERS = tracebacks.Wrappers(
    names=frozenset({"EngineDeadError", "EngineGenerateError"}),
    messages=re.compile(r"Engine core initialization failed|EngineCore encountered|died unexpectedly|"
                        r"Engine core .*(died|dead)", re.IGNORECASE))
# vLLM's line prefix: "(EngineCore_DP0 pid=123) ERROR 12-04 10:00:00 [core.py:700] "
PREFIX = re.compile(r"^(\([^)]*\)\s*)?((DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s*)?")
# The process a line came from: "(EngineCore_DP0 pid=970)" (0.26 logs "(EngineCore pid=970)" too)
PROCESS = re.compile(r"^\((\w+)[^)]*\)")


def _lines(log: str) -> list[tracebacks.Line]:
    """Each line as (its process, e.g. EngineCore_DP0 or APIServer, "" where none; its text without vLLM's prefix)."""
    out = []
    for raw in log.splitlines():
        raw = raw.strip()
        m = PROCESS.match(raw)
        out.append((m.group(1) if m else "", PREFIX.sub("", raw).strip()))
    return out


def root_cause(log: str) -> str | None:
    """The line that says why the engine died, without vLLM's prefix: the last exception line of the engine core's
    first traceback that states one (its chain included: tracebacks.chain_cause), else the first line anywhere that
    names an exception which is not a wrapper (WRAPPERS: Python prints a chained traceback root first, and the engine
    core's traceback comes before the API server's EngineDeadError); None where no line names one."""
    return tracebacks.root_cause(_lines(log), WRAPPERS, where=lambda who: who.startswith("EngineCore"))


# The fix of a known cause, in the study's own keys: (the cause's pattern, the fix; {0}, {1}: its groups)
FIXES = (
    (re.compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)"),
     "give --max-num-seqs at most {1} in server.extra_args, or raise server.gpu_memory_utilization (a hybrid holds "
     "one state block per sequence)"),
    (re.compile(r"No available memory for the cache blocks"),
     "the weights leave no room for a KV cache: raise server.gpu_memory_utilization, or run this member on a larger "
     "GPU"),
    (re.compile(r"(?:torch\.)?(?:cuda\.)?OutOfMemoryError"),
     "lower server.max_model_len or --max-num-seqs in server.extra_args, or raise server.gpu_memory_utilization"),
    (re.compile(r"No module named 'flashinfer'"),
     "the server's Python has no flashinfer: leave the kernel choice to the launch (docs/backends.md#vllm)"),
)


def fix(cause: str | None) -> str | None:
    """The fix of a known cause (FIXES), or None."""
    return tracebacks.fix(cause, FIXES)


def explained(cause: str | None) -> str:
    """The cause, and its fix where known."""
    return tracebacks.explained(cause, FIXES)


def start_failure(message: str, log_path: Path | str | None) -> str:
    """The line of a start that failed (Server.wait_ready's ServerError, e.g. "vLLM exited with code 1 before it was
    ready; log ..., last lines: ..."): its head, then the engine core's own error and its fix, and the log, where the
    log names one; the message as it is where it names none (tracebacks.start_failure)."""
    return tracebacks.start_failure(message, log_path, root_cause, FIXES)


def died(log: str, alive: bool) -> bool:
    """Whether the engine core is gone: the server's process exited, or its log says the engine died."""
    return not alive or bool(DEATH.search(log))


def death_line(log_path: Path | str | None, alive: bool, lead: str) -> str | None:
    """The one line for a dead engine, or None where it lives: `lead` (what died where, e.g. "vLLM's engine died at
    /sleep"), its log's root cause, and the log's path."""
    log = tracebacks.read(log_path)
    if not died(log, alive):
        return None
    return f"{lead}: {explained(root_cause(log))} (log {log_path})"
