"""Degenerate answers, starved streams and the steady state (issue #30 items 5-7, docs/timing.md#answers-and-streams):
the metric functions on constructed records, the verdict they withhold, the summary, the K comparison and `specsweep
compare` on test_verdicts' fake studies, and one target that really repeats, through the local engine."""
import json

import pandas as pd
import pytest
from test_verdicts import study, summarize

from specsweep import metrics
from specsweep.core.table import K_COMPARISON, read
from specsweep.metrics import (
    DEGENERATE_SHARE,
    STARVED_SHARE,
    answer_figures,
    repetition,
    steady_figures,
    stream_figures,
)
from specsweep.read import compare
from specsweep.verdicts import stats

ALPHABET = "abcdefghijklmnopqrstuvwxyz"


# ---- the repetition figure ----------------------------------------------------------------------------------
def test_repetition_is_the_share_covered_by_an_earlier_ngram():
    assert repetition(ALPHABET + ALPHABET) == 0.5           # the second alphabet repeats the first, exactly half
    assert repetition(ALPHABET + ALPHABET[:20]) == pytest.approx(20 / 46)
    assert repetition("and " * 40) == 1 - 4 / 160             # all but its first "and "
    assert repetition("ab" * 30) == pytest.approx(58 / 60)  # a loop without a space: a sub-word repeated
    assert repetition("and  and\t" * 16) == repetition("and " * 32)     # spaces and tabs: one space
    assert repetition("\n" * 40) == 39 / 40                 # newlines are kept: a loop of newlines is one
    assert repetition("The answer is 14, since 4 + 10 = 14.") == 0.0
    assert repetition("and " * 7) is None                   # 27 characters: too short to judge
    assert repetition(None) is None and repetition("") is None


def records(texts, **extra):
    return [{"index": i, "turn": 0, "ok": True, "text": t, "e2e_s": 1.0, "completion_tokens": 40, **extra}
            for i, t in enumerate(texts)]


CLEAN = [f"answer {i}: {i} plus {i + 1} makes {2 * i + 1}, the number asked for" for i in range(16)]


def test_a_cell_degenerates_above_its_share_of_looping_answers():
    one, two = CLEAN[:15] + ["and " * 30], CLEAN[:14] + ["and " * 30] * 2
    assert 1 / 16 <= DEGENERATE_SHARE < 2 / 16
    f = answer_figures(records(one))
    assert (f["answers_judged"], f["degenerate_answers"], f["answers_degenerate"]) == (16, 1, None)
    f = answer_figures(records(two))
    assert f["degenerate_share"] == 2 / 16 and f["repetition"]["median"] == 0.0
    assert f["answers_degenerate"].startswith("2 of 16 answers degenerate (at least 50% of the answer repeats an "
                                              "earlier 16-character n-gram), above the 10% a cell may have")
    f = answer_figures(records(["short"] * 4) + [{"ok": False, "text": "and " * 30}])   # none judged; failed: out
    assert (f["answers_judged"], f["degenerate_share"], f["answers_degenerate"]) == (0, None, None)


def runs(texts, speedup):
    """One repeat of 8 prompts whose e2e is about 1 / speedup, with these answers."""
    return [[{**r, "e2e_s": (1 + 0.1 * r["index"]) / speedup * (1 + 0.02 * (r["index"] % 3) * (speedup > 1))}
             for r in records(texts)]]


@pytest.mark.parametrize("cell, base, reason", [
    (CLEAN[:8], CLEAN[:8], None),
    (["and " * 30] * 8, CLEAN[:8], "cell repeat 1 of 1: 8 of 8 answers degenerate"),
    (["ab" * 30] * 8, ["ab" * 30] * 8, "cell repeat 1 of 1: 8 of 8"),       # the target repeats: both sides loop
    (CLEAN[:8], ["and " * 30] * 8, "reference repeat 1 of 1: 8 of 8 answers degenerate")])
def test_a_pair_whose_answers_degenerate_gets_no_faster_verdict(cell, base, reason):
    p = stats.paired_speedup(runs(cell, 2.0), runs(base, 1.0))
    assert p["speedup_e2e_geomean"] == pytest.approx(2.0, rel=0.03) and p["speedup_e2e_ci_low"] > 1.9   # and kept
    if reason is None:
        assert p["verdict"] == stats.FASTER and p["verdict_reason"] is None
    else:
        assert p["verdict"] == stats.DEGENERATE and p["verdict_reason"].startswith(reason)


def test_text_that_is_no_model_s_answer_is_not_judged(tmp_path):
    """Random weights and a set acceptance loop or babble by construction: their answers are not judged, the row says
    why, and the pair keeps its verdict (here faster) instead of `degenerate`."""
    from specsweep.grid.cells import expand
    from specsweep.grid.config import compose_jobs

    why = "random weights (--load-format dummy): the text is no model's answer"
    loops = [{**r, "answer_not_judged": why} for r in records(["and " * 30] * 8)]
    f = answer_figures(loops)
    assert (f["answers_judged"], f["answers_degenerate"], f["answers_na"]) == (0, None, f"not judged: {why}")
    cell, base = ([[{**r, "answer_not_judged": why} for r in run] for run in side]
                  for side in (runs(["and " * 30] * 8, 2.0), runs(["ab" * 30] * 8, 1.0)))
    p = stats.paired_speedup(cell, base)
    assert p["verdict"] == stats.FASTER and p["verdict_reason"] is None
    grid = expand(compose_jobs([f"results_dir={tmp_path}", "sweep.num_speculative_tokens=[3]",
                                "sweep.set_acceptance=[null,2.5]", "server.extra_args=[--load-format,dummy]"]))
    assert {c.answers_not_judged for c in grid.servers.values()} == {why}
    grid = expand(compose_jobs([f"results_dir={tmp_path}", "sweep.num_speculative_tokens=[3]",
                                "sweep.set_acceptance=[null,2.5]"]))
    got = {c.spec.get("set_acceptance"): c.answers_not_judged for c in grid.servers.values()}
    assert got[None] is None and got[2.5].startswith("set acceptance: drafts are accepted at a set rate")


PROSE = [f"Answer {i}: the quick brown fox jumps over the lazy dog, then sleeps by the warm stove." for i in range(8)]


def test_requests_kept_before_the_mark_are_not_judged_when_read(tmp_path):
    """A random-weight cell measured before its requests carried `answer_not_judged` (its metrics.json says
    degenerate): read back, its requests are marked from its own server spec and its answers are not judged."""
    from specsweep.core import layout
    from specsweep.core.results import atomic_write_json, atomic_write_jsonl, atomic_write_yaml
    from specsweep.read.study import Cell

    rows = records(["and " * 30] * 8)
    for extra, judged in (([], False), (["--load-format", "dummy"], True)):
        d = tmp_path / str(judged) / "srv" / "bench"
        atomic_write_jsonl(d / layout.REQUESTS, rows)
        atomic_write_json(d / layout.METRICS, {"valid": True, **answer_figures(rows)})
        atomic_write_yaml(d / layout.CONFIG, {"server_spec": {"server": {"extra_args": extra}, "method": "dflash"}})
        cell = Cell.load(d)
        assert bool(cell.metrics["answers_degenerate"]) is not judged
        assert bool(cell.metrics["answers_na"]) is judged
        assert all(bool(r.get("answer_not_judged")) is judged for r in cell.requests())
        assert bool(stats.degenerate_na([cell.requests()], [records(PROSE)])) is not judged


# ---- starved streams ----------------------------------------------------------------------------------------
def timed(rates, accept=None, tokens=41):
    """Finished requests decoding at these tok/s by the server's clock (and by the client's, smoothly)."""
    out = []
    for i, rate in enumerate(rates):
        decode = (tokens - 1) / rate
        r = {"index": i, "turn": 0, "ok": True, "completion_tokens": tokens, "e2e_s": decode + 0.02, "ttft_s": 0.02,
             "chunk_t_s": [0.02 + j * decode / (tokens - 1) for j in range(tokens)], "chunk_tokens": [1] * tokens,
             "server_timing": {"clock": "test", "decode_s": decode, "span_s": decode + 0.01}}
        if accept:
            r["spec"] = {"num_spec_steps": 10, "num_accepted_draft_tokens": round(10 * (accept[i] - 1)),
                         "num_draft_tokens": 30, "acceptance_histogram": [0] * 4}
        out.append(r)
    return out


def test_the_spread_of_decode_rates_and_a_stream_far_below_the_median():
    f = stream_figures(timed([10, 11, 9, 10, 12, 10, 1.5, 10]), concurrency=8)
    assert f["decode_tok_s_source"] == "server" and f["decode_tok_s"]["min_over_max"] == pytest.approx(1.5 / 12)
    assert f["decode_tok_s"]["p50"] == pytest.approx(10) and f["starved_streams"] == 1
    assert f["stream_starvation"] == ("1 of 8 streams decoded at under 25% of the median rate per token (the slowest "
                                      "at 0.15x)")
    even = stream_figures(timed([10, 11, 9, 10]), concurrency=4)
    assert (even["starved_streams"], even["stream_starvation"], even["stream_spread_na"]) == (0, None, None)
    # just above the threshold: not starved
    assert stream_figures(timed([10, 10, 10, STARVED_SHARE * 10 * 1.01]), 4)["starved_streams"] == 0


def test_one_stream_served_and_seven_starved():
    """The published case: at concurrency 8 one stream got 39.4 tok/s and the others about 2, so the median is a
    starved stream's: they are starved by the one served."""
    f = stream_figures(timed([1.8, 39.4, 2.4, 2.1, 1.9, 2.2, 2.0, 2.3]), concurrency=8)
    assert f["starved_streams"] == 7 and f["decode_tok_s"]["max"] == pytest.approx(39.4)
    assert f["stream_starvation"].startswith("one stream decoded at 18.3x the median rate per token, and 7 of 8 "
                                             "streams at under 25% of its rate: starved by it")


def test_a_prompt_that_accepts_less_is_not_a_starved_stream():
    """Under speculation a stream of acceptance length 1 decodes at a fifth of the tok/s of one of length 5 on as
    many verify steps: the spread shows it, the starvation flag (per verify step) does not."""
    f = stream_figures(timed([10, 10, 10, 2], accept=[5, 5, 5, 1]), concurrency=4)
    assert f["decode_tok_s"]["min_over_max"] == pytest.approx(0.2) and f["starved_streams"] == 0
    assert stream_figures(timed([10, 10, 10, 2], accept=[5, 5, 5, 5]), 4)["stream_starvation"].startswith(
        "1 of 4 streams decoded at under 25% of the median rate per verify step")


def test_the_spread_is_blank_with_its_reason():
    assert stream_figures(timed([10, 1]), 1)["stream_spread_na"].startswith("concurrency 1")
    f = stream_figures(timed([10]), 4)
    assert f["decode_tok_s"]["p50"] is None and f["stream_spread_na"].startswith("1 finished request(s)")
    bursty = [{**r, "server_timing": None, "chunk_t_s": [r["e2e_s"] - 0.01] * 41} for r in timed([10, 10, 10])]
    assert stream_figures(bursty, 4)["stream_spread_na"].startswith("no TPOT holds: the server's: no finished")
    client = stream_figures([{**r, "server_timing": None} for r in timed([10, 10, 1])], 4)   # the client's clock
    assert client["decode_tok_s_source"] == "client stream" and client["starved_streams"] == 1


# ---- the steady state ---------------------------------------------------------------------------------------
STEP = 1 / 128          # times in binary fractions, so that a window's edges compare exactly


def stream(start, n, index=0, first=0.125):
    """A request started at `start` on the cell's clock, its first token `first` after that, then one token every
    STEP: n one-token chunks."""
    times = [first + j * STEP for j in range(n)]
    return {"index": index, "turn": 0, "ok": True, "start_s": start, "completion_tokens": n, "e2e_s": times[-1],
            "prompt_tokens": 10,
            "ttft_s": first, "chunk_t_s": times, "chunk_tokens": [1] * n}


def test_steady_throughput_is_the_tokens_while_every_stream_decodes():
    """Four streams start together and finish after 90, 110, 130 and 150 more tokens: the window runs from their
    first token to the first finish, 90 steps, and holds 90 tokens of each."""
    rows = [stream(0.0, 91 + 20 * i, i) for i in range(4)]
    f = steady_figures(rows, concurrency=4)
    assert f["steady_window_s"] == 90 * STEP and f["steady_tokens"] == 360
    assert f["steady_output_tok_s"] == 4 / STEP and f["steady_na"] is None
    assert f["steady_clock"] == "client (chunk arrival)"
    wall = rows[-1]["e2e_s"]
    whole = metrics.request_figures(rows, wall_s=wall)["output_tok_s"]
    assert whole == sum(r["completion_tokens"] for r in rows) / wall < f["steady_output_tok_s"]


def test_with_more_requests_than_streams_the_window_is_the_union_of_full_stretches():
    """Concurrency 2, four requests in two waves: 90 steps with both of the first wave decoding, then 40 with both
    of the second."""
    rows = [stream(0.0, 91, 0), stream(0.0, 141, 1), stream(2.0, 41, 2), stream(2.0, 81, 3)]
    f = steady_figures(rows, concurrency=2)
    assert f["steady_window_s"] == 130 * STEP and f["steady_tokens"] == 2 * 90 + 2 * 40


def test_the_steady_state_is_blank_with_its_reason():
    rows = [stream(0.0, 91 + 20 * i, i) for i in range(4)]
    assert steady_figures(rows, 1)["steady_na"] == "concurrency 1: the whole run is one stream"
    assert steady_figures([{**r, "start_s": None} for r in rows], 4)["steady_na"].startswith(
        "a request carries no start time")
    assert steady_figures([{**r, "chunk_tokens": None} for r in rows], 4)["steady_na"] == \
        "a request carries no per-chunk token counts"
    bursty = [{**r, "chunk_t_s": [r["e2e_s"]] * len(r["chunk_t_s"])} for r in rows]
    assert steady_figures(bursty, 4)["steady_na"].startswith("the client's chunk times do not say when tokens were "
                                                             "made: 4 of 4 streams arrived in a burst")
    apart = [stream(2.0 * i, 91, i) for i in range(4)]      # one after another: never all four at once
    assert steady_figures(apart, 4)["steady_na"] == "no moment at which all 4 streams were decoding at once"
    late = rows[:3] + [stream(88 * STEP, 91, 3)]      # the last first token 2 steps before the first finish
    f = steady_figures(late, 4)
    assert f["steady_output_tok_s"] is None
    assert f["steady_na"] == ("the window (15.6 ms) holds 8 chunks, fewer than 5 per stream for 4 streams: too "
                              "short to count")


# ---- through the summary, the K comparison and compare ------------------------------------------------------
def test_a_degenerating_drafter_and_a_degenerating_target_get_no_verdict(tmp_path):
    """K=3's answers loop (a broken drafter): its row says degenerate and why, K=7's stays faster. Then the target
    repeats: the baseline loops too, and no row claims a verdict."""
    grid = study(tmp_path / "a", {0: 1.0, 3: 1.5, 7: 1.5}, degenerate=(3,))
    table = summarize(grid).set_index("num_speculative_tokens")
    assert table.loc[3, "verdict"] == "degenerate" and table.loc[7, "verdict"] == "faster"
    assert table.loc[3, "verdict_reason"].startswith("this cell repeat 1 of 2: 18 of 18 answers degenerate")
    assert table.loc[3, "answers_degenerate"].startswith("repeat 1 of 2: 18 of 18 answers degenerate")
    assert (table.loc[3, "degenerate_share"], table.loc[3, "degenerate_answers"]) == (1.0, 36)
    assert table.loc[3, "speedup_e2e_ci_low"] > 1.3                      # the figure stays; the verdict claims none
    assert table.loc[7, "degenerate_share"] == 0.0 and pd.isna(table.loc[7, "verdict_reason"])
    m = json.loads(grid.metrics_path(*next((s, b) for s, b in grid.cells_of_study("v") if "-k3-" in s)).read_text())
    assert m["verdict"] == "degenerate" and m["valid"]
    [k] = read(grid.study_files("v").k_comparison, K_COMPARISON)
    assert k["verdict"] == "degenerate" and k["statement"].endswith("no verdict: degenerate answers")
    assert k["resolved"] is False and k["verdict_reason"].startswith("K=3 repeat 1 of 2")

    target = study(tmp_path / "b", {0: 1.0, 3: 1.5, 7: 1.5}, degenerate=(0, 3, 7))
    rows = summarize(target)
    assert set(rows[rows.method != "none"].verdict) == {"degenerate"}
    assert (rows.degenerate_share == 1.0).all()

    out = compare.compare(tmp_path / "a" / "v", tmp_path / "b" / "v")
    k3 = next(r for r in out if r["num_speculative_tokens"] == 3)
    assert (k3["a_verdict"], k3["b_verdict"], k3["b_vs_a_verdict"]) == ("degenerate",) * 3
    assert k3["b_vs_a_verdict_reason"].startswith("B repeat 1 of 2: 18 of 18")
    k7 = next(r for r in out if r["num_speculative_tokens"] == 7)
    assert (k7["a_verdict"], k7["a_degenerate_share"], k7["b_degenerate_share"]) == ("faster", 0.0, 1.0)
    assert any("A no verdict" not in line and "B no verdict" in line for line in compare.table_lines([k7]))


def test_the_summary_and_compare_carry_the_streams_and_the_steady_state(tmp_path):
    """Concurrency 4 (the fake runs its prompts in waves of four): K=3 starves prompt 0's stream."""
    grid = study(tmp_path / "a", {0: 1.0, 3: 1.5}, starve=(3,))
    table = summarize(grid).set_index("num_speculative_tokens")
    assert (table.concurrency == 4).all() and table.steady_na.isna().all()
    assert (table.steady_output_tok_s > 0).all() and (table.steady_window_s > 0).all()
    assert table.loc[3, "steady_output_tok_s"] > table.loc[0, "steady_output_tok_s"]     # K=3 is 1.5x faster
    assert table.loc[3, "starved_streams"] >= 2 and table.loc[0, "starved_streams"] == 0     # one per repeat
    assert table.loc[3, "stream_starvation"].startswith("repeat 1 of 2: 1 of 18 streams decoded at under 25%")
    assert table.loc[3, "decode_tok_s_min_over_max"] < STARVED_SHARE < table.loc[0, "decode_tok_s_min_over_max"]
    assert set(table.decode_tok_s_source) == {"client stream"}
    study(tmp_path / "b", {0: 1.0, 3: 1.5}, seed=5)
    [_, k3] = sorted(compare.compare(tmp_path / "a" / "v", tmp_path / "b" / "v"),
                     key=lambda r: r["num_speculative_tokens"])
    assert k3["a_starved_streams"] >= 2 and k3["b_starved_streams"] == 0 and k3["b_steady_output_tok_s"] > 0
    assert any("starved: repeat 1 of 2: 1 of 18" in line for line in compare.table_lines([k3]))


# ---- a target that repeats, through the local engine ---------------------------------------------------------
def repeating_target(models, out):
    """The random pair's target with every layer's output projections zeroed: each layer adds nothing to the
    residual, so the next token is a function of the current one alone and greedy decoding falls into a loop
    (this pair's: newlines)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(models / "target", out)
    weights = load_file(out / "model.safetensors")
    for name in weights:
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = torch.zeros_like(weights[name])
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    return out


def test_a_target_that_repeats_gets_no_verdict_through_the_local_engine(random_results, tmp_path):
    from specsweep.backends.local.session import LocalPair, decode_rows, engine_timing
    from specsweep.grid.cells import expand
    from specsweep.grid.config import compose_jobs
    from specsweep.grid.datasets import synthetic_rows

    models = random_results / "models" / "tiny"
    target = repeating_target(models, tmp_path / "target")
    grid = expand(compose_jobs([f"results_dir={random_results}", "server=local", "kernel=local_sdpa",
                                f"pair.target={target}", f"pair.drafter={models / 'drafter'}",
                                "pair.built_by_workflow=false", "sweep.num_speculative_tokens=3"]))
    bench = {"concurrency": 2, "max_tokens": 32, "temperature": 0.0, "ignore_eos": True, "thinking": False,
             "seed": 0}
    prompts = [r["turns"] for r in synthetic_rows(4, 0)]
    runs = {}
    for cell in grid.servers.values():
        rows = decode_rows(LocalPair(cell.spec), prompts, bench, progress=False)
        runs[cell.spec["method"]] = [{**r, "server_timing": engine_timing(r)} for r in rows]
    for rows in runs.values():
        f = metrics.quality_figures(rows, bench["concurrency"])
        assert f["degenerate_answers"] == 4 and f["answers_degenerate"].startswith("4 of 4 answers degenerate")
        assert f["decode_tok_s_source"] == "server" and f["decode_tok_s"]["p50"] > 0     # the engine's own clock
        assert [r["start_s"] for r in rows] == sorted(r["start_s"] for r in rows)        # two batches, in order
        assert f["steady_clock"] == "local engine (its own step times)"
        assert (f["steady_output_tok_s"] is None) == (f["steady_na"] is not None)
    p = stats.paired_speedup([runs["dflash"]], [runs["none"]], sides=("this cell", "the baseline"))
    assert p["verdict"] == "degenerate" and p["speedup_e2e_geomean"] > 0
    assert p["verdict_reason"].startswith("this cell repeat 1 of 1: 4 of 4 answers degenerate")
