"""bench/aa_resample.py's pools (issue 54's resampled A/A): baseline repeats found under a folder, grouped by
configuration, with blocks that are sequential.block_log_ratios' own; A/A cells and invalid cells left out; a run
the same for the same seed. The figures are the dated page's (docs/campaigns/2026-12-06-cpu-aa-resample.md)."""
import json
import math
import shutil
import sys

import numpy as np
from helpers import REPO

from specsweep.core import layout
from specsweep.verdicts import sequential

sys.path.insert(0, str(REPO))
from bench import aa_resample  # noqa: E402


def test_pools_from_folders_leave_out_aa_and_invalid_cells_and_hold_the_real_blocks(tmp_path):
    root = aa_resample.write_cells(tmp_path / "s", "tiny-gpu-c1")             # 4 launches, 13 repeats
    launch = root / "tiny-gpu"
    shutil.copytree(launch / "base-target-x", launch / "base-aa-target-x")    # an A/A cell: not a baseline
    bench = sorted((launch / "base-target-x").iterdir())[0]
    (bench / layout.METRICS).write_text(json.dumps({"valid": False}))        # invalid: left out
    pools, skipped = aa_resample.load_pools("cpu", [root], "config")
    assert [p.repeats for p in pools] == [12] and skipped == [f"{bench}: marked invalid"]
    assert (pools[0].prompts, len(pools[0].studies)) == (16, 4)
    per_study, _ = aa_resample.load_pools("cpu", [root], "study")
    assert sorted(p.repeats for p in per_study) == [2, 3, 3, 4]
    b = pools[0].blocks
    assert np.isnan(np.diag(b)).all() and np.allclose(b, -b.T, equal_nan=True)   # exchangeable: i vs j = -(j vs i)
    rows = [json.loads(x) for x in (sorted((launch / "base-target-x").iterdir())[1] / layout.REQUESTS).open()]
    other = [json.loads(x) for x in (sorted((root / "tiny-gpu-sched" / "base-target-x").iterdir())[0]
                                     / layout.REQUESTS).open()]
    want = sequential.block_log_ratios([rows], [other])[0]
    assert any(math.isclose(x, want) for x in b.ravel())


def test_a_run_is_the_same_for_the_same_seed_and_pools():
    pools = {"h200": aa_resample.json_pools("h200", aa_resample.AA_REQUESTS)}
    one = aa_resample.run(pools, 300, 7, "planned")
    two = aa_resample.run(pools, 300, 7, "planned")
    assert [r["false_verdicts"] for r in one] == [r["false_verdicts"] for r in two]
    assert one[0]["studies"] == 300 and one[0]["pools_used"] == 2
