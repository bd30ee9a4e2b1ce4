"""The `local` backend: the in-process DFlash engine through the same DAG, cells, summary and MLflow."""
import csv
import functools
import json

import pytest
import yaml
from helpers import run, snakemake_argv
from near_ties import assert_same_greedy, clear_steps

from specsweep.grid.datasets import synthetic_rows

SWEEP = ["kernel=local_sdpa", "sweep.num_speculative_tokens=[3,7]", "sweep.thinking=[false,true]",
         "sweep.concurrency=[1]", "dataset.num_prompts=6", "sweep.max_tokens=96", "tracking.experiment=local"]
LOCAL = ["server=local", *SWEEP]


@functools.cache
def tiny_engine(models):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specsweep.models.dflash.model import DFlashDrafter

    return (AutoTokenizer.from_pretrained(models / "target"),
            AutoModelForCausalLM.from_pretrained(models / "target", dtype=torch.float32).eval(),
            DFlashDrafter.from_pretrained(models / "drafter"))


@functools.cache
def engine_decode(tiny_results, question, block_size, thinking, max_tokens):
    """The engine decoding one chat prompt alone, greedy, to <|im_end|>, on one thread as the cell's
    (server.threads): the cell's own computation, whose sums a thread count could reorder. Returns the
    prompt's ids and the engine's output."""
    import torch

    from specsweep.models.dflash.engine import generate
    from specsweep.models.tiny import chat_ids

    tok, target, drafter = tiny_engine(tiny_results / "models" / "tiny")
    ids, threads = chat_ids(tok, question, thinking), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return ids, generate(target, drafter if block_size > 1 else None, [ids], block_size, max_tokens,
                             stop_ids={tok.eos_token_id})
    finally:
        torch.set_num_threads(threads)


def assert_answers_are_greedy(tiny_results, records, bench, questions) -> bool:
    """Every answer is the target's greedy one (block 1, in this process) up to its first near-tie
    (near_ties.py); True when no answer had one, so that the cells' texts must be equal."""
    tok, target, _ = tiny_engine(tiny_results / "models" / "tiny")
    all_clear = True
    for r in records:
        ids, out = engine_decode(tiny_results, questions[r["index"]], 1, bench["thinking"], bench["max_tokens"])
        [answer] = out.sequences
        clear = clear_steps(target, ids, answer)
        assert r["text"].startswith(tok.decode(answer[:clear], skip_special_tokens=True))
        if clear == len(answer):
            assert r["text"] == tok.decode(answer, skip_special_tokens=True)
        all_clear &= clear == len(answer)
    return all_clear


@pytest.mark.dag
def test_block_size_by_thinking_sweep_in_process(tiny_results):
    work = tiny_results.parent / "work"            # the session's pair is already built there: nothing retrains
    out = run(snakemake_argv(work, tiny_results, *LOCAL, study="local"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "rule tiny_" not in out.stdout + out.stderr
    rows = list(csv.DictReader(open(tiny_results / "local" / "summary.csv")))
    cells = sorted((r["server_cell"].split("-local-")[1].split("-")[0], r["thinking"]) for r in rows)
    assert cells == [(b, t) for b in ("b1", "b4", "b8") for t in ("False", "True")]
    assert {r["backend"] for r in rows} == {"local"}
    spec = {(int(r["num_speculative_tokens"]), r["thinking"]): r for r in rows if r["method"] == "dflash"}
    for (k, _), r in spec.items():
        assert len(json.loads(r["per_position_acceptance"])) == k
        assert abs(sum(json.loads(r["acceptance_length_shares"])) - 1) < 1e-9
        assert float(r["speedup_output_tok_s"]) > 0

    # each DFlash cell's steps are the engine's own on the same prompt at the cell's block size: what they
    # are depends on the trained pair, that the pipeline measures and counts them does not
    spec_cells = list((tiny_results / "local").glob("tiny-local-b*/*/metrics.json"))
    assert len(spec_cells) == len(spec)
    for path in spec_cells:
        m = json.loads(path.read_text())
        sd = m["spec_decode"]
        assert m["backend"] == "local" and m["requests_completed"] == 6
        assert f"-local-b{m['block_size']}-" in str(path)
        assert sum(sd["acceptance_length_histogram"]) == sd["num_drafts"] > 0
        assert sd["mean_acceptance_length"] == 1 + sd["num_accepted_tokens"] / sd["num_drafts"]
        records = [json.loads(line) for line in open(path.parent / "requests.jsonl")]
        assert sum(len(r["acceptance_lengths"]) for r in records) == sd["num_drafts"]
        bench = yaml.safe_load((path.parent / "config.yaml").read_text())["bench_spec"]
        questions = [row["turns"][0] for row in synthetic_rows(bench["dataset"]["num_prompts"],
                                                               bench["dataset"]["seed"])]
        assert [r["acceptance_lengths"] for r in records] == [
            engine_decode(tiny_results, questions[r["index"]], m["block_size"], bench["thinking"],
                          bench["max_tokens"])[1].acceptance_lengths() for r in records]
        # lossless against block 1, the same engine: every answer is the target's greedy one
        if assert_answers_are_greedy(tiny_results, records, bench, questions):
            assert float(spec[m["block_size"] - 1, str(bench["thinking"])]["greedy_agreement"]) == 1.0
        # the per-request figures come from the same per-step lengths, through the servers' function
        assert (m["spec_decode_source"], m["spec_decode_exact"], m["valid"]) == ("per_request", True, True)
        per_prompt = [sum(r["acceptance_lengths"]) / len(r["acceptance_lengths"]) for r in records]
        assert sd["mean_acceptance_length_per_prompt"] == pytest.approx(sum(per_prompt) / len(per_prompt))
    assert (tiny_results / "local" / "plots" / "acceptance_length_histogram.png").exists()

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tiny_results / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("local").experiment_id])
    summary_rows = (tiny_results / "local" / "summary.csv").read_text().strip().splitlines()[1:]
    assert sum(r.data.tags.get("specsweep.kind") == "configuration" for r in runs) == len(summary_rows)

    again = run(snakemake_argv(work, tiny_results, *LOCAL, study="local", extra=["-n"]))
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.dag
def test_local_preflight_names_a_missing_gpu(tiny_results, tmp_path):
    out = run(snakemake_argv(tmp_path, tiny_results, "server=local_cuda", *SWEEP, study="local-gpu"))
    err = out.stdout + out.stderr
    assert out.returncode != 0 and "Traceback" not in err
    assert "server.device=cuda but this torch has no CUDA" in err


def test_the_local_engine_drafts_with_the_drafters_own_mask_token(random_results):
    """The drafter's config.json is the truth on every backend (issue 52): a cell spec's pair.mask_token_id never
    replaces it in the engine (preflight refuses a pair preset that disagrees)."""
    from specsweep.backends.local.session import LocalPair
    from specsweep.grid.cells import expand
    from specsweep.grid.config import compose_jobs
    from specsweep.models import drafter_config, model_shape

    grid = expand(compose_jobs([f"results_dir={random_results}", "server=local", "kernel=local_sdpa",
                                "sweep.num_speculative_tokens=3", "sweep.baseline=false"]))
    [cell] = grid.servers.values()
    own = drafter_config.mask_token_id(model_shape.read_config(random_results / "models" / "tiny" / "drafter"))
    pair = LocalPair({**cell.spec, "mask_token_id": own + 1})
    assert pair.drafter.mask_token_id == own


def test_the_static_step_decodes_like_the_hf_cache_engine(random_results):
    """The kernel choice that selects the static-cache step (CUDA graphs on a GPU) gives the same tokens;
    here on CPU without the graph, a short last batch padded to the fixed batch shape."""
    from specsweep.backends.local.session import LocalPair
    from specsweep.grid.cells import expand
    from specsweep.grid.config import compose_jobs
    from specsweep.grid.datasets import synthetic_rows

    grid = expand(compose_jobs([f"results_dir={random_results}", "server=local", "kernel=local_sdpa",
                                "sweep.num_speculative_tokens=7", "sweep.baseline=false"]))
    [cell] = grid.servers.values()
    pair = LocalPair(cell.spec)
    prompts = [pair.chat_ids([{"role": "user", "content": r["turns"][0]}], False) for r in synthetic_rows(3, 9)]
    bench = {"concurrency": 2, "max_tokens": 48, "temperature": 0.0, "ignore_eos": False}
    hf = [pair.decode(prompts[i:i + 2], bench, seed=0).sequences for i in (0, 2)]
    pair.static, pair.static_kernel = True, {"cuda_graph": False, "compile": None}
    static = [pair.decode(prompts[i:i + 2], bench, seed=0).sequences for i in (0, 2)]
    assert [len(s) for s in static] == [2, 1]
    for i, got, ref in zip((0, 2), static, hf):
        assert_same_greedy(pair.target, prompts[i:i + 2], got, ref)
    # sweep.ignore_eos: no stop token, so every row decodes exactly max_tokens, in either engine
    exact = {"ignore_eos": True, "max_tokens": 40}
    assert [len(s) for s in pair.decode(prompts[:2], {**bench, **exact}, seed=0).sequences] == [40, 40]
    pair.static = False
    assert [len(s) for s in pair.decode(prompts[:2], {**bench, **exact}, seed=0).sequences] == [40, 40]


@pytest.mark.dag
def test_a_local_set_acceptance_curve_gives_the_break_even_and_places_the_drafter(tiny_results):
    """The system's ceiling on the local engine, through the DAG: block 8 at four set lengths beside the real
    drafter. What the curve says depends on this machine; that it is measured, read and drawn does not."""
    work = tiny_results.parent / "work"
    lengths = [1.0, 2.0, 4.0, 8.0]    # each divides max_tokens: no last step cut short (it would lower the AL)
    out = run(snakemake_argv(work, tiny_results, "server=local", "kernel=local_sdpa", "sweep.num_speculative_tokens=[7]",
                             f"sweep.set_acceptance=[null,{','.join(map(str, lengths))}]", "sweep.concurrency=[1]",
                             "dataset.num_prompts=4", "sweep.max_tokens=32", "tracking=off", study="ceiling"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [r for r in csv.DictReader(open(tiny_results / "ceiling" / "summary.csv")) if r["method"] == "dflash"]
    by_set = {r["set_acceptance"]: r for r in rows}
    assert sorted(by_set) == ["", *map(str, lengths)]
    for length in lengths:                          # the engine decodes at the set length (integers: exactly)
        assert float(by_set[str(length)]["mean_acceptance_length"]) == pytest.approx(length, abs=1e-9)
    drafter = by_set[""]
    points = json.loads(drafter["ceiling_points"])
    assert [p[0] for p in points] == pytest.approx(lengths)
    assert [p[1] for p in points] == pytest.approx([float(by_set[str(x)]["speedup_e2e_geomean"]) for x in lengths],
                                                  abs=1e-4)        # the points are rounded to 4 places
    # the break-even is where the line between the points crosses 1, or empty with the reason
    from specsweep.read import ceiling

    expected = ceiling.length_for([tuple(p[:2]) for p in points], 1.0)
    if expected is None:
        assert not drafter["break_even_al"] and drafter["ceiling_na"]
    else:
        assert float(drafter["break_even_al"]) == pytest.approx(expected, abs=1e-3)     # from rounded points
    if 1.0 <= float(drafter["mean_acceptance_length"]) <= 8.0:
        assert drafter["ceiling_speedup_at_al"]
    assert (tiny_results / "ceiling" / "plots" / "speedup_vs_acceptance.png").stat().st_size > 0
