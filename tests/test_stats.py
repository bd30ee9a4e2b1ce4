"""Paired statistics: a clearly faster cell is `faster`, an identical one `within noise`, the CI is seeded,
a prompt's turns and repeats are resampled together, and the CI covers the true ratio about as often as it says."""
import math
import random

import numpy as np
import pytest

from specsweep import stats


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
    assert s["speedup_tpot_ci_low"] > 1.0
    slow = stats.paired_speedup([rows(base)], [rows(fast)])
    assert slow["verdict"] == "slower" and slow["speedup_e2e_ci_high"] < 1


def test_identical_cells_are_within_noise():
    base = rows(baseline())
    s = stats.paired_speedup([base], [base])
    assert s["verdict"] == "within noise"
    assert s["speedup_e2e_geomean"] == s["speedup_e2e_ci_low"] == s["speedup_e2e_ci_high"] == 1.0


def test_noise_around_no_change_is_within_noise():
    base = baseline()
    rng = random.Random(2)
    same = [b * math.exp(rng.gauss(0, 0.2)) for b in base]
    s = stats.paired_speedup([rows(same)], [rows(base)])
    assert s["verdict"] == "within noise" and s["speedup_e2e_ci_low"] < 1 < s["speedup_e2e_ci_high"]


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


def test_a_prompts_turns_and_repeats_are_one_bootstrap_unit():
    # two repeats of 6 two-turn prompts: 24 requests, but 6 units to resample
    base = baseline(6)
    s = stats.paired_speedup([rows([b / 2 for b in base], turns=2)] * 2, [rows(base, turns=2)] * 2)
    assert s["paired_prompts"] == 6 and s["paired_requests"] == 24
    g = stats.geomean_ci([(i % 6, v) for i, v in enumerate(np.linspace(-0.1, 0.3, 24))])
    assert g["prompts"] == 6 and g["requests"] == 24


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
    """200 simulated cells, 24 prompts, true speedup 1.3 with log-normal per-prompt noise: ~95% coverage."""
    rng = np.random.default_rng(0)
    hits = 0
    for trial in range(200):
        logs = np.log(1.3) + rng.normal(0, 0.15, 24)
        g = stats.geomean_ci(list(enumerate(logs)), seed=trial)
        hits += g["ci_low"] <= 1.3 <= g["ci_high"]
    assert 0.88 <= hits / 200 <= 0.99
