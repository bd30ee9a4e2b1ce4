"""The line of a server's log that says why it failed, for every server backend: the last exception line of a Python
traceback (its chain followed) that states a cause rather than wraps one, shortened for a message, with its fix where
the backend knows it; and the one line of a start that failed (`start_failure`, `started`).

What is a backend's own it gives here: how its log's lines read (its prefix, the process that wrote a line), the
exceptions that only wrap a cause (vLLM's "Engine core initialization failed. See root cause above", SGLang's
"Initialization failed. Please see the error messages above") and the fixes of causes it knows, in the study's keys
(backends/vllm/engine_death.py, backends/sglang/session.py).
"""
from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from specsweep.core.errors import ServerError

if TYPE_CHECKING:
    from specsweep.run.server import Server

# An exception named on a line of its own (a traceback's last line, or a logged `Name: message`)
EXCEPTION = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))(?::\s*(.*))?$")
TRACEBACK = "Traceback (most recent call last):"       # a line ending so starts one (a logged one has a lead)
# What Python prints between the tracebacks of one chain
CHAINED = re.compile(r"^(The above exception was the direct cause|During handling of the above exception)")
# Never a cause, whatever the backend: tasks cancelled and the process told to stop
ALWAYS_WRAPPERS = frozenset({"CancelledError", "SystemExit", "KeyboardInterrupt"})
LIMIT = 240            # a cause longer than this is cut in its middle (`shorten`)

Line = tuple[str, str]     # (the process that wrote it, "" where the log does not say; its text without the prefix)
Fixes = tuple[tuple[re.Pattern, str], ...]     # a cause's pattern, and its fix ({0}, {1}: the pattern's groups)


@dataclass(frozen=True)
class Wrappers:
    """A backend's exceptions that wrap the cause rather than state it: by their name, or by their message."""
    names: frozenset[str] = frozenset()
    messages: re.Pattern | None = None

    def states_cause(self, text: str) -> bool:
        """The line names an exception, and one that states a cause."""
        m = EXCEPTION.match(text)
        if not m:
            return False
        name = m.group(1).rsplit(".", 1)[-1]
        wraps = name in self.names or name in ALWAYS_WRAPPERS
        return not wraps and not (self.messages and self.messages.search(m.group(2) or ""))


def chain_cause(lines: list[Line], start: int, wrappers: Wrappers) -> str | None:
    """The last exception line stating a cause in the traceback that starts at lines[start] and those chained after
    it ("The above exception was the direct cause ..."): the exception raised last, e.g. vLLM's ValueError after a
    torch error it caught and explained. Lines another process wrote in between are skipped."""
    who, found, i = lines[start][0], None, start + 1
    while i < len(lines):
        src, text = lines[i]
        if src and src != who:
            i += 1
            continue
        if EXCEPTION.match(text):
            found = text if wrappers.states_cause(text) else found
            rest = [t for s, t in lines[i + 1:i + 4] if (not s or s == who) and t]
            if not (rest and CHAINED.match(rest[0])):
                break
        i += 1
    return found


def root_cause(lines: list[Line], wrappers: Wrappers, where: Callable[[str], bool] = lambda who: True) -> str | None:
    """The cause a log states: the first traceback (of a process `where` takes) whose chain states one
    (`chain_cause`), else the first line anywhere naming an exception that states a cause (Python prints a chained
    traceback root first); None where no line names one."""
    for i, (who, text) in enumerate(lines):
        if text.endswith(TRACEBACK) and where(who):
            found = chain_cause(lines, i, wrappers)
            if found:
                return found
    return next((text for _, text in lines if wrappers.states_cause(text)), None)


def shorten(cause: str, limit: int = LIMIT) -> str:
    """The cause cut in its middle where longer than `limit`: its first sentence (what failed) and its end (often
    what is missing), at word boundaries. transformers' "Can't load image processor for '<dir>'. If you were trying
    ... make sure '<dir>' is the correct path to a directory containing a preprocessor_config.json file" keeps the
    folder and the file."""
    if len(cause) <= limit:
        return cause
    head = cause.split(". ", 1)[0] + "."
    if len(head) > limit // 2:
        head = cause[:limit // 2].rsplit(" ", 1)[0]
    room = limit - len(head) - 3
    tail = cause[-room:]
    tail = tail.split(" ", 1)[1] if " " in tail and not cause[-room - 1].isspace() else tail
    return f"{head} … {tail.lstrip()}"


def fix(cause: str | None, fixes: Fixes) -> str | None:
    """The fix of a known cause, or None."""
    for pattern, text in fixes:
        m = pattern.search(cause or "")
        if m:
            return text.format(*m.groups())
    return None


def explained(cause: str | None, fixes: Fixes = ()) -> str:
    """The cause (shortened) and its fix where known (matched on the whole cause)."""
    if cause is None:
        return "its log names no exception"
    how = fix(cause, fixes)
    return f"{shorten(cause)} (fix: {how})" if how else shorten(cause)


def read(log_path: Path | str | None) -> str:
    return Path(log_path).read_text(encoding="utf-8", errors="replace") if log_path and Path(log_path).exists() else ""


def start_failure(message: str, log_path: Path | str | None, cause_of: Callable[[str], str | None],
                  fixes: Fixes = ()) -> str:
    """The line of a start that failed (Server.wait_ready's ServerError, "<kind> exited with code 1 before it was
    ready; log ..., last lines: ..."): its head, then the engine's own error (`cause_of` the log) and its fix, and the
    log; the message as it is where the log names no cause."""
    log = read(log_path)
    cause = cause_of(log) if log else None
    if cause is None:
        return message
    head, _, rest = message.partition(";")
    tail = rest.partition("\n")[2]
    return f"{head}: {explained(cause, fixes)} (log {log_path})" + (f"\nlast lines:\n{tail}" if tail else "")


@contextmanager
def started(srv: Server, failure: Callable[[str, Path | None], str]) -> Iterator[Server]:
    """The server up (Server.__enter__), stopped on leaving; a start that fails raises `failure(message, log)`:
    the backend's `start_failure`, which names the engine's own error, not its wrapper."""
    try:
        srv.__enter__()
    except ServerError as e:
        raise ServerError(failure(str(e), srv.log_path)) from None
    try:
        yield srv
    except BaseException:
        if not srv.__exit__(*sys.exc_info()):      # the server sees why it stops, as a `with` would show it
            raise
    else:
        srv.__exit__(None, None, None)
