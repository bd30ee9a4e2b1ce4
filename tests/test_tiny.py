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


def test_the_embedded_pair_is_trained_to_the_issues_goals(tiny_results):
    """Held-out answers right in both thinking modes, and a drafter that earns its keep (AL >= 4.5 at block 8),
    as each training rule measured them on prompts it never trained on."""
    models = tiny_results / "models" / "tiny"
    target = json.loads((models / "target" / "train.json").read_text())
    drafter = json.loads((models / "drafter" / "train.json").read_text())
    assert target["correct_thinking_off"] >= 0.8 and target["correct_thinking_on"] >= 0.8
    assert drafter["block_size"] == 8 and drafter["mean_acceptance_length"] >= 4.5


def test_held_out_prompts_never_appear_in_training(tiny_results):
    from specsweep.tiny import TRAIN_SEED, examples, held_out

    tok = AutoTokenizer.from_pretrained(tiny_results / "models" / "tiny" / "target")
    held = held_out()
    train = {tok.decode(p) for p, *_ in examples(tok, 2000, TRAIN_SEED, exclude=held)}
    assert not any(q in t for t in train for q in list(held)[:50])
