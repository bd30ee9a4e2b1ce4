import json
import re

import pytest
from helpers import BIN, REPO, TRAIN_SCALE, run
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


def test_the_workflows_rules_trained_the_pair_once_and_a_rerun_trains_nothing(pair_training):
    """The run's one training of the pair, by the DAG's own three rules at helpers.TRAIN_SCALE of the recipe
    (`--config tiny_pair=train@0.02`, conftest.trained_pair_dir): each ran once and wrote its report, which records
    the scale and the steps and prompts run at it; Snakemake, asked again in the same working directory, has
    nothing to do, and asked for the recipe's pair (`tiny_pair=train`) would train the target and the drafter
    again: a scaled pair is never taken for the recipe's. What the training reached is an outcome, and not
    asserted."""
    from specsweep.models import tiny

    log = (pair_training / "train.log").read_text()
    for rule in ("tiny_tokenizer", "tiny_target", "tiny_drafter"):      # Snakemake 9: "Finished jobid: 3 (Rule: x)"
        assert log.count(f"(Rule: {rule})") == 1, (rule, log[-3000:])
    assert f"tiny pair: training the target at {TRAIN_SCALE} of the recipe" in log
    assert "copying the shipped pair" not in log
    models = pair_training / "results" / "models" / "tiny"
    reports = {step: json.loads((models / step / "train.json").read_text()) for step in ("target", "drafter")}
    recipe = tiny.recipe()
    assert reports["target"]["scale"] == reports["drafter"]["scale"] == TRAIN_SCALE, reports
    assert reports["target"]["steps"] == tiny.scaled(recipe["target"]["steps"], TRAIN_SCALE) < recipe["target"]["steps"]
    assert (reports["drafter"]["steps"], reports["drafter"]["prompts"]) == (
        tiny.scaled(recipe["drafter"]["steps"], TRAIN_SCALE), tiny.scaled(recipe["drafter"]["prompts"], TRAIN_SCALE))

    def dry_run(choice):
        out = run([str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(pair_training / "work"), "-n",
                   "--cores", "2", "--config", f"tiny_pair={choice}", f"results_dir={pair_training / 'results'}",
                   "--", str(models / "drafter" / "config.json")], timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout + out.stderr
    assert "Nothing to be done" in dry_run(f"train@{TRAIN_SCALE}")
    recipes = dry_run("train")      # its job stats: one row per rule it would run, "tiny_target   1"
    planned = {rule for rule in ("tiny_tokenizer", "tiny_target", "tiny_drafter")
               if re.search(rf"^{rule}\s+1$", recipes, re.M)}
    assert planned == {"tiny_target", "tiny_drafter"} and "Params have changed" in recipes, recipes[-2500:]


def test_tiny_pair_choices_parse_and_the_schema_takes_only_those():
    """`tiny_pair`: shipped (None: copied), train (the recipe, 1.0) or train@S with 0 < S < 1; the schema refuses
    anything else, a scale of 1 or more or of 0 among them."""
    import jsonschema

    from specsweep.grid.config import schema
    from specsweep.models import tiny

    assert [tiny.train_scale(c) for c in ("shipped", "train", "train@0.02", "train@.5")] == [None, 1.0, 0.02, 0.5]
    rule = schema()["properties"]["tiny_pair"]
    for good in ("shipped", "train", "train@0.02", "train@.5"):
        jsonschema.validate(good, rule)
    for bad in ("trained", "train@1", "train@1.5", "train@0", "train@0.00", "train@", "train@0.02x", "shipped@0.5"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, rule)
    assert tiny.scaled(600, 0.02) == 12 and tiny.scaled(100, 0.001) == 1 and tiny.scaled(600, 1.0) == 600


def test_the_training_reports_hold_for_any_pair(tiny_results):
    """What each training rule records, whatever the pair it trained: the loss fell from its first step to its
    last, and the held-out figures are measured on the stated prompts and within their ranges (a share of right
    answers in [0, 1], a mean acceptance length in [1, block size] at the drafter's block size). How high they
    are is a training outcome, which another CPU may move, and is not asserted."""
    from specsweep.models.tiny import BLOCK_SIZE, EVAL_PROMPTS

    models = tiny_results / "models" / "tiny"
    target = json.loads((models / "target" / "train.json").read_text())
    drafter = json.loads((models / "drafter" / "train.json").read_text())
    for report in (target, drafter):
        assert report["steps"] > 0 and report["loss_last"] < report["loss_first"], report
    assert target["eval_prompts_per_mode"] == EVAL_PROMPTS
    assert 0 <= target["correct_thinking_off"] <= 1 and 0 <= target["correct_thinking_on"] <= 1
    assert drafter["eval_prompts"] == EVAL_PROMPTS and drafter["block_size"] == BLOCK_SIZE
    assert 1 <= drafter["mean_acceptance_length"] <= BLOCK_SIZE
    print(f"\ntiny pair: right {target['correct_thinking_off']:.2f} / {target['correct_thinking_on']:.2f} "
          f"(thinking off / on), AL {drafter['mean_acceptance_length']:.2f} at block {BLOCK_SIZE}")


def test_held_out_prompts_never_appear_in_training(tiny_results):
    from specsweep.models.tiny import TRAIN_SEED, examples, held_out

    tok = AutoTokenizer.from_pretrained(tiny_results / "models" / "tiny" / "target")
    held = held_out()
    train = {tok.decode(p) for p, *_ in examples(tok, 2000, TRAIN_SEED, exclude=held)}
    assert not any(q in t for t in train for q in list(held)[:50])


def test_the_shipped_pair_is_its_manifests_and_was_trained_by_this_codes_recipe():
    """models/tiny/ (what the DAG copies by default) holds exactly the files its MANIFEST.json lists, none over
    5 MB, and the recipe it records is the one models/tiny.py holds now: a change to the recipe fails here until
    the pair is trained again and shipped (scripts/ship_tiny_pair.py)."""
    from specsweep.models import tiny

    shipped = REPO / "models" / "tiny"
    manifest = json.loads((shipped / tiny.MANIFEST).read_text())
    assert tiny.file_digests(shipped) == manifest["files"]
    assert all((shipped / f).stat().st_size < 5_000_000 for f in manifest["files"])
    assert manifest["recipe"] == json.loads(json.dumps(tiny.recipe())), "retrain and ship the tiny pair"
    # trained by the recipe, not at a scale of it (tiny_pair=train@S; scripts/ship_tiny_pair.py refuses those)
    assert all(r.get("scale", 1) == 1 for r in manifest["reports"].values()), manifest["reports"]
    assert len(manifest["commit"]) == 40 and manifest["command"].endswith("tiny_pair=train")
