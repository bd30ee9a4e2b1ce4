"""The sequential verdicts (specsweep.verdicts.sequential): the vocabulary, the interval, the stopping rule, and the A/A
simulation on recorded requests of one server configuration launched twice or more (issue 46's Done-when)."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from specsweep.verdicts import sequential as sq
from specsweep.verdicts import stats as vocab  # the one vocabulary is stats.py's

AA = json.loads((Path(__file__).parent / "data" / "aa_requests.json").read_text())
STUDIES, MAX_REPEATS = 1000, 10


def test_vocabulary_one_word_per_interval():
    assert vocab.verdict(1.01, 1.2) == "faster"
    assert vocab.verdict(0.8, 0.99) == "slower"
    assert vocab.verdict(0.97, 1.04) == "equivalent"
    assert vocab.verdict(1 / 1.05, 1.05) == "equivalent"          # the margin is symmetric on the log scale
    assert vocab.verdict(0.95, 1.04) == "unresolved"              # 0.95 < 1/1.05
    assert vocab.verdict(0.95, 1.04, at_budget=False) is None
    assert vocab.verdict(1.01, 1.04) == "faster"                  # a shown difference is named, however small
    assert vocab.verdict(0.9, 1.2, equivalence=0.25) == "equivalent"
    assert vocab.verdict(None, 1.0) is None
    assert vocab.verdict_text("equivalent") == "equivalent within ±5%"
    assert vocab.verdict_text(None) == "no CI"


def test_block_log_ratios_pairs_prompt_and_turn_per_block():
    def row(i, e2e, ok=True):
        return {"index": i, "turn": 0, "ok": ok, "e2e_s": e2e}
    cell = [[row(0, 1.0), row(1, 2.0)], [row(0, 1.0), row(1, 1.0, ok=False)], [row(0, 1.0)]]
    ref = [[row(1, 4.0), row(0, 2.0)], [row(0, 4.0), row(1, 4.0)], [row(1, 1.0)]]
    assert sq.block_log_ratios(cell, ref) == pytest.approx([math.log(2), math.log(4)])   # block 3 pairs nothing


def test_interval_is_unbounded_before_two_blocks_and_narrows():
    assert sq.confidence_sequence([0.1]) == (-math.inf, math.inf)
    lo3, hi3 = sq.confidence_sequence([0.1, 0.12, 0.08])
    lo9, hi9 = sq.confidence_sequence([0.1, 0.12, 0.08] * 3)
    assert lo3 < lo9 < 0.1 < hi9 < hi3
    assert sq.confidence_sequence([0.1, 0.1, 0.1]) == pytest.approx((0.1, 0.1))


def test_interval_is_wider_than_the_t_interval_looked_at_once():
    blocks = [0.1, 0.12, 0.08, 0.11, 0.09]
    lo, hi = sq.confidence_sequence(blocks)
    t_half = sps.t.ppf(0.975, 4) * np.std(blocks, ddof=1) / math.sqrt(5)
    assert (hi - lo) / 2 > 1.5 * t_half


def test_look_stops_when_every_comparison_is_answered_else_at_the_budget():
    clear, noisy = [0.3, 0.31, 0.29, 0.3], [0.3, -0.3, 0.2, -0.25]
    stop, rec = sq.look({"K=2": clear[:1]}, max_repeats=10)
    assert not stop and rec["K=2"]["verdict"] is None and rec["K=2"]["stopped"] is None
    stop, rec = sq.look({"K=2": clear, "K=6 vs K=2": noisy}, max_repeats=10)
    assert not stop and rec["K=2"]["verdict"] == "faster" and rec["K=6 vs K=2"]["verdict"] is None
    assert rec["K=2"]["answered_at"] == 3 and rec["K=2"]["repeats"] == 4
    stop, rec = sq.look({"K=2": clear, "K=6 vs K=2": noisy}, max_repeats=4)
    assert stop
    assert (rec["K=6 vs K=2"]["verdict"], rec["K=6 vs K=2"]["stopped"]) == ("unresolved", "budget")
    assert (rec["K=2"]["verdict"], rec["K=2"]["stopped"]) == ("faster", "answered")
    stop, rec = sq.look({"K=2": clear[:2]}, max_repeats=4, repeats=4)      # two repeats paired nothing
    assert stop and (rec["K=2"]["verdict"], rec["K=2"]["blocks"], rec["K=2"]["repeats"]) == ("unresolved", 2, 4)
    stop, rec = sq.look({"A/A": [0.001, -0.002, 0.0015, 0.0]}, max_repeats=10)
    assert stop and rec["A/A"]["verdict"] == "equivalent" and rec["A/A"]["ratio"] == pytest.approx(1.0, abs=1e-3)


def _null_blocks(dataset: str, seed: int) -> np.ndarray:
    """(STUDIES, MAX_REPEATS) block figures of studies with no true difference: each block pairs two distinct
    recorded repeats of one server configuration (any launch), drawn at random as cell and reference, on one
    draw of its prompts (with replacement) for both sides: cell and reference are exchangeable, so the mean
    log-ratio is 0 by construction, and each block keeps the recorded spread between repeats and launches."""
    runs = [r["e2e_s"] for rs in AA[dataset]["launches"].values() for r in rs]
    keys = sorted(set.intersection(*(set(r) for r in runs)))
    logs = np.log(np.array([[r[k] for k in keys] for r in runs]))            # (repeats, requests)
    rng = np.random.default_rng(seed)
    cell = rng.integers(0, len(runs), size=(STUDIES, MAX_REPEATS))
    ref = (cell + rng.integers(1, len(runs), size=cell.shape)) % len(runs)  # another recorded repeat
    prompts = rng.integers(0, len(keys), size=(STUDIES, MAX_REPEATS, len(keys)))
    return (np.take_along_axis(logs[ref], prompts, axis=-1) - np.take_along_axis(logs[cell], prompts, axis=-1)).mean(-1)


def _false_shares(blocks: np.ndarray) -> tuple[float, float]:
    """(share of studies ending `faster`/`slower` under the stopping rule, share whose running interval excludes
    1 at any look up to MAX_REPEATS, stopping or not)."""
    ended = ever = 0
    for study in blocks:
        for t in range(1, MAX_REPEATS + 1):
            stop, rec = sq.look({"A/A": study[:t]}, MAX_REPEATS)
            if stop:
                break
        ended += rec["A/A"]["verdict"] in ("faster", "slower")
        lo, hi = sq.running_interval(study)
        ever += lo > 0 or hi < 0
    return ended / len(blocks), ever / len(blocks)


@pytest.mark.parametrize("dataset", sorted(k for k in AA if k != "source"))
def test_aa_studies_looked_at_every_repeat_rarely_call_a_difference(dataset):
    ended, ever = _false_shares(_null_blocks(dataset, seed=46))
    assert ended <= 0.06 and ever <= 0.06, (ended, ever)


def _naive_ever(blocks: np.ndarray) -> float:
    """The share of studies whose fixed 95% t-interval over the blocks so far excludes 0 at some look 2..MAX."""
    t = np.arange(2, MAX_REPEATS + 1)
    means = np.stack([blocks[:, :k].mean(1) for k in t], 1)
    sds = np.stack([blocks[:, :k].std(1, ddof=1) for k in t], 1)
    half = sps.t.ppf(0.975, t - 1) * sds / np.sqrt(t)
    return float(np.mean(np.any(np.abs(means) > half, axis=1)))


@pytest.mark.parametrize("dataset", sorted(k for k in AA if k != "source"))
def test_a_fixed_interval_looked_at_every_repeat_calls_too_many(dataset):
    """The same simulation fails a fixed interval looked at after every repeat: what the test guards against."""
    assert _naive_ever(_null_blocks(dataset, seed=46)) > 0.08


def test_a_true_speedup_on_the_same_data_is_found_early():
    """Not a rule that never decides: the 8B-shaped A/A blocks with a 1.10x speedup added end `faster`, mostly
    within 5 repeats."""
    blocks = _null_blocks("qwen3-8b-shaped-c8", seed=46)[:200] + math.log(1.10)
    ends = []
    for study in blocks:
        for t in range(1, MAX_REPEATS + 1):
            stop, rec = sq.look({"K": study[:t]}, MAX_REPEATS)
            if stop:
                break
        ends.append((rec["K"]["verdict"], rec["K"]["repeats"]))
    assert sum(v == "faster" for v, _ in ends) >= 0.9 * len(ends)
    assert np.median([n for _, n in ends]) <= 5


def test_blocks_that_drift_keep_the_last_looks_interval():
    """Where the running intersection would be empty (no one mean fits every block), the interval is the last
    look's own, not an empty one."""
    blocks = [0.1, 0.1001, 0.0999, 0.1, 0.1001] + [0.5, 0.5001, 0.4999] * 4
    lo, hi = sq.running_interval(blocks)
    assert (lo, hi) == sq.confidence_sequence(blocks) and lo <= hi
    assert sq.comparison(blocks, 20)["ci_low"] == pytest.approx(math.exp(lo))
