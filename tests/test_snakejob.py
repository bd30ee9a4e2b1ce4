"""What a workflow job prints when it fails: one line on stderr (the log keeps the whole message), no traceback."""
import asyncio
import os
import signal

import pytest

from specsweep import snakejob
from specsweep.core import progress
from specsweep.core.errors import CellError


@pytest.fixture(autouse=True)
def descriptors():
    """A job sends the process's stdout and stderr to its log for good (its process ends with it); not pytest's."""
    yield
    snakejob.restore_descriptors()


def test_a_failed_cell_shows_one_line_without_a_dangling_last_lines_and_the_log_keeps_them(tmp_path, capfd):
    log = tmp_path / "job.log"

    def fail():
        raise CellError("bench cell s/b: server died during the cell (3 of 16 requests finished and are kept in "
                        "r.jsonl); log /x/server.log, last lines:\nINFO one\nERROR two")

    with pytest.raises(SystemExit) as exit_:
        snakejob.run(str(log), fail)
    assert exit_.value.code == 1
    assert capfd.readouterr().err.splitlines() == [
        "specsweep: bench cell s/b: server died during the cell (3 of 16 requests finished and are kept in "
        "r.jsonl); log /x/server.log",
        f"specsweep: details in {log}"]
    assert log.read_text().endswith("last lines:\nINFO one\nERROR two\n")


def test_a_sigterm_inside_an_event_loop_callback_ends_the_job(tmp_path):
    """Reading a response stream runs in asyncio's loop callbacks, where asyncio logs and swallows any BaseException
    but KeyboardInterrupt and SystemExit: the job's SIGTERM must still end the job (exit 130), not the callback."""
    ran_on = []

    async def cell():
        loop = asyncio.get_running_loop()
        loop.call_soon(signal.raise_signal, signal.SIGTERM)       # handled in the callback, as a stream's read is
        for _ in range(20):
            await asyncio.sleep(0.05)
            ran_on.append(1)

    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with pytest.raises(SystemExit) as exit_:
            snakejob.run(str(tmp_path / "job.log"), lambda: asyncio.run(cell()))
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    assert exit_.value.code == 130 and len(ran_on) < 20
    assert "interrupted (stopped by signal SIGTERM)" in (tmp_path / "job.log").read_text()


def test_what_libraries_write_goes_to_the_log_and_what_the_user_should_see_to_the_console(tmp_path, capfd):
    """A library's lines on stderr, and a C extension's on the descriptor itself, during the job and after it (at
    exit, as nanobind's `leaked` lines), land in the job's log; `progress.say` lines reach the console too."""
    import sys

    log = tmp_path / "job.log"

    def job():
        print("a library's warning", file=sys.stderr)
        os.write(2, b"nanobind: leaked 1 instances of type triton\n")
        progress.say("[specsweep] group g: repeat 1 of 2 done")

    snakejob.run(str(log), job)
    os.write(2, b"nanobind: leaked 2 types at exit\n")
    console = capfd.readouterr()
    assert console.err == "[specsweep] group g: repeat 1 of 2 done\n" and console.out == ""
    text = log.read_text() if log.exists() else ""
    for line in ("a library's warning", "leaked 1 instances", "repeat 1 of 2 done", "leaked 2 types at exit"):
        assert line in text, (line, text)


def test_training_says_one_line_of_progress_at_a_modest_rate(capsys, monkeypatch):
    """core.progress.Steps: step, loss and time left, at most once per `every_s`, and always at the last step."""
    clock = iter([0.0, 1.0, 2.0, 40.0, 41.0, 50.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    steps = progress.Steps("tiny pair: target", 5, every_s=30)
    for step, loss in enumerate([5.0, 4.0, 3.0, 2.0, 1.0]):
        steps.tick(step, loss)
    assert capsys.readouterr().out.splitlines() == [
        "tiny pair: target: step 3/5, loss 3.000, about 0.4 min left",
        "tiny pair: target: step 5/5, loss 1.000, done in 0.8 min"]
