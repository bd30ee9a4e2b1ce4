"""The suite's fixtures and its tiers. Plain helpers are in helpers.py.

Tiers (markers, registered in pyproject.toml): a test that uses the session's trained pair (`tiny_results`) is
marked `trained_pair` here, one that uses the smoke study (`smoke`) `dag` too; `server`, `dag`, `slurm` and
`browser` are marked in the test files. The fast tier, `-m "not server and not dag and not trained_pair and not
slurm and not browser"`, therefore never trains the pair."""
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from helpers import BIN, REPO, make_random_pair, raise_on_signals, run, smk_config, snakemake, stop_all

BY_FIXTURE = {"tiny_results": ("trained_pair",), "smoke": ("trained_pair", "dag")}


def pytest_configure(config):
    raise_on_signals()
    # specsweep always names its MLflow store; MLflow's own default (any call without a tracking URI) is
    # sqlite:///mlflow.db in the current directory, the repo's: how a stray store was once committed. Such a
    # call lands in a scratch store here instead, and the session fails (pytest_sessionfinish).
    config.stray_store = Path(tempfile.mkdtemp(prefix="specsweep-stray-mlflow-")) / "mlflow.db"
    config.repo_store_before = (REPO / "mlflow.db").exists()
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{config.stray_store}"


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, marks in BY_FIXTURE.items():
            if fixture in item.fixturenames:
                for mark in marks:
                    item.add_marker(mark)


def pytest_sessionfinish(session, exitstatus):
    """Whatever a test or fixture started and left running (pytest interrupted mid-fixture, a test that failed
    before its own clean-up) is stopped by process group here. An MLflow store written without a tracking URI
    fails the session."""
    stop_all()
    config = session.config
    stray = [p for p, new in ((config.stray_store, True), (REPO / "mlflow.db", not config.repo_store_before))
             if new and p.exists()]
    if stray:
        import sys

        print(f"\nspecsweep tests: MLflow was called without a tracking URI and wrote {stray}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(config.stray_store.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_results(tmp_path_factory) -> Path:
    """A results_dir holding the embedded tiny pair, built and trained once per test session by the DAG's
    own rules (its Snakemake working directory is the sibling `work/`, which the smoke study shares)."""
    root = tmp_path_factory.mktemp("session")
    results = root / "results"
    prebuilt = os.environ.get("SPECSWEEP_TEST_PAIR")   # development only: a models/tiny built earlier, copied
    if prebuilt:
        tiny = results / "models" / "tiny"
        shutil.copytree(prebuilt, tiny)
        # as fresh as a pair trained now, each step newer than its input: Snakemake would retrain a step whose
        # output is older than its script in this checkout, so the DAG tests in `work/` would train again
        now = time.time()
        for i, step in enumerate(("tokenizer", "target", "drafter", "logs")):
            for f in (tiny / step).rglob("*"):
                os.utime(f, (now - 10 + i, now - 10 + i))
        return results
    drafter = results / "models" / "tiny" / "drafter" / "config.json"
    out = run([str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(root / "work"), "--cores", "2",
               "--config", f"results_dir={results}", "--", str(drafter)], timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return results


@pytest.fixture(scope="session")
def random_results(tmp_path_factory) -> Path:
    """A results_dir whose models/tiny is an untrained pair of the tiny pair's shapes and tokenizer
    (helpers.make_random_pair): seconds to make, for the fast tier's engine, file-format and preflight tests."""
    root = tmp_path_factory.mktemp("random") / "results"
    make_random_pair(root)
    return root


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    """Port/GPU claims private to one test."""
    import specsweep.claims as claims

    monkeypatch.setattr(claims, "LOCK_DIR", tmp_path / "locks")
    return tmp_path / "locks"


@pytest.fixture
def issued_keys(monkeypatch) -> list[str]:
    """Every API key a server launch makes in this test, in order (still random), so a test can look for them."""
    import specsweep.server as server

    keys, new = [], server.new_api_key

    def recorded():
        keys.append(new())
        return keys[-1]
    monkeypatch.setattr(server, "new_api_key", recorded)
    return keys


@pytest.fixture(scope="session")
def smoke(tiny_results):
    """The smoke study in the session's results, whose tiny pair the DAG has already built there. One per test
    session: the workflow, SLURM and browser tests all read it (the SLURM and browser tests only read it)."""
    work = tiny_results.parent / "work"
    cfg = smk_config(tiny_results)
    first = snakemake(work, *cfg)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    return work, cfg
