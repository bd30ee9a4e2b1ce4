"""What a workflow job prints when it fails: one line on stderr (the log keeps the whole message), no traceback."""
import pytest

from specsweep import snakejob
from specsweep.errors import CellError


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
