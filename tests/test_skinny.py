"""The split-K GEMM (dflash/skinny.py) computes x @ w.T, and a row's result does not depend on the other
rows: run in Triton's interpreter on CPU (fp32, exact-precision dots), since CI has no GPU."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

SCRIPT = """
import json, torch
from specsweep.models.dflash import skinny
torch.manual_seed(0)
x, w = torch.randn(16, 512), torch.randn(96, 512)
ref = x.double() @ w.double().T
out = {}
for tile in [(32, 128, 1, 4, 4), (32, 128, 2, 4, 4), (64, 128, 4, 4, 4)]:
    got = skinny._launch(x, w, tile)
    alone = skinny._launch(x[3:4].contiguous(), w, tile)
    out[str(tile)] = {"err": (got.double() - ref).abs().max().item(), "row_alone_equal": torch.equal(alone[0], got[3])}
print(json.dumps(out))
"""


def test_split_k_gemm_is_right_and_rows_are_independent():
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(results) == 3
    for tile, r in results.items():
        assert r["err"] < 1e-3, tile            # fp32 sums of 512 products of unit normals
        assert r["row_alone_equal"], tile       # a row gets the same bits alone as inside a block
