"""What a workflow job prints when it fails: one line on stderr (the log keeps the whole message), no traceback."""
import asyncio
import signal

import pytest

from specsweep import snakejob
from specsweep.core.errors import CellError


def test_a_failed_cell_shows_one_line_without_a_dangling_last_lines_and_the_log_keeps_them(tmp_path, capsys):
    log = tmp_path / "job.log"

    def fail():
        raise CellError("bench cell s/b: server died during the cell (3 of 16 requests finished and are kept in "
                        "r.jsonl); log /x/server.log, last lines:\nINFO one\nERROR two")

    with pytest.raises(SystemExit) as exit_:
        snakejob.run(str(log), fail)
    assert exit_.value.code == 1
    assert capsys.readouterr().err.splitlines() == [
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
