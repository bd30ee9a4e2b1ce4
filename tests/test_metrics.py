import pytest

from specsweep.metrics import (dist, greedy_agreement, median_mad, repeat_agreement, request_figures,
                               speedup_output_tok_s)


def rec(index, ok=True, tokens=10, ttft=0.1, e2e=1.0, text="x", turn=0):
    return {"index": index, "turn": turn, "ok": ok, "completion_tokens": tokens if ok else None,
            "prompt_tokens": 5 if ok else None, "ttft_s": ttft if ok else None, "e2e_s": e2e,
            "itl_s": [0.1] * (tokens - 1) if ok else [], "text": text,
            "chunk_t_s": [ttft + i * (e2e - ttft) / (tokens - 1) for i in range(tokens)] if ok else [],
            "chunk_tokens": [1] * tokens if ok else []}


def test_request_figures_count_every_request_and_derive_rates():
    rows = [rec(0), rec(1, tokens=20, e2e=2.0), rec(2, ok=False)]
    f = request_figures(rows, wall_s=2.0)
    assert (f["requests_sent"], f["requests_completed"], f["requests_errored"]) == (3, 2, 1)
    assert f["error_rate"] == pytest.approx(1 / 3)
    assert f["output_tok_s"] == pytest.approx(30 / 2.0)
    assert f["request_throughput"] == pytest.approx(1.0)
    # streamed TPOT excludes the first chunk: (last chunk - first chunk) / tokens after the first chunk
    assert f["streamed_tpot_ms"]["mean"] == pytest.approx(((0.9 / 9) + (1.9 / 19)) / 2 * 1e3)
    assert f["ttft_ms"]["median"] == pytest.approx(100.0)
    # e2e per output token is another figure: the whole time (TTFT included) over all tokens, pooled
    assert f["e2e_ms_per_output_token"] == pytest.approx(3.0 / 30 * 1e3)


def test_dist_percentiles():
    d = dist(list(range(1, 101)))
    assert d["median"] == 50.5 and d["p90"] == pytest.approx(90.1) and d["p99"] == pytest.approx(99.01)
    assert dist([])["mean"] is None


def test_greedy_agreement_matches_prompt_and_turn():
    base = [rec(0, text="a"), rec(1, text="b"), rec(1, text="c", turn=1)]
    cell = [rec(0, text="a"), rec(1, text="B"), rec(1, text="c", turn=1), rec(2, text="z")]
    assert greedy_agreement(cell, base) == pytest.approx(2 / 3)
    assert greedy_agreement([rec(5)], base) is None


def test_texts_that_drop_every_token_say_nothing_of_agreement():
    """Random weights can emit special tokens only: 128 tokens, and the detokenizer leaves no text (an H100 27B
    hybrid study, 2026-12-06): two such empty texts are equal whatever the tokens were."""
    from specsweep.metrics import agreement_na
    ok = [rec(0, text="a"), {**rec(1, text=""), "completion_tokens": 0}]   # no tokens, no text: nothing dropped
    assert agreement_na(ok, ok) is None
    blank = [rec(0, text="", tokens=128), rec(1, text="", tokens=128, ok=False)]
    assert agreement_na(ok, blank).startswith("1 request(s) decoded tokens but returned no text")
    assert agreement_na([{k: v for k, v in r.items() if k != "text"} for r in blank]) is None  # rows kept slim


def test_repeat_agreement_compares_each_setting_with_its_own_first_repeat():
    first = [rec(0, text="a"), rec(1, text="b"), rec(1, text="c", turn=1), rec(3, ok=False, text="w")]
    again = [rec(0, text="a"), rec(1, text="B"), rec(1, text="c", turn=1), rec(2, text="z"), rec(3, text="w"),
             rec(0, ok=False, text="q")]
    other = [[rec(0, text="long")], [rec(0, text="long")]]     # another setting (ignore_eos): its own first repeat
    assert repeat_agreement([[first, again, first], other]) == pytest.approx(6 / 7)     # 2/3, 3/3 and 1/1
    assert repeat_agreement([[first], [], [again]]) is None                              # one repeat a setting


def test_output_tok_s_speedup_is_cell_over_baseline():
    assert speedup_output_tok_s(300.0, 100.0) == 3.0
    assert speedup_output_tok_s(None, 100.0) is None and speedup_output_tok_s(300.0, 0.0) is None


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


def vllm_spec(per_step_accepted, k):
    """A response's metrics.speculative_decoding as vLLM 0.32 sends it at `detailed` (v1/metrics/stats.py)."""
    hist = [per_step_accepted.count(j) for j in range(k + 1)]
    acc, steps = sum(per_step_accepted), len(per_step_accepted)
    return {"mean_acceptance_length": 1 + acc / steps if steps else 1.0, "draft_acceptance_rate": acc / (k * steps)
            if steps else 0.0, "acceptance_histogram": hist, "num_spec_steps": steps, "num_accepted_draft_tokens": acc,
            "num_draft_tokens": k * steps, "num_spec_tokens": k, "per_step_accepted": per_step_accepted,
            "per_step_drafted": [k] * steps}


def test_per_prompt_mean_weighs_each_request_once_and_the_token_weighted_mean_each_step():
    from specsweep.metrics import per_request_acceptance

    # a short answer that accepts everything (3 steps of length 4) and a long one that accepts little
    # (9 steps, one of length 2): token-weighted 1 + 10/12, per prompt ((1 + 3) + (1 + 1/9)) / 2
    rows = [{**rec(0, tokens=12), "spec": vllm_spec([3, 3, 3], 3)},
            {**rec(1, tokens=10), "spec": vllm_spec([1] + [0] * 8, 3)}]
    a = per_request_acceptance(rows, 3)
    assert (a["num_drafts"], a["num_draft_tokens"], a["num_accepted_tokens"]) == (12, 36, 10)
    assert a["mean_acceptance_length"] == pytest.approx(1 + 10 / 12)
    assert a["mean_acceptance_length_per_prompt"] == pytest.approx((4 + 1 + 1 / 9) / 2)
    assert a["mean_acceptance_length_per_prompt"] - a["mean_acceptance_length"] > 0.7
    assert a["acceptance_length_per_prompt"]["p50"] == pytest.approx(a["mean_acceptance_length_per_prompt"])
    assert a["acceptance_length_per_prompt"]["p10"] < a["acceptance_length_per_prompt"]["p90"]
    assert a["acceptance_length_histogram"] == [8, 1, 0, 3]             # index i: steps of length i + 1
    assert a["requests_without_figures"] == 0 and a["requests_without_drafts"] == 0


def test_the_local_engines_per_step_lengths_go_through_the_same_function():
    from specsweep.metrics import acceptance_from_lengths, per_request_acceptance

    server = [{**rec(0), "spec": vllm_spec([3, 0, 1], 3)}, {**rec(1), "spec": vllm_spec([2, 2], 3)}]
    local = [{**rec(0), "acceptance_lengths": [4, 1, 2]}, {**rec(1), "acceptance_lengths": [3, 3]}]
    assert per_request_acceptance(local, 3) == per_request_acceptance(server, 3)
    tokens = acceptance_from_lengths([4, 1, 2, 3, 3], block_size=4)
    a = per_request_acceptance(local, 3)
    assert a["acceptance_length_histogram"] == tokens["acceptance_length_histogram"]
    assert a["mean_acceptance_length"] == tokens["mean_acceptance_length"]


def test_requests_without_drafts_or_figures_are_counted_not_averaged():
    from specsweep.metrics import per_request_acceptance

    rows = [{**rec(0), "spec": vllm_spec([2], 3)}, {**rec(1), "spec": vllm_spec([], 3)}, rec(2), rec(3, ok=False)]
    a = per_request_acceptance(rows, 3)
    assert a["requests_without_figures"] == 1 and a["requests_without_drafts"] == 1
    assert a["mean_acceptance_length_per_prompt"] == 3.0
    assert per_request_acceptance([rec(0), rec(1)], 3) is None


def test_spec_mismatch_names_every_count_that_differs():
    from specsweep.metrics import spec_mismatch

    per_request = {"num_drafts": 12, "num_draft_tokens": 36, "num_accepted_tokens": 10}
    counted = {"num_drafts": 12.0, "num_draft_tokens": 36.0, "num_accepted_tokens": 10.0}
    assert spec_mismatch(per_request, counted) is None
    msg = spec_mismatch(per_request, {**counted, "num_drafts": 13.0, "num_accepted_tokens": 11.0})
    assert msg == ("per-request spec-decode figures disagree with the counters (drafts: 12 summed over requests, "
                   "13 counted; accepted tokens: 10 summed over requests, 11 counted)")
    zero = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
    assert spec_mismatch(zero, None) is None                          # no drafts: vLLM leaves spec_decode None


def test_output_length_and_the_warning_when_cells_decode_different_lengths():
    from specsweep.metrics import length_mismatch, output_length

    rows = [rec(i, tokens=t) for i, t in enumerate([10, 20, 30, 40])] + [rec(9, ok=False)]
    o = output_length(rows)
    assert (o["mean"], o["min"], o["max"], o["p50"]) == (25.0, 10, 40, 25.0)
    assert o["p10"] == pytest.approx(13.0) and o["p90"] == pytest.approx(37.0)
    assert request_figures(rows, 1.0)["output_length"] == o

    def cell(tokens, n=4):
        return {"completion_tokens": tokens, "requests_completed": n}

    assert length_mismatch(cell(104), cell(100)) is None                 # within 5%
    msg = length_mismatch(cell(80), cell(100))
    assert msg.startswith("mean output length 20.0 tokens vs the baseline's 25.0 (-20.0%)")
    assert msg.endswith("set sweep.ignore_eos=true to decode exactly max_tokens")
    assert length_mismatch(cell(0, 0), cell(100)) is None
