"""What a job tells its user while it runs, also from inside a Snakemake job whose output goes to a log.

A Snakemake job's stdout and stderr (and every library's, down to the file descriptors: warnings, a C extension's
exit-time lines) go to the job's own log (snakejob.run). The console is what the user sees: the terminal Snakemake
runs in, or the file or pipe its output goes to. On a terminal a long step shows a progress bar; elsewhere a bar's
redraws would be a wall of lines, so it shows none and the step says one line at a time what it did (`say`).
"""
import sys
import time

from tqdm import tqdm

_console = None         # the user's console, where snakejob.run set one; else the process's own stderr


def set_console(stream) -> None:
    global _console
    _console = stream


def console():
    return _console or sys.__stderr__


def on_terminal() -> bool:
    try:
        return console().isatty()
    except (AttributeError, ValueError):
        return False


def say(line: str) -> None:
    """One line for the user, on the console, and in the job's log where the console is not stdout."""
    print(line, flush=True)
    if _console is not None:
        print(line, file=_console, flush=True)


def progress_bar(**kwargs) -> tqdm:
    """A bar on a terminal; none elsewhere (the caller says its lines)."""
    disable = kwargs.pop("disable", False) or not on_terminal()
    return tqdm(file=console(), leave=False, mininterval=0.2, disable=disable, **kwargs)


class Steps:
    """A training loop's one line of progress, at most every `every_s` seconds: its step, loss and time left."""

    def __init__(self, what: str, total: int, every_s: float = 30.0):
        self.what, self.total, self.every_s = what, total, every_s
        self.t0 = self.last = time.monotonic()

    def tick(self, step: int, loss: float) -> None:
        now, done = time.monotonic(), step + 1
        if done < self.total and now - self.last < self.every_s:
            return
        self.last = now
        left = (now - self.t0) / done * (self.total - done)
        say(f"{self.what}: step {done}/{self.total}, loss {loss:.3f}, "
            + (f"about {left / 60:.1f} min left" if done < self.total else f"done in {(now - self.t0) / 60:.1f} min"))
