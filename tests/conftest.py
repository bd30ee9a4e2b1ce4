import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DATA = Path(__file__).parent / "data"
FAKE_SGLANG = Path(__file__).parent / "fake_sglang"


def run(argv, cwd=REPO, timeout=900, env=None):
    """Run a command the way a user would; return the completed process (text)."""
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="session")
def tiny_results(tmp_path_factory) -> Path:
    """A results_dir holding the embedded tiny pair, built and trained once per test session by the DAG's
    own rules (its Snakemake working directory is the sibling `work/`, which the smoke study shares)."""
    root = tmp_path_factory.mktemp("session")
    results = root / "results"
    prebuilt = os.environ.get("SPECSWEEP_TEST_PAIR")   # development only: a models/tiny built earlier, copied
    if prebuilt:
        import time

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


def files_holding(root: Path, text: str) -> list[Path]:
    """The files under root whose bytes contain text."""
    return [f for f in root.rglob("*") if f.is_file() and text.encode() in f.read_bytes()]


def snakemake_argv(workdir, results, *overrides, study="t", extra=()):
    """`snakemake --cores 2` on this repo's workflow, with Hydra overrides passed as its users pass them. One
    repeat per bench cell unless a test asks for more: the default sweep's ten are for verdicts, not wiring."""
    return [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--cores", "2", *extra,
            "--config", f"study={study}", f"results_dir={results}",
            "overrides=" + " ".join(["sweep.repeats=1", *overrides])]


def prebuilt_pair(tiny_results) -> list[str]:
    """Overrides that point a study at the session's tiny pair instead of building another."""
    models = tiny_results / "models" / "tiny"
    return [f"pair.target={models / 'target'}", f"pair.drafter={models / 'drafter'}", "pair.built_by_workflow=false"]


def standin_site(tmp_path, version: str = "0.5.17") -> Path:
    """The SGLang stand-in as an installed SGLang looks to preflight and the launch's probe: its package, version
    and DFLASH worker file. The stand-in answers as 0.5.17 unless STANDIN_SGLANG_VERSION says 0.5.23."""
    site = tmp_path / "site"
    shutil.copytree(FAKE_SGLANG / "sglang", site / "sglang")
    (site / "sglang" / "srt" / "speculative").mkdir(parents=True)
    (site / "sglang" / "srt" / "speculative" / "dflash_worker_v2.py").write_text("")
    (site / f"sglang-{version}.dist-info").mkdir()
    (site / f"sglang-{version}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return site


def standin_study(tiny_results, tmp_path, startup_s) -> tuple[Path, Path, list[str]]:
    """Overrides for a study of the session's tiny pair on the SGLang stand-in: the folder where it records each
    launch (STANDIN_RECORD_DIR), its site (Snakemake's env_check finds it there too), and the overrides."""
    records = tmp_path / "records"
    records.mkdir()
    site = standin_site(tmp_path)
    return records, site, [*prebuilt_pair(tiny_results), "server=sglang", f"server.python={BIN / 'python'}",
                     "kernel=sglang_fa3", f"+server.env.PYTHONPATH={site}", f"+server.env.STANDIN_RECORD_DIR={records}",
                     f"+server.env.STANDIN_STARTUP_S={startup_s}"]


def standin_k(record: dict) -> int:
    """The K a stand-in launch served (its block less one; 0 for a baseline), from its recorded argv."""
    argv = record["argv"]
    flag = "--speculative-num-draft-tokens"
    return int(argv[argv.index(flag) + 1]) - 1 if flag in argv else 0


def wait_for(predicate, timeout_s, what, interval_s=0.2):
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def snakemake(workdir, *args, timeout=900):
    return run([str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--cores", "2", *args],
               timeout=timeout)


SMOKE_OVERRIDES = ["dataset.num_prompts=4", "sweep.repeats=2"]
SMOKE = ["study=smoke", "sweep=smoke", *SMOKE_OVERRIDES]      # Hydra overrides


def smk_config(results, *extra):
    """The smoke study as `snakemake --config` takes it: two repeats, so that it has two speculative runs to
    compare (the MLflow UI's compare view) at the cost of two 4-prompt bench cells."""
    return ["--config", "study=smoke", "sweep=smoke", f"results_dir={results}",
            "overrides=" + " ".join([*SMOKE_OVERRIDES, *extra])]


@pytest.fixture(scope="session")
def smoke(tiny_results):
    """The smoke study in the session's results, whose tiny pair the DAG has already built there. One per test
    session: the workflow, SLURM and browser tests all read it (the SLURM and browser tests only read it)."""
    work = tiny_results.parent / "work"
    cfg = smk_config(tiny_results)
    first = snakemake(work, *cfg)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    return work, cfg
