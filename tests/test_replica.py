"""Issue 52, item 5: a checkpoint on disk. `specsweep shape NAME DEST --weights` writes random bf16 safetensors
(models/replica.py), sharded, with their index; here on a tiny dense shape only (the 8B pair is about 17 GiB: the GPU
host's `8b-disk` step writes it). The planner reads the weights from those files, and sweep.sleep_level chooses a
sleeping group's level (backends/vllm/sleep_plan.py), refused at 2 with random weights."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from specsweep.backends.vllm import checks as vllm_checks
from specsweep.backends.vllm import sleep_plan
from specsweep.core.errors import ConfigError, SpecsweepError
from specsweep.grid import schedule
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.models import model_shape, replica, shaped
from specsweep.plan import residency

GIB = 1024 ** 3
REPO = Path(__file__).resolve().parents[1]
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16)


def tiny_pair(root):
    """The qwen3-8b family's configs at a tiny size: a target of 4 layers and a 2-layer drafter tapping [1, 2]."""
    fam = shaped.SHAPES["qwen3-8b"]()
    target = {**fam.target, **TINY, "layer_types": ["full_attention"] * 4, "max_window_layers": 4}
    drafter = {**fam.drafter, **{k: v for k, v in TINY.items() if k != "num_hidden_layers"}, "num_hidden_layers": 2,
               "layer_types": ["full_attention"] * 2, "num_target_layers": 4,
               "dflash_config": {"mask_token_id": 5, "target_layer_ids": [1, 2]}}
    for part, cfg in (("target", target), ("drafter", drafter)):
        (root / part).mkdir(parents=True)
        (root / part / "config.json").write_text(json.dumps(cfg))
    return root / "target", root / "drafter"


def test_the_weights_are_sharded_bf16_safetensors_with_their_index(tmp_path):
    target, drafter = tiny_pair(tmp_path)
    total = replica.write_weights(target, shard_bytes=100_000)
    index = json.loads((target / replica.INDEX).read_text())
    files = sorted({*index["weight_map"].values()})
    assert len(files) > 1 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    assert index["metadata"]["total_size"] == total == sum(2 * int(np.prod(s)) for _, s in replica.tensors(
        json.loads((target / "config.json").read_text())))
    assert not list(target.glob("*.partial"))
    seen = {}
    for name in files:                      # the format as the safetensors package reads it
        with safe_open(str(target / name), framework="pt") as f:
            seen.update({k: f.get_tensor(k) for k in f.keys()})
    assert set(seen) == set(index["weight_map"])
    emb, norm = seen["model.embed_tokens.weight"], seen["model.layers.0.input_layernorm.weight"]
    assert emb.dtype == torch.bfloat16 and tuple(emb.shape) == (512, 64) and "lm_head.weight" in seen
    assert torch.isfinite(emb.float()).all() and 0.015 <= emb.float().abs().min() and emb.float().abs().max() < 0.032
    assert abs(emb.float().mean()) < 0.002 and torch.equal(norm.float(), torch.ones(64))
    # the drafter: no embedding, no LM head, no `model.` prefix, and fc over its two tapped layers
    replica.write_weights(drafter)
    with safe_open(str(drafter / "model-00001-of-00001.safetensors"), framework="pt") as f:
        names = set(f.keys())
        assert tuple(f.get_tensor("fc.weight").shape) == (64, 128)
    assert "hidden_norm.weight" in names and "layers.1.mlp.down_proj.weight" in names
    assert not any(n.startswith("model.") or "embed" in n or "lm_head" in n for n in names)


@pytest.mark.parametrize("name", ["qwen3.6-27b", "qwen3.5-27b"])
def test_the_hybrids_tensors_are_transformers_own_names_and_shapes(name):
    """The Gated DeltaNet hybrid's text model as transformers builds it from the same config (on the meta device:
    no memory), the vision tower left out (served with --language-model-only): every name and shape the same."""
    import transformers

    cfg = shaped.SHAPES[name]().target
    with torch.device("meta"):
        model = getattr(transformers, cfg["architectures"][0])._from_config(
            transformers.Qwen3_5Config(**{k: v for k, v in cfg.items() if k != "architectures"}))
    theirs = {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.startswith("model.visual.")}
    ours = replica.tensors(cfg)
    assert len(ours) == len(dict(ours)) and dict(ours) == theirs
    assert sum(2 * int(np.prod(s)) for _, s in ours) / GIB == pytest.approx(50.1, abs=0.1)


def test_an_moe_shape_gets_no_weights_in_one_line():
    with pytest.raises(SpecsweepError, match="an MoE target has no writer here"):
        replica.tensors(shaped.SHAPES["qwen3.6-35b-a3b"]().target)


def test_a_small_hybrid_is_written_and_read_back(tmp_path):
    cfg = shaped.SHAPES["qwen3.6-27b"]().target
    cfg["text_config"].update(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
                              linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                              layer_types=["linear_attention"] * 3 + ["full_attention"])
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    replica.write_weights(tmp_path)
    with safe_open(str(tmp_path / "model-00001-of-00001.safetensors"), framework="pt") as f:
        seen = {k: f.get_tensor(k) for k in f.keys()}
    a = "model.language_model.layers.0.linear_attn."
    assert tuple(seen[a + "in_proj_qkv.weight"].shape) == (2 * 2 * 8 + 4 * 8, 64)       # q, k and v: the conv's width
    assert tuple(seen[a + "conv1d.weight"].shape) == (64, 1, 4) and torch.equal(seen[a + "norm.weight"].float(),
                                                                                torch.ones(8))
    assert tuple(seen["model.language_model.layers.3.self_attn.q_proj.weight"].shape) == (2 * 4 * 16, 64)   # gated
    assert not any(k.startswith("model.visual") for k in seen) and "lm_head.weight" in seen
    import transformers                 # each norm at its neutral value, as transformers' own init gives it

    text = transformers.Qwen3_5TextConfig(**{**cfg["text_config"], "pad_token_id": None})
    own = transformers.Qwen3_5ForCausalLM(text).state_dict()
    norms = {k.replace("model.", "model.language_model.", 1): v for k, v in own.items() if k.endswith("norm.weight")}
    norms = {k: v for k, v in norms.items() if k in seen}
    assert len(norms) == sum(k.endswith("norm.weight") for k in seen) > 8
    assert all(torch.equal(seen[k].float(), v.float()) for k, v in norms.items())
    assert seen["model.language_model.layers.0.input_layernorm.weight"].abs().sum() == 0      # scales by 1 + w


def test_the_planner_reads_the_weights_from_the_files(tmp_path):
    target, drafter = tiny_pair(tmp_path)
    counted = model_shape.weights_bytes(target)                 # config only: the shape's count
    total = replica.write_weights(target)
    assert model_shape.weights_bytes(target) == total and model_shape.weights_bytes(target, dummy=True) == counted
    g = grid(tmp_path, target, drafter)
    base = next(s for s, c in g.servers.items() if c.is_baseline)
    assert sleep_plan.sleeping_weights_bytes(g, base) == total


def grid(tmp_path, target, drafter, *extra):
    return expand(compose_jobs([f"results_dir={tmp_path / 'r'}", "server=vllm_gpu", f"pair.target={target}",
                                f"pair.drafter={drafter}", "pair.built_by_workflow=false", "sweep.residency=sleep",
                                "sweep.num_speculative_tokens=[3]", "sweep.concurrency=[1]", *extra]))


@pytest.mark.parametrize("asked,level", [("auto", 1), ("1", 1), ("2", 2)])
def test_sweep_sleep_level_chooses_the_level(tmp_path, asked, level):
    target, drafter = tiny_pair(tmp_path)
    replica.write_weights(target), replica.write_weights(drafter)
    g = grid(tmp_path, target, drafter, f"sweep.sleep_level={asked}")
    members = schedule.group(g, schedule.leads(g)[0])
    plan = residency.plan(g, members, ["0"], device_bytes=80 * GIB, available_bytes=100 * GIB)
    assert {(p.residency, p.sleep_level) for p in plan.values()} == {("sleep", level)}
    assert ("sweep.sleep_level" in plan[members[0]].note) == (asked != "auto")


def test_level_2_with_random_weights_is_refused_in_one_line(tmp_path):
    target, drafter = tiny_pair(tmp_path)
    g = grid(tmp_path, target, drafter, "sweep.sleep_level=2", "server.extra_args=[--load-format,dummy]")
    members = schedule.group(g, schedule.leads(g)[0])
    with pytest.raises(ConfigError) as e:
        residency.plan(g, members, ["0"], device_bytes=80 * GIB, available_bytes=100 * GIB)
    assert "\n" not in str(e.value) and "sweep.sleep_level 2 with random weights" in str(e.value)
    check = vllm_checks.check_sleep_level(g.configs[members[0]], {})
    assert check.status == "fail" and "--weights" in check.message
    fine = grid(tmp_path / "ok", target, drafter, "sweep.sleep_level=1", "server.extra_args=[--load-format,dummy]")
    assert vllm_checks.check_sleep_level(next(iter(fine.configs.values())), {}).status == "pass"


def test_the_on_disk_preset_wakes_at_level_2_from_files_and_checks_greedy_agreement():
    from specsweep.diagnose import acceptance_checkpoint
    from specsweep.run.bench_cell import greedy_agreement_na

    jobs = compose_jobs(["experiment=gpu_8b_on_disk", "results_dir=/root/res"])
    g = expand(jobs)
    [cfg] = jobs
    assert cfg["pair"]["target"] == "/root/res/models/qwen3-8b-disk/target"
    assert "--load-format" not in cfg["server"]["extra_args"] and cfg["server"]["backend"] == "vllm"
    assert (cfg["sweep"]["residency"], cfg["sweep"]["sleep_level"]) == ("sleep", 2)
    assert 1 in cfg["sweep"]["concurrency"]          # the wake check: repeat_agreement is blank above concurrency 1
    k15 = next(s for s, c in g.servers.items() if not c.is_baseline)
    assert not g.servers[k15].random_weights
    assert acceptance_checkpoint.settings(cfg)[0] == 0      # no low-acceptance diagnosis of a random drafter
    assert all(greedy_agreement_na(g, k15, bid) is None for bid in g.benches[k15])     # the text is compared
    assert vllm_checks.check_sleep_level(cfg, {}).status == "pass"


def test_a_shallower_hybrid_keeps_its_pattern_and_its_drafter_taps_within():
    fam = shaped.shallower(shaped.SHAPES["qwen3.6-27b"](), 16)
    s, d = model_shape.shape(fam.target), model_shape.shape(fam.drafter)
    assert (s.layers, s.linear_attention_layers, s.full_attention_layers) == (16, 12, 4)
    assert fam.drafter["dflash_config"]["target_layer_ids"] == [1, 4, 7, 10, 13] and d.context_layers == 5
    assert fam.drafter["num_target_layers"] == 16 and shaped.SHAPES["qwen3.6-27b"]().target["text_config"][
        "num_hidden_layers"] == 64                                              # the family itself is left as it was
    assert sum(2 * int(np.prod(x)) for _, x in replica.tensors(fam.target)) / GIB == pytest.approx(16.1, abs=0.1)
    with pytest.raises(SpecsweepError, match=r"shape --layers 6: give 8 to 64 layers"):
        shaped.shallower(shaped.SHAPES["qwen3.6-27b"](), 6)


def test_the_27b_on_disk_preset_serves_the_files_and_checks_greedy_agreement():
    from specsweep.run.bench_cell import greedy_agreement_na

    jobs = compose_jobs(["experiment=gpu_27b_on_disk", "results_dir=/root/res"])
    g = expand(jobs)
    [cfg] = jobs
    assert cfg["pair"]["target"] == "/root/res/models/qwen3.6-27b-disk/target"
    assert "--load-format" not in cfg["server"]["extra_args"] and cfg["sweep"]["concurrency"] == [1]
    k15 = next(s for s, c in g.servers.items() if not c.is_baseline)
    assert not g.servers[k15].random_weights and g.servers[k15].spec["num_speculative_tokens"] == 15
    assert all(greedy_agreement_na(g, k15, bid) is None for bid in g.benches[k15])     # the text is compared
    assert "27b-disk) DISK=$RES/models/qwen3.6-27b-disk" in (REPO / "scripts" / "gpu_host.sh").read_text()
