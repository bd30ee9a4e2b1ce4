"""Acceptance by phase (phases.py) on constructed step sequences: exact figures, and the blank-with-reason paths."""
import pytest

from specsweep.metrics import phases


def test_split_at_think_end_exact():
    # K=3. Tokens: 0 (prefill); step 0 commits 1..3 (a=2); step 1 commits 4 (a=0); step 2 commits 5..8 (a=3);
    # step 3 commits 9..10 (a=1); 11 tokens. </think> at position 5: steps starting at 1, 4, 5 are thinking.
    acc, drafted = [2, 0, 3, 1], [3, 3, 3, 3]
    s = phases.split(acc, drafted, think_end=5, completion_tokens=11, thinking=True)
    assert s["na"] is None and s["think_closed"] is True and s["think_end"] == 5
    think, answer = s["think"], s["answer"]
    assert (think["steps"], think["accepted"], think["drafted"]) == (3, 5, 9)
    assert think["acceptance_length"] == pytest.approx(1 + 5 / 3)
    assert think["acceptance_rate"] == pytest.approx(5 / 9)
    assert think["per_position_acceptance"] == pytest.approx([2 / 3, 2 / 3, 1 / 3])
    assert (think["tokens"], answer["tokens"]) == (6, 5)
    assert think["token_share"] == pytest.approx(6 / 11)
    assert (answer["steps"], answer["accepted"], answer["acceptance_length"]) == (1, 1, 2.0)
    assert answer["per_position_acceptance"] == [1.0, 0.0, 0.0]


def test_boundary_step_belongs_to_thinking():
    # </think> at position 4, committed by step 1 (starts at 4): thinking; step 2 starts at 5: answer
    s = phases.split([2, 0, 3], [3, 3, 3], think_end=4, completion_tokens=9, thinking=True)
    assert (s["think"]["steps"], s["answer"]["steps"]) == (2, 1)
    # </think> at 3, inside step 0 (positions 1..3): only step 0 is thinking
    s = phases.split([2, 0, 3], [3, 3, 3], think_end=3, completion_tokens=9, thinking=True)
    assert (s["think"]["steps"], s["answer"]["steps"]) == (1, 2)
    assert s["think"]["tokens"] == 4


def test_thinking_off_is_all_answer_and_unclosed_is_all_thinking():
    off = phases.split([1, 1], [2, 2], think_end=None, completion_tokens=5, thinking=False)
    assert off["think"]["steps"] == 0 and off["answer"]["steps"] == 2 and off["answer"]["token_share"] == 1.0
    assert off["think"]["acceptance_length"] is None
    cut = phases.split([1, 1], [2, 2], think_end=-1, completion_tokens=5, thinking=True)
    assert cut["think_closed"] is False and cut["think"]["steps"] == 2 and cut["answer"]["tokens"] == 0


def test_last_step_may_be_cut_but_counts_must_match():
    # 1 + 3 + 3 = 7 committed, the answer stopped at 6 (the last step cut): fine
    assert phases.split([2, 2], [2, 2], -1, 6, thinking=True)["na"] is None
    # the steps before the last already reach the answer's length: inconsistent
    assert "commit" in phases.split([2, 2], [2, 2], -1, 4, thinking=True)["na"]
    # too few tokens committed
    assert "commit" in phases.split([0, 0], [2, 2], -1, 6, thinking=True)["na"]
    assert "drafted" in phases.split([1], [1, 1], -1, 3, thinking=True)["na"]
    assert "more drafts" in phases.split([3], [2], -1, 5, thinking=True)["na"]


def test_blank_with_reason_without_step_counts():
    # SGLang 0.5.17 / vLLM 0.26 / vLLM summary level: histogram only
    record = {"ok": True, "completion_tokens": 5, "spec": {"num_spec_steps": 2, "acceptance_histogram": [0, 2]}}
    s = phases.request_split(record, thinking=True)
    assert s == {"na": phases.NO_STEP_COUNTS}
    pooled = phases.pooled([s])
    assert pooled["na"] == phases.NO_STEP_COUNTS and pooled["think"] is None
    cols = phases.columns(pooled)
    assert set(cols) == set(phases.COLUMNS)
    assert cols["phase_split_na"] == phases.NO_STEP_COUNTS and cols["think_acceptance_length"] is None
    # token ids unknown: the position of </think> is unknown
    record = {"completion_tokens": 3, "spec": {"per_step_accepted": [1], "per_step_drafted": [2]}}
    assert "unknown" in phases.request_split(record, thinking=True)["na"]


def test_vllm_and_local_records():
    vllm = {"completion_tokens": 3, "think_end": 1, "spec": {"per_step_accepted": [1], "per_step_drafted": [2]}}
    local = {"completion_tokens": 3, "think_end": 1, "per_step_accepted": [1], "per_step_drafted": [2]}
    assert phases.request_split(vllm, True) == phases.request_split(local, True)
    assert phases.think_end_position([5, 7, 9, 7], 7) == 1
    assert phases.think_end_position([5], 7) == -1
    assert phases.think_end_position(None, 7) is None


def test_pooled_token_weighted_with_ci():
    a = phases.split([2, 0, 3, 1], [3, 3, 3, 3], 5, 11, True)
    b = phases.split([0, 0], [3, 3], 1, 3, True)          # steps start at 1 (thinking) and 2 (answer)
    pooled = phases.pooled([a, b, {"na": "x"}])
    assert pooled["requests"] == 2
    think = pooled["think"]
    assert think["steps"] == 3 + 1 and think["acceptance_length"] == pytest.approx(1 + 5 / 4)
    assert think["per_position_acceptance"] == pytest.approx([2 / 4, 2 / 4, 1 / 4])
    assert think["token_share"] == pytest.approx((6 + 2) / 14)
    lo, hi = think["acceptance_length_ci_low"], think["acceptance_length_ci_high"]
    assert lo <= think["acceptance_length"] <= hi


def test_the_local_engine_records_its_own_steps():
    from specsweep.backends.local.session import phase_fields
    from specsweep.models.dflash.engine import Output, Step

    # two rows, block 4: row 1 stops after step 0; the last step's drafts were cut to 2 at the budget edge
    steps = [Step(drafted=[[5, 6, 7], [5, 6, 7]], target=[[]] * 2, accepted=[3, 1], committed=[4, 2], live=[0, 1]),
             Step(drafted=[[8, 9], [0, 0]], target=[[]] * 2, accepted=[1, 0], committed=[2, 1], live=[0])]
    out = Output(sequences=[[1, 2, 3, 99, 4, 5, 6], [1, 2, 3]], steps=steps)
    row0 = phase_fields(out, 0, out.sequences[0], think_id=99)
    assert row0 == {"per_step_accepted": [3, 1], "per_step_drafted": [3, 2], "think_end": 3}
    assert phase_fields(out, 1, out.sequences[1], think_id=99) == {"per_step_accepted": [1], "per_step_drafted": [3],
                                                                    "think_end": -1}
    s = phases.request_split({**row0, "completion_tokens": 7}, thinking=True)
    assert s["na"] is None and (s["think"]["steps"], s["answer"]["steps"]) == (1, 1)


def test_vllm_rows_get_the_think_end_from_their_token_ids(monkeypatch):
    from specsweep.backends.vllm import session
    from specsweep.run import client

    monkeypatch.setattr(session, "_think_id", lambda tokenizer: 42)
    rows = [{"token_ids": [1, 42, 3]}, {"token_ids": [1, 2]}, {"token_ids": None}, {}]
    session.mark_think_end(rows, "/some/tokenizer")
    assert rows == [{"think_end": 1}, {"think_end": -1}, {}, {}]          # ids dropped; no ids, no position
    s = client.ChatSettings("m", 8, 0.0, 0, True, 1.0, return_token_ids=True)
    assert client._payload([], s)["return_token_ids"] is True
    assert "return_token_ids" not in client._payload([], client.ChatSettings("m", 8, 0.0, 0, False, 1.0))
