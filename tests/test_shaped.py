"""specsweep shape: config-only replicas that vLLM reads as the published models (field names checked by loading
them with transformers' own config classes, which vLLM 0.26 uses for Qwen3 and Qwen3.5), and their shapes as
model_shape reads them."""
import json

import pytest

from specsweep import cli
from specsweep.core.errors import SpecsweepError
from specsweep.models import model_shape, shaped


@pytest.mark.parametrize("name, layer_types", [
    ("qwen3.5-27b", ["full_attention"] * 5),
    ("qwen3.6-27b", ["sliding_attention"] * 4 + ["full_attention"]),
])
def test_the_27b_replicas_are_what_vllm_reads(tmp_path, name, layer_types):
    from transformers import AutoConfig

    out = shaped.write(name, tmp_path / name, with_tokenizer=False)
    raw = model_shape.read_config(out / "target")
    assert "num_hidden_layers" not in raw and raw["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    cfg = AutoConfig.from_pretrained(out / "target")
    text = cfg.get_text_config()
    assert type(cfg).__name__ == "Qwen3_5Config" and type(text).__name__ == "Qwen3_5TextConfig"
    assert (text.num_hidden_layers, text.hidden_size, text.num_attention_heads, text.num_key_value_heads,
            text.head_dim, text.vocab_size, text.intermediate_size) == (64, 5120, 24, 4, 256, 248320, 17408)
    assert (text.linear_num_key_heads, text.linear_num_value_heads, text.linear_key_head_dim,
            text.linear_value_head_dim, text.linear_conv_kernel_dim) == (16, 48, 128, 128, 4)
    assert text.layer_types.count("full_attention") == 16 and text.layer_types[3] == "full_attention"
    assert cfg.vision_config.out_hidden_size == text.hidden_size
    draft = AutoConfig.from_pretrained(out / "drafter")
    assert type(draft).__name__ == "Qwen3Config" and draft.layer_types == layer_types
    raw_d = model_shape.read_config(out / "drafter")
    assert raw_d["dflash_config"] == {"mask_token_id": 248070, "target_layer_ids": [1, 16, 31, 46, 61]}
    assert raw_d["num_target_layers"] == 64 and raw_d["block_size"] == 16
    assert max(raw_d["dflash_config"]["target_layer_ids"]) <= 64 - 2        # vLLM taps id + 1
    t, d = model_shape.shape(out / "target"), model_shape.shape(out / "drafter")
    assert t.hybrid and t.multimodal and d.hidden == t.hidden and d.context_layers == 5


def test_the_35b_moe_replica_is_what_vllm_reads_and_the_drafter_keeps_its_own_dflash_config(tmp_path):
    """Qwen3.6-35B-A3B in its Qwen3_5MoeForConditionalGeneration wrapper and z-lab's current drafter, exactly as
    ../shared/notes/moe-hybrid.md gives their config files; the replica tokenizer's <|MASK|> is the drafter's
    mask token (SGLang resolves dflash_config.mask_token, <|MASK|> by default, against it)."""
    from transformers import AutoConfig, AutoTokenizer

    out = shaped.write("qwen3.6-35b-a3b", tmp_path / "moe")
    raw = model_shape.read_config(out / "target")
    assert raw["architectures"] == ["Qwen3_5MoeForConditionalGeneration"] and "num_hidden_layers" not in raw
    text = AutoConfig.from_pretrained(out / "target").get_text_config()
    assert (text.num_hidden_layers, text.hidden_size, text.num_experts, text.num_experts_per_tok,
            text.moe_intermediate_size, text.shared_expert_intermediate_size) == (40, 2048, 256, 8, 512, 512)
    raw_d = model_shape.read_config(out / "drafter")
    assert raw_d["dflash_config"] == {"block_size": 16, "mask_token_id": 248077,
                                      "target_layer_ids": [1, 6, 11, 16, 22, 27, 32, 37]}
    assert "block_size" not in raw_d and raw_d["num_target_layers"] == 40 and raw_d["sliding_window"] == 4096
    assert raw_d["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    assert AutoTokenizer.from_pretrained(out / "target").convert_tokens_to_ids("<|MASK|>") == 248077


def test_the_8b_replica_and_its_tokenizer(tmp_path):
    """The shape scripts/gpu_host.sh serves: Qwen3-8B and its drafter; the tokenizer has every id of the vocab."""
    from transformers import AutoConfig, AutoTokenizer

    from specsweep.grid.datasets import synthetic_rows

    assert cli.main(["shape", "qwen3-8b", str(tmp_path / "p")]) == 0
    cfg = AutoConfig.from_pretrained(tmp_path / "p" / "target")
    assert (type(cfg).__name__, cfg.num_hidden_layers, cfg.vocab_size) == ("Qwen3Config", 36, 151936)
    tok = AutoTokenizer.from_pretrained(tmp_path / "p" / "target")
    assert len(tok) == 151936 and tok.convert_tokens_to_ids("<|MASK|>") == 151669
    # it carries a prompt's text: a synthetic problem's words one token each, any other word in characters, no [UNK]
    a, b = (tok(r["turns"][0]).input_ids for r in synthetic_rows(2, 0))
    assert a != b and len(a) == len(synthetic_rows(2, 0)[0]["turns"][0].split())
    assert tok.unk_token_id not in tok("Zebras, Hello!").input_ids and tok.decode(tok("Zebras").input_ids) == "Zebras"
    assert tok.eos_token_id == json.loads((tmp_path / "p" / "target" / "generation_config.json").read_text())[
        "eos_token_id"] == 151645
    d = model_shape.read_config(tmp_path / "p" / "drafter")
    assert d["dflash_config"]["target_layer_ids"] == [1, 9, 17, 25, 33]


def test_an_unknown_shape_is_one_line(tmp_path, capsys):
    with pytest.raises(SpecsweepError, match="no shape 'llama-70b': pick one of qwen3-8b, qwen3.5-27b, qwen3.6-27b, qwen3.6-35b-a3b"):
        shaped.write("llama-70b", tmp_path)
    assert cli.main(["shape", "llama-70b", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == ("specsweep: shape: no shape 'llama-70b': pick one of qwen3-8b, "
                                               "qwen3.5-27b, qwen3.6-27b, qwen3.6-35b-a3b")


@pytest.mark.parametrize("pair, shape", [("qwen3.5-27b-dflash", "qwen3.5-27b"), ("qwen3.6-27b-dflash", "qwen3.6-27b")])
def test_the_27b_preset_finds_its_replicas_and_passes_the_pair_checks(tmp_path, pair, shape):
    """experiment=gpu_27b_hybrid, as scripts/gpu_host.sh's install step lays the replicas out."""
    from specsweep.backends.vllm import checks as vllm_checks
    from specsweep.grid.config import compose_jobs
    from specsweep.plan import checks

    shaped.write(shape, tmp_path / "models" / f"{pair}-shaped", with_tokenizer=False)
    [cfg] = compose_jobs(["experiment=gpu_27b_hybrid", "server=vllm_gpu", f"results_dir={tmp_path}",
                          f"pair={pair}"])
    assert cfg["study"] == f"{pair}-shaped"
    # no flag by hand: the launch adds what the replica's shape and a Python without FlashInfer call for
    assert not {"--language-model-only", "--gdn-prefill-backend"} & set(cfg["server"]["extra_args"])
    from specsweep.backends.vllm import launch
    from specsweep.models import model_shape

    plan = launch.kernel_plan(cfg["server"] | {"device": "cuda"}, {"flashinfer": None},
                              model_shape.shape(cfg["pair"]["target"]))
    assert "--language-model-only" in plan.argv and plan.argv[plan.argv.index("--gdn-prefill-backend") + 1] == "triton"
    for check in (checks.check_pair_paths, checks.check_drafter, checks.check_thinking, checks.check_max_tokens,
                  checks.check_num_speculative_tokens, vllm_checks.check_kv_cache):
        c = check(cfg, {})
        assert c.status == "pass", (check.__name__, c.message)


PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json")
MULTIMODAL = [name for name, fam in shaped.SHAPES.items() if model_shape.shape(fam().target).multimodal]


def test_a_multimodal_target_gets_the_checkpoints_processor_files(tmp_path):
    """SGLang 0.5.17 builds a multimodal checkpoint's image processor even to serve text; on the qwen3.6-27b replica,
    which had none of its processor files, every member exited before it was ready ("Can't load image processor",
    an H100 on 2026-12-06). Each shape whose target is a multimodal wrapper (the 27B hybrids, the 35B-A3B MoE) writes
    the checkpoint's two beside its config.json, their patch sizes its vision tower's, `--layers` or not; a text-only
    target gets none."""
    assert MULTIMODAL == ["qwen3.5-27b", "qwen3.6-27b", "qwen3.6-35b-a3b"]
    for name in shaped.SHAPES:
        out = shaped.write(name, tmp_path / name, with_tokenizer=False)
        cut = shaped.write(name, tmp_path / f"{name}-cut", with_tokenizer=False, layers=16)
        for target in (out / "target", cut / "target"):
            written = [f for f in PROCESSOR_FILES if (target / f).exists()]
            assert written == (list(PROCESSOR_FILES) if name in MULTIMODAL else []), (name, target)
        if name not in MULTIMODAL:
            continue
        vision = model_shape.read_config(out / "target")["vision_config"]
        for f in PROCESSOR_FILES:
            got = json.loads((out / "target" / f).read_text())
            assert (got["patch_size"], got["merge_size"], got["temporal_patch_size"]) == \
                (vision["patch_size"], vision["spatial_merge_size"], vision["temporal_patch_size"])


@pytest.mark.parametrize("name", MULTIMODAL)
def test_transformers_builds_the_image_processor_from_them(tmp_path, name):
    """What SGLang's start-up does first (AutoProcessor, whose image processor failed): here AutoImageProcessor, where
    this transformers has the Qwen2-VL image processor the file names."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Qwen2VLImageProcessor"):
        pytest.skip(f"transformers {transformers.__version__} has no Qwen2VLImageProcessor")
    out = shaped.write(name, tmp_path / name, with_tokenizer=False)
    got = transformers.AutoImageProcessor.from_pretrained(out / "target")
    assert type(got).__name__.startswith("Qwen2VLImageProcessor") and got.patch_size == 16 and got.merge_size == 2
    assert (got.size["shortest_edge"], got.size["longest_edge"]) == (65536, 16777216)
