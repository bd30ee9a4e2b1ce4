"""A fixture's children are stopped when pytest is stopped: SIGTERM to a pytest mid-fixture (what `timeout`
sends) leaves no process behind, neither in the group the fixture started (a DAG) nor in a group of its own
below it (a server a job started). The child pytest's fixture runs a cheap stand-in, not the real DAG."""
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import forget_if_empty, group_alive, popen_group, wait_for

TESTS = Path(__file__).parent

# A stand-in DAG: it starts a child in its own group (as snakemake's jobs are) and a "server" in a new session
# (as server.py starts one), writes their ids, and waits.
DAG = textwrap.dedent("""
    import json, os, subprocess, sys, time
    worker = subprocess.Popen(["sleep", "600"])
    server = subprocess.Popen(["sleep", "601"], start_new_session=True)
    with open(sys.argv[1] + ".tmp", "w") as f:
        json.dump({"pgid": os.getpgid(0), "worker": worker.pid, "server": server.pid}, f)
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
""")

CHILD_TEST = textwrap.dedent("""
    import sys

    import pytest

    from helpers import run

    @pytest.fixture(scope="session")
    def long_dag():
        run([sys.executable, "-c", {dag!r}, {ids!r}], timeout=900)

    def test_never_reached(long_dag):
        pass
""")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigterm_mid_fixture_leaves_no_process(tmp_path):
    ids = tmp_path / "ids.json"
    (tmp_path / "test_child.py").write_text(CHILD_TEST.format(dag=DAG, ids=str(ids)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    # -p conftest: the suite's own conftest (its signal handler and session finish), found on PYTHONPATH
    child = popen_group([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                         str(tmp_path / "test_child.py")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
    wait_for(lambda: ids.exists() or child.poll() is not None, 120, "the child's fixture to start its DAG")
    assert ids.exists(), child.communicate()[0][-3000:]
    started = json.loads(ids.read_text())
    assert started["pgid"] != child.pid and alive(started["worker"]) and alive(started["server"])

    os.kill(child.pid, signal.SIGTERM)                 # pytest alone, as `timeout` signals it
    out, _ = child.communicate(timeout=60)
    assert child.returncode != 0, out[-3000:]
    wait_for(lambda: not group_alive(started["pgid"]), 10, "the fixture's process group to be gone")
    wait_for(lambda: not alive(started["worker"]) and not alive(started["server"]), 10,
             "the worker and the server to be gone")
    forget_if_empty(child)
