"""Whether vLLM's engine core has died, and the line of its log that says why.

vLLM runs the model in an engine-core process apart from its API server (AsyncLLM). When that process exits, the
API server logs `EngineDeadError` (or "Engine core proc EngineCore_DP0 died unexpectedly") and stops answering, so a
later request fails with a ConnectError that says nothing of the cause. The cause is in the log, as the last line of
the first traceback: e.g. `ModuleNotFoundError: No module named 'flashinfer'` (issue 44, vLLM 0.26 on an H200).
"""
from __future__ import annotations

import re
from pathlib import Path

# What vLLM logs when its engine core is gone (0.26 and 0.32: v1/engine/exceptions.py EngineDeadError, the
# core_client's "Engine core proc ... died unexpectedly", core.py's "EngineCore encountered a fatal error")
DEATH = re.compile(r"EngineDeadError|Engine core proc \S+ died|EngineCore encountered a fatal error|"
                   r"Engine core initialization failed|EngineCore failed to start")
# An exception named on a line of its own (a traceback's last line, or a logged `Name: message`)
EXCEPTION = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))(?::\s*(.*))?$")
# Exceptions that wrap the cause rather than state it: the engine's own death notice, the requests it failed, the
# tasks it cancelled, and the start-up failure that follows any engine-core exception
GENERIC = {"EngineDeadError", "EngineGenerateError", "CancelledError", "SystemExit", "KeyboardInterrupt"}
GENERIC_MESSAGES = re.compile(r"Engine core initialization failed|EngineCore encountered|died unexpectedly|"
                              r"Engine core .*(died|dead)", re.IGNORECASE)
# vLLM's line prefix: "(EngineCore_DP0 pid=123) ERROR 12-04 10:00:00 [core.py:700] "
PREFIX = re.compile(r"^(\([^)]*\)\s*)?((DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s*)?")


def root_cause(log: str) -> str | None:
    """The first line that names an exception which is not a generic wrapper (GENERIC), without vLLM's prefix:
    Python prints a chained traceback root first, and the engine core's traceback comes before the API server's
    EngineDeadError; None where no line names one."""
    for raw in log.splitlines():
        line = PREFIX.sub("", raw.strip()).strip()
        m = EXCEPTION.match(line)
        if not m:
            continue
        name = m.group(1).rsplit(".", 1)[-1]
        if name in GENERIC or GENERIC_MESSAGES.search(m.group(2) or ""):
            continue
        return line
    return None


def died(log: str, alive: bool) -> bool:
    """Whether the engine core is gone: the server's process exited, or its log says the engine died."""
    return not alive or bool(DEATH.search(log))


def death_line(log_path: Path | str | None, alive: bool, lead: str) -> str | None:
    """The one line for a dead engine, or None where it lives: `lead` (what died where, e.g. "vLLM's engine died at
    /sleep"), its log's root cause, and the log's path."""
    log = Path(log_path).read_text(encoding="utf-8", errors="replace") if log_path and Path(log_path).exists() else ""
    if not died(log, alive):
        return None
    return f"{lead}: {root_cause(log) or 'its log names no exception'} (log {log_path})"
