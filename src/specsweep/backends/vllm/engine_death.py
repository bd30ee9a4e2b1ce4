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


# The process a line came from: "(EngineCore_DP0 pid=970)" (0.26 logs "(EngineCore pid=970)" too)
PROCESS = re.compile(r"^\((\w+)[^)]*\)")
TRACEBACK = "Traceback (most recent call last):"
# What Python prints between the tracebacks of one chain
CHAINED = re.compile(r"^(The above exception was the direct cause|During handling of the above exception)")


def _lines(log: str) -> list[tuple[str, str]]:
    """Each line as (its process, e.g. EngineCore_DP0 or APIServer, "" where none; its text without vLLM's prefix)."""
    out = []
    for raw in log.splitlines():
        raw = raw.strip()
        m = PROCESS.match(raw)
        out.append((m.group(1) if m else "", PREFIX.sub("", raw).strip()))
    return out


def _named(text: str) -> bool:
    """The line names an exception that states a cause (not a generic wrapper: GENERIC, GENERIC_MESSAGES)."""
    m = EXCEPTION.match(text)
    return bool(m) and m.group(1).rsplit(".", 1)[-1] not in GENERIC and not GENERIC_MESSAGES.search(m.group(2) or "")


def _engine_traceback(lines: list[tuple[str, str]]) -> str | None:
    """The last exception line of the engine core's first traceback (its chain included), where that names a cause:
    the exception the engine core raised last, e.g. vLLM's ValueError after a torch error it caught and explained."""
    start = next((i for i, (who, text) in enumerate(lines) if who.startswith("EngineCore") and text == TRACEBACK), None)
    if start is None:
        return None
    who, found, i = lines[start][0], None, start + 1
    while i < len(lines):
        src, text = lines[i]
        if src and src != who:
            i += 1
            continue
        if EXCEPTION.match(text):
            found = text if _named(text) else found
            rest = [t for s, t in lines[i + 1:i + 4] if (not s or s == who) and t]
            if not (rest and CHAINED.match(rest[0])):
                break
        i += 1
    return found


def root_cause(log: str) -> str | None:
    """The line that says why the engine died, without vLLM's prefix: the last exception line of the engine core's
    first traceback (`_engine_traceback`), else the first line anywhere that names an exception which is not a
    generic wrapper (GENERIC: Python prints a chained traceback root first, and the engine core's traceback comes
    before the API server's EngineDeadError); None where no line names one."""
    lines = _lines(log)
    return _engine_traceback(lines) or next((text for _, text in lines if _named(text)), None)


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
    for pattern, text in FIXES:
        m = pattern.search(cause or "")
        if m:
            return text.format(*m.groups())
    return None


def explained(cause: str | None) -> str:
    """The cause, and its fix where known."""
    if cause is None:
        return "its log names no exception"
    how = fix(cause)
    return f"{cause} (fix: {how})" if how else cause


def start_failure(message: str, log_path: Path | str | None) -> str:
    """The line of a start that failed (Server.wait_ready's ServerError, e.g. "vLLM exited with code 1 before it was
    ready; log ..., last lines: ..."): its head, then the engine core's own error and its fix, and the log, where the
    log names one; the message as it is where it names none."""
    log = _read(log_path)
    cause = root_cause(log) if log else None
    if cause is None:
        return message
    head, _, rest = message.partition(";")
    tail = rest.partition("\n")[2]
    return f"{head}: {explained(cause)} (log {log_path})" + (f"\nlast lines:\n{tail}" if tail else "")


def _read(log_path: Path | str | None) -> str:
    return Path(log_path).read_text(encoding="utf-8", errors="replace") if log_path and Path(log_path).exists() else ""


def died(log: str, alive: bool) -> bool:
    """Whether the engine core is gone: the server's process exited, or its log says the engine died."""
    return not alive or bool(DEATH.search(log))


def death_line(log_path: Path | str | None, alive: bool, lead: str) -> str | None:
    """The one line for a dead engine, or None where it lives: `lead` (what died where, e.g. "vLLM's engine died at
    /sleep"), its log's root cause, and the log's path."""
    log = _read(log_path)
    if not died(log, alive):
        return None
    return f"{lead}: {explained(root_cause(log))} (log {log_path})"
