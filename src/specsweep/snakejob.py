"""What a workflow script calls: run one library function with its output in the rule's log.

A known failure (bad config, failed cell, server trouble) ends the job with its one-line message on
stderr, where Snakemake's user sees it, and in the log; no traceback.
"""
from __future__ import annotations

import contextlib
import gc
import signal
import sys
from typing import Callable

from specsweep.core.errors import SpecsweepError


class Terminated(KeyboardInterrupt):
    """SIGTERM/SIGHUP to a job: unwind like Ctrl-C, so every `with Server` stops what it started. A KeyboardInterrupt,
    since asyncio re-raises only that and SystemExit from a loop callback (events.Handle._run) and logs any other
    BaseException as "Exception in callback", and the loop goes on: a signal that lands while a response stream is
    read there would otherwise leave the cell running to its end."""


def _raise_terminated(signum, frame):
    raise Terminated(f"stopped by signal {signal.Signals(signum).name}")


def run(log_path: str, fn: Callable[[], object]) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_terminated)
    stderr = sys.stderr
    with open(log_path, "w", buffering=1) as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
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
    # The work is done and the log closed. The interpreter's teardown would still garbage-collect every object
    # the job's imports made (0.9 s after MLflow's); frozen objects are out of the collector's reach.
    gc.freeze()
