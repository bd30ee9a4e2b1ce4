import pytest

from specsweep.metrics import dist, greedy_agreement, median_mad, request_figures, speedup


def rec(index, ok=True, tokens=10, ttft=0.1, e2e=1.0, text="x", turn=0):
    return {"index": index, "turn": turn, "ok": ok, "completion_tokens": tokens if ok else None,
            "prompt_tokens": 5 if ok else None, "ttft_s": ttft if ok else None, "e2e_s": e2e,
            "itl_s": [0.1] * (tokens - 1) if ok else [], "text": text}


def test_request_figures_count_every_request_and_derive_rates():
    rows = [rec(0), rec(1, tokens=20, e2e=2.0), rec(2, ok=False)]
    f = request_figures(rows, wall_s=2.0)
    assert (f["requests_sent"], f["requests_completed"], f["requests_errored"]) == (3, 2, 1)
    assert f["error_rate"] == pytest.approx(1 / 3)
    assert f["output_tok_s"] == pytest.approx(30 / 2.0)
    assert f["request_throughput"] == pytest.approx(1.0)
    # TPOT excludes the first token: (e2e - ttft) / (tokens - 1)
    assert f["tpot_ms"]["mean"] == pytest.approx(((0.9 / 9) + (1.9 / 19)) / 2 * 1e3)
    assert f["ttft_ms"]["median"] == pytest.approx(100.0)


def test_dist_percentiles():
    d = dist(list(range(1, 101)))
    assert d["median"] == 50.5 and d["p90"] == pytest.approx(90.1) and d["p99"] == pytest.approx(99.01)
    assert dist([])["mean"] is None


def test_greedy_agreement_matches_prompt_and_turn():
    base = [rec(0, text="a"), rec(1, text="b"), rec(1, text="c", turn=1)]
    cell = [rec(0, text="a"), rec(1, text="B"), rec(1, text="c", turn=1), rec(2, text="z")]
    assert greedy_agreement(cell, base) == pytest.approx(2 / 3)
    assert greedy_agreement([rec(5)], base) is None


def test_speedup_is_baseline_over_cell_for_latency():
    cell = {"output_tok_s": 300.0, "tpot_ms": {"mean": 5.0}}
    base = {"output_tok_s": 100.0, "tpot_ms": {"mean": 10.0}}
    assert speedup(cell, base) == {"speedup_output_tok_s": 3.0, "speedup_tpot": 2.0}


def test_median_and_mad_over_repeats():
    assert median_mad([1.0, 2.0, 4.0, None]) == (2.0, 1.0)
    assert median_mad([None]) == (None, None)


def test_acceptance_from_lengths_follows_vllms_convention():
    from specsweep.metrics import acceptance_from_lengths

    # block 4 (K = 3): steps that accepted 0, 3, 1 and 3 drafts
    a = acceptance_from_lengths([1, 4, 2, 4], block_size=4)
    assert a["num_drafts"] == 4 and a["num_draft_tokens"] == 12 and a["num_accepted_tokens"] == 7
    assert a["mean_acceptance_length"] == pytest.approx(1 + 7 / 4)
    assert a["acceptance_rate"] == pytest.approx(7 / 12)
    assert a["per_position_acceptance"] == pytest.approx([3 / 4, 2 / 4, 2 / 4])
    assert a["acceptance_length_histogram"] == [1, 1, 0, 2]
    # the mean length is 1 + the sum of the per-position rates, whatever the steps
    assert a["mean_acceptance_length"] == pytest.approx(1 + sum(a["per_position_acceptance"]))


def test_length_shares_invert_per_position_rates():
    from specsweep.metrics import acceptance_from_lengths, length_shares

    lengths = [1, 4, 2, 4, 3, 3, 1]
    a = acceptance_from_lengths(lengths, block_size=4)
    shares = length_shares(a["per_position_acceptance"])
    assert shares == pytest.approx([h / len(lengths) for h in a["acceptance_length_histogram"]])
    assert sum(shares) == pytest.approx(1.0)
    assert length_shares([]) == [1.0]          # no drafts accepted ever: every step has length 1
