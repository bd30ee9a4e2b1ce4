import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DATA = Path(__file__).parent / "data"


def run(argv, cwd=REPO, timeout=900, env=None):
    """Run a command the way a user would; return the completed process (text)."""
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="session")
def tiny_results(tmp_path_factory) -> Path:
    """A results_dir holding the embedded tiny pair, built once per test session."""
    from specsweep.tiny import build_pair

    root = tmp_path_factory.mktemp("results")
    build_pair(root / "models" / "tiny")
    return root


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    """Port/GPU claims private to one test."""
    import specsweep.server as server

    monkeypatch.setattr(server, "LOCK_DIR", tmp_path / "locks")
    return tmp_path / "locks"
