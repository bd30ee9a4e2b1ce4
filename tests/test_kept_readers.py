"""The readers of kept studies that other work still uses, library modules of specsweep.read with a command each:
replay_looks (recorded studies through each stopping rule) and warm_study (a study cold, then warm). Their smoke
runs and a kept study read back; nothing is written."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def command(module: str, *args: str, **env_vars: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
           **env_vars}
    return subprocess.run([sys.executable, "-m", f"specsweep.read.{module}", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)


def test_replay_looks_smoke_and_a_folder_with_no_kept_study(tmp_path):
    out = command("replay_looks", "--smoke")                  # seeded normal blocks through each rule
    assert out.returncode == 0, out.stderr
    assert "mean group repeats" in out.stdout and "nothing written" in out.stdout
    # a folder that holds no kept study: one line that names it, no traceback
    empty = command("replay_looks", str(tmp_path))
    assert empty.returncode == 1 and empty.stderr.startswith(f"replay_looks: {tmp_path}: no kept default study")
    assert "Traceback" not in empty.stderr and len(empty.stderr.splitlines()) == 1


def test_warm_study_smoke_and_a_kept_study_read_against_itself(tmp_path):
    out = command("warm_study", "--smoke", TMPDIR=str(tmp_path))   # two made-up studies, the warm one a hit at 0.6x
    assert out.returncode == 0, out.stderr
    assert '"worst": 0.6, "met": true' in out.stdout and "nothing written" in out.stdout
    assert not list(tmp_path.iterdir())                       # its made-up studies removed
    kept = REPO / "bench" / "archive" / "h200" / "vllm" / "qwen3.6-27b-hybrid"      # three members, all misses
    same = command("warm_study", str(kept), str(kept))
    assert same.returncode == 0 and same.stdout.count("| 1.0 | miss |") == 3 and '"met": false' in same.stdout


def test_the_library_functions_read_without_a_command(tmp_path):
    from specsweep.read import replay_looks, warm_study

    studies = replay_looks.replay(replay_looks.smoke_blocks(), 10)
    assert {"sequence", "planned", "one_look"} <= set(studies)
    cold, warm = warm_study.smoke_studies(tmp_path)
    assert warm_study.read(cold, warm, (400.0, 350.0), warm_study.REFERENCE_WALL_S)["members"]
