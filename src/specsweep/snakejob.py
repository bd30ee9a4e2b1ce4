"""What a workflow script calls: run one library function with its output in the rule's log.

All of the job's output goes to its log, down to the file descriptors, so that what a library writes there
(a warning, a C extension's lines at exit) stays out of the console; what the user should see goes to the console
(core.progress: `say`, the progress bars), the job's stderr as Snakemake gave it. A known failure (bad config, failed cell, server trouble) ends the job with its one-line message on
stderr, where Snakemake's user sees it, and in the log; no traceback.
"""
from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
from typing import Callable

from specsweep.core import progress
from specsweep.core.errors import SpecsweepError


class Terminated(KeyboardInterrupt):
    """SIGTERM/SIGHUP to a job: unwind like Ctrl-C, so every `with Server` stops what it started. A KeyboardInterrupt,
    since asyncio re-raises only that and SystemExit from a loop callback (events.Handle._run) and logs any other
    BaseException as "Exception in callback", and the loop goes on: a signal that lands while a response stream is
    read there would otherwise leave the cell running to its end."""


def _raise_terminated(signum, frame):
    raise Terminated(f"stopped by signal {signal.Signals(signum).name}")


_saved: tuple[int, int] | None = None      # the process's stdout and stderr before its first job


def restore_descriptors() -> None:
    """Stdout and stderr as they were before run (a job's process never needs it: it ends with its job)."""
    global _saved
    if _saved:
        for fd, saved in zip((1, 2), _saved):
            os.dup2(saved, fd)
            os.close(saved)
        _saved = None
    progress.set_console(None)


def run(log_path: str, fn: Callable[[], object]) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_terminated)
    sys.stdout.flush()
    sys.stderr.flush()
    global _saved
    _saved = _saved or (os.dup(1), os.dup(2))
    stderr = os.fdopen(os.dup(2), "w", buffering=1)      # the console
    progress.set_console(stderr)
    log = open(log_path, "w", buffering=1)
    for fd in (1, 2):               # whatever writes to the descriptors, until the process ends, lands in the log
        os.dup2(log.fileno(), fd)
    with log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            fn()
        except SpecsweepError as e:
            print(f"specsweep: {e}", file=log)
            lines = str(e).splitlines()
            # one line per failed check; else the first, where a server's last log lines follow it only in the log
            shown = lines if e.multiline else [lines[0].removesuffix(", last lines:").removesuffix(" last lines:")]
            for line in shown:
                print(f"specsweep: {line}", file=stderr)
            print(f"specsweep: details in {log_path}", file=stderr)
            sys.exit(1)
        except (KeyboardInterrupt, Terminated) as e:
            print(f"specsweep: interrupted ({e or 'SIGINT'}); servers started by this job were stopped", file=log)
            sys.exit(130)
        except Exception as e:         # a bug: its traceback in the log, its last line where the user sees it
            print(f"specsweep: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=stderr)
            print(f"specsweep: traceback in {log_path}", file=stderr)
            raise
    # The work is done and the log closed. The interpreter's teardown would still garbage-collect every object
    # the job's imports made (0.9 s after MLflow's); frozen objects are out of the collector's reach.
    gc.freeze()
