"""Paired statistics: a clearly faster cell is `faster`, an identical one `equivalent within ±5%`, the CI is seeded,
a prompt's turns and repeats are resampled together, and the CI covers the true ratio about as often as it says."""
import math
import random

import numpy as np
import pytest

from specsweep.verdicts import stats


def rows(latencies, turns=1, ttft=0.05, tokens=20):
    """Request rows: one per (prompt, turn), e2e latency from `latencies[prompt]` (a number or per-turn list)."""
    out = []
    for i, lat in enumerate(latencies):
        for t in range(turns):
            e2e = lat[t] if isinstance(lat, list) else lat
            out.append({"index": i, "turn": t, "ok": True, "e2e_s": e2e, "ttft_s": ttft, "completion_tokens": tokens})
    return out


def baseline(n=16, seed=0):
    rng = random.Random(seed)
    return [rng.uniform(0.5, 2.0) for _ in range(n)]


def test_a_clearly_faster_cell_is_faster():
    base = baseline()
    rng = random.Random(1)
    fast = [b / 1.5 * rng.uniform(0.95, 1.05) for b in base]
    s = stats.paired_speedup([rows(fast)], [rows(base)])
    assert s["verdict"] == "faster" and s["speedup_e2e_ci_low"] > 1.3
    assert s["speedup_e2e_geomean"] == pytest.approx(1.5, rel=0.05)
    assert s["paired_prompts"] == s["paired_requests"] == 16
    assert s["speedup_streamed_tpot_geomean"] is None      # rows without chunk timings have no streamed TPOT
    slow = stats.paired_speedup([rows(base)], [rows(fast)])
    assert slow["verdict"] == "slower" and slow["speedup_e2e_ci_high"] < 1


def test_identical_cells_are_equivalent_within_the_margin():
    base = rows(baseline())
    s = stats.paired_speedup([base], [base])
    assert s["verdict"] == "equivalent within ±5%"
    assert stats.paired_speedup([base], [base], equivalence=0.02)["verdict"] == "equivalent within ±2%"
    assert s["speedup_e2e_geomean"] == s["speedup_e2e_ci_low"] == s["speedup_e2e_ci_high"] == 1.0


def test_noise_around_no_change_is_unresolved():
    base = baseline()
    rng = random.Random(2)
    same = [b * math.exp(rng.gauss(0, 0.2)) for b in base]
    s = stats.paired_speedup([rows(same)], [rows(base)])
    assert s["verdict"] == "unresolved" and s["speedup_e2e_ci_low"] < 1 < s["speedup_e2e_ci_high"]
    assert s["speedup_e2e_ci_low"] < 1 / 1.05 or s["speedup_e2e_ci_high"] > 1.05


def test_the_ci_is_seeded():
    base = baseline()
    noisy = [b / 1.1 * math.exp(random.Random(i).gauss(0, 0.1)) for i, b in enumerate(base)]
    assert stats.paired_speedup([rows(noisy)], [rows(base)]) == stats.paired_speedup([rows(noisy)], [rows(base)])


def test_requests_pair_by_prompt_and_turn_and_failures_drop_out():
    base = rows([1.0, 2.0, [1.0, 3.0]], turns=2)
    cell = [dict(r, e2e_s=r["e2e_s"] / 2) for r in base]
    cell[0]["ok"] = False                              # prompt 0 turn 0 failed in the cell
    pairs = sorted(stats._matched([cell], [base], lambda r: stats.request_latency(r, "e2e")))
    assert [(i, b / a) for i, a, b in pairs] == [(0, 2.0), (1, 2.0), (1, 2.0), (2, 2.0), (2, 2.0)]


def test_a_prompts_turns_are_one_unit_and_only_requests_finished_everywhere_count():
    base = baseline(6)
    cell = [rows([b / 2 for b in base], turns=2) for _ in range(2)]
    cell[1][0]["ok"] = False                           # prompt 0 turn 0 failed in the cell's second repeat
    s = stats.paired_speedup(cell, [rows(base, turns=2)])
    assert s["paired_prompts"] == 6 and s["paired_requests"] == 2 * 11 and s["speedup_e2e_geomean"] == pytest.approx(2)


def test_repeats_are_resampled_so_a_slow_stretch_widens_the_ci():
    """Five repeats of a cell, each with its own load (a factor shared by all its requests), against a
    steady baseline: pooling prompts alone would be confident; resampling repeats is not."""
    base = baseline(32)
    rng = random.Random(3)
    loads = [0.6, 1.0, 1.5, 0.7, 1.4]                  # the cell's repeats ran at different machine loads
    cell = [rows([b / 1.1 * load * math.exp(rng.gauss(0, 0.02)) for b in base]) for load in loads]
    pooled_one_repeat = stats.paired_speedup(cell[:1], [rows(base)])
    assert pooled_one_repeat["verdict"] == "faster"    # one repeat at low load looks clearly faster
    s = stats.paired_speedup(cell, [rows(base)] * 5)
    assert s["verdict"] == "unresolved" and s["speedup_e2e_ci_high"] / s["speedup_e2e_ci_low"] > 1.5


def test_too_few_prompts_give_no_ci_and_no_verdict():
    base = baseline(stats.MIN_PROMPTS - 1)
    s = stats.paired_speedup([rows([b / 2 for b in base])], [rows(base)])
    assert s["speedup_e2e_geomean"] == pytest.approx(2.0) and s["speedup_e2e_ci_low"] is None and s["verdict"] is None
    assert stats.paired_speedup([], [])["verdict"] is None


def test_tok_s_ratio_of_medians_has_a_ci_from_three_repeats():
    assert stats.ratio_of_medians([30.0, 36.0], [20.0, 24.0]) == {"ratio": 1.5, "ci_low": None, "ci_high": None}
    r = stats.ratio_of_medians([30.0, 33.0, 36.0], [20.0, 22.0, 24.0])
    assert r["ratio"] == pytest.approx(1.5) and r["ci_low"] <= 1.5 <= r["ci_high"]


def test_acceptance_from_the_local_engines_steps_or_a_servers_per_request_figures():
    local = {"ok": True, "acceptance_lengths": [1, 4, 3]}
    server = {"ok": True, "spec": {"num_spec_steps": 3, "num_accepted_draft_tokens": 5}}
    assert stats.row_acceptance(local) == stats.row_acceptance(server) == (3.0, 5.0)
    assert stats.row_acceptance({"ok": True}) is None
    assert stats.mean_acceptance_length([local, server, {"ok": True}]) == pytest.approx(1 + 10 / 6)
    a = [{"index": i, "turn": 0, "ok": True, "acceptance_lengths": [2, 2]} for i in range(8)]
    b = [{"index": i, "turn": 0, "ok": True, "acceptance_lengths": [3, 3]} for i in range(8)]
    r = stats.acceptance_ratio([b], [a])
    assert r["ratio"] == pytest.approx(1.5) and r["ci_low"] == r["ci_high"] == pytest.approx(1.5)
    assert stats.acceptance_ratio([rows(baseline())], [rows(baseline())])["ratio"] is None


def test_the_ci_covers_the_true_ratio_about_as_often_as_it_says():
    """100 simulated studies, 16 prompts x 8 repeats, true speedup 1.3, per-repeat load noise shared by a
    repeat's requests and per-request noise: the CI holds 1.3 about 95% of the time."""
    rng = np.random.default_rng(0)
    hits = 0
    for trial in range(100):
        prompt = rng.uniform(0.5, 2.0, 16)
        base = [rows(list(prompt * np.exp(rng.normal(0, 0.2) + rng.normal(0, 0.1, 16)))) for _ in range(8)]
        cell = [rows(list(prompt / 1.3 * np.exp(rng.normal(0, 0.2) + rng.normal(0, 0.1, 16)))) for _ in range(8)]
        s = stats.speedup_ci(cell, base, "e2e", seed=trial)
        hits += s["ci_low"] <= 1.3 <= s["ci_high"]
    assert 0.85 <= hits / 100 <= 1.0
