"""Issue 52, item 4: SGLang on the Gated DeltaNet hybrid. Whether SGLang 0.5.17's DFLASH serves a hybrid target is
not documented (docs/backends.md#sglang-on-a-hybrid-target), so preflight warns in one line, keyed on the SGLang
version it probed, and the preset gpu_sglang_27b_hybrid is the study that answers it."""
import sys

from specsweep.backends.sglang import checks as sglang_checks
from specsweep.grid.config import compose_jobs
from specsweep.models import shaped

SGLANG = ["server=sglang", f"server.python={sys.executable}", "kernel=sglang_triton"]


def job(tmp_path, name, pair, *extra):
    out = shaped.write(name, tmp_path / name, with_tokenizer=False)
    [cfg] = compose_jobs([f"results_dir={tmp_path / 'r'}", *SGLANG, f"pair={pair}", f"pair.target={out}/target",
                          f"pair.drafter={out}/drafter", "pair.built_by_workflow=false", *extra])
    return cfg


def test_dflash_on_a_hybrid_target_warns_naming_the_probed_version(tmp_path):
    cfg = job(tmp_path, "qwen3.6-27b", "qwen3.6-27b-dflash")
    got = sglang_checks.check_sglang_hybrid(cfg, {"server_env": {"sglang": "0.5.17"}})
    assert got.status == "warn" and "\n" not in got.message
    assert got.message.startswith("SGLang 0.5.17: DFLASH on a Gated DeltaNet hybrid target (48 linear-attention "
                                  "layers) has not run here")
    assert "(not probed)" in sglang_checks.check_sglang_hybrid(cfg, {}).message


def test_a_release_seen_serving_it_a_dense_target_or_a_baseline_pass(tmp_path, monkeypatch):
    hybrid = job(tmp_path, "qwen3.5-27b", "qwen3.5-27b-dflash")
    monkeypatch.setattr(sglang_checks, "HYBRID_DFLASH_VERIFIED", ("0.5.17",))
    assert sglang_checks.check_sglang_hybrid(hybrid, {"server_env": {"sglang": "0.5.17"}}).status == "pass"
    monkeypatch.setattr(sglang_checks, "HYBRID_DFLASH_VERIFIED", ())
    dense = job(tmp_path, "qwen3-8b", "qwen3-8b-dflash-b16")
    assert sglang_checks.check_sglang_hybrid(dense, {"server_env": {"sglang": "0.5.17"}}).status == "pass"
    base = job(tmp_path / "b", "qwen3.6-27b", "qwen3.6-27b-dflash", "pair.method=none")
    assert sglang_checks.check_sglang_hybrid(base, {"server_env": {"sglang": "0.5.17"}}).status == "pass"


def test_the_preset_runs_the_hybrid_pair_on_the_bundle_with_real_acceptance():
    [cfg] = compose_jobs(["experiment=gpu_sglang_27b_hybrid", "results_dir=/root/res"])
    assert cfg["server"]["backend"] == "sglang" and cfg["kernel"]["name"] == "sglang_triton"
    assert cfg["pair"]["target"] == "/root/res/models/qwen3.6-27b-dflash-shaped/target"
    assert cfg["sweep"]["set_acceptance"] == [None] and cfg["server"]["extra_args"] == ["--load-format", "dummy"]
