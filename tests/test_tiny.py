import json

from safetensors import safe_open
from transformers import AutoTokenizer


def test_tiny_pair_is_in_the_published_dflash_format(tiny_results):
    drafter = tiny_results / "models" / "tiny" / "drafter"
    cfg = json.loads((drafter / "config.json").read_text())
    target = json.loads((tiny_results / "models" / "tiny" / "target" / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["num_target_layers"] == target["num_hidden_layers"] and cfg["block_size"] == 8
    ids = cfg["dflash_config"]["target_layer_ids"]
    assert max(ids) <= target["num_hidden_layers"] - 2      # vLLM adds 1 to each id
    with safe_open(str(drafter / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert f.get_tensor("fc.weight").shape == (target["hidden_size"], target["hidden_size"] * len(ids))
    assert {"norm.weight", "hidden_norm.weight", "layers.0.self_attn.q_proj.weight",
            "layers.0.self_attn.k_norm.weight", "layers.0.mlp.gate_proj.weight"} <= names
    assert not any(n.startswith("model.") or "embed" in n or "lm_head" in n for n in names)


def test_tiny_tokenizer_has_a_mask_token_and_honours_enable_thinking(tiny_results):
    tok = AutoTokenizer.from_pretrained(tiny_results / "models" / "tiny" / "target")
    cfg = json.loads((tiny_results / "models" / "tiny" / "drafter" / "config.json").read_text())
    assert tok.convert_tokens_to_ids("<|mask|>") == cfg["dflash_config"]["mask_token_id"]
    msgs = [{"role": "user", "content": "What is 2 + 3?"}]
    off = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    on = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=True)
    assert off.endswith("<think>\n\n</think>\n\n") and on.endswith("<|im_start|>assistant\n")
    assert tok.decode(tok("Ada has 12 apples.").input_ids) == "Ada has 12 apples."
