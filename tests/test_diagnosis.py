"""The low-acceptance diagnosis: the statistic and the order of causes on fixed inputs (pure), then the whole
diagnosis on a study measured by a fake session whose acceptance follows the drafter's config (no engine), with
the summary's columns and the page. The real engine on the trained tiny pair: test_diagnosis_dag.py."""
import contextlib
import json
import sys
import types
from pathlib import Path

import pytest
from helpers import DATA, ServerlessSession, run

from specsweep.core import layout, parts
from specsweep.core.errors import ConfigError
from specsweep.core.results import read_json
from specsweep.core.table import read
from specsweep.diagnose import acceptance_checkpoint, counterfactuals, diagnosis
from specsweep.grid import schedule
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.metrics import acceptance_from_lengths, request_figures
from specsweep.read import pages, summary
from specsweep.read.mlflow_runs import row_tags
from specsweep.read.study import Study
from specsweep.run.bench_cell import Measurement


# ---- the statistic ------------------------------------------------------------------------------------------
def test_a_rate_histogram_is_the_step_histogram():
    lengths = [1, 1, 2, 4, 4, 8, 3, 1, 5]
    sd = acceptance_from_lengths(lengths, 8)
    assert diagnosis.histogram_from_rates(sd["per_position_acceptance"], sd["num_drafts"]) == \
        pytest.approx(sd["acceptance_length_histogram"])


def test_acceptance_rises_only_by_the_margin_and_the_level():
    low = [95, 5, 0, 0]                       # AL 1.05 over 100 steps
    assert not diagnosis.rise(low, low)["rose"]
    high = [20, 20, 30, 30]                   # AL 2.7
    r = diagnosis.rise(low, high)
    assert r["rose"] and r["z"] > diagnosis.Z_RISE and r["al_counterfactual"] - r["al_cell"] >= diagnosis.MIN_RISE
    # a large sample makes a small rise significant: the margin still refuses it
    small = diagnosis.rise([9000, 1000], [8500, 1500])
    assert small["z"] > diagnosis.Z_RISE and not small["rose"]
    # a large rise on three steps is not significant
    few = diagnosis.rise([2, 1, 0, 0], [0, 1, 1, 1])
    assert few["al_counterfactual"] - few["al_cell"] >= diagnosis.MIN_RISE and not few["rose"]
    # nothing accepted anywhere against everything accepted: no variance, an infinite z
    assert diagnosis.rise([50, 0, 0], [0, 0, 50])["rose"]
    assert not diagnosis.rise([], low)["rose"]


def cause(name, status, evidence="e"):
    return {"cause": name, "status": status, "evidence": evidence, "counterfactuals": [{"tag": "x"}]}


def test_the_first_confirmed_cause_is_the_diagnosis():
    causes = [cause("thinking", diagnosis.NOT_APPLICABLE), cause("target_layer_ids", diagnosis.RULED_OUT),
              cause("mask_token", diagnosis.CONFIRMED, "mask evidence"), cause("vocabulary", diagnosis.SUSPECTED)]
    out = diagnosis.decide(causes, [0.1, 0.0], 1.1)
    assert (out["diagnosis"], out["evidence"]) == ("mask_token", "mask evidence")
    assert [c["cause"] for c in out["causes"]] == list(diagnosis.CAUSES)
    assert out["causes"][-1]["status"] == diagnosis.NOT_TESTED


def test_a_vocabulary_mismatch_is_suspected_from_shapes_when_nothing_is_confirmed():
    causes = [cause("target_layer_ids", diagnosis.RULED_OUT), cause("vocabulary", diagnosis.SUSPECTED, "shapes")]
    assert diagnosis.decide(causes, [0.1], 1.1)["diagnosis"] == "vocabulary"


def test_undertrained_needs_every_rate_low_and_no_rise():
    ruled = [cause("target_layer_ids", diagnosis.RULED_OUT), cause("vocabulary", diagnosis.RULED_OUT)]
    out = diagnosis.decide(ruled, [0.2, 0.1, 0.0], 1.3)
    assert out["diagnosis"] == "undertrained" and "every position's rate is below 0.5" in out["evidence"]
    high = diagnosis.decide(ruled, [0.9, 0.8, 0.7], 3.4)     # a threshold set high: a good drafter is not called so
    assert high["diagnosis"] == "unexplained"
    assert diagnosis.decide(ruled, None, 1.4)["diagnosis"] == "undertrained"    # r_1 <= AL - 1 < 0.5
    assert diagnosis.decide(ruled, None, 1.6)["diagnosis"] == "unexplained"


def test_the_ceiling_says_what_an_undertrained_drafter_would_need():
    assert diagnosis.ceiling_text({"break_even_al": 2.69, "al_for_1_5x": 3.9}) == \
        "the system's curve: break-even at AL 2.69, 1.5x at AL 3.90"
    assert "sweep.set_acceptance" in diagnosis.ceiling_text({"break_even_al": float("nan")})


@pytest.mark.parametrize("value, message", [("-1", "sweep.diagnose.below_al=-1 is not an acceptance length"),
                                            ("x", "sweep.diagnose.below_al")])
def test_a_bad_threshold_is_one_line(value, message):
    with pytest.raises(ConfigError) as e:
        compose_jobs([f"sweep.diagnose.below_al={value}"])
    assert message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="prompts=0 must be a whole number"):
        acceptance_checkpoint.settings({"sweep": {"diagnose": {"prompts": 0}}})


def test_a_bad_threshold_from_the_cli_is_one_line_without_a_traceback(tmp_path):
    out = run([sys.executable, "-m", "specsweep.cli", "cells", f"results_dir={tmp_path}", "sweep.diagnose.prompts=0"])
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].endswith("sweep.diagnose.prompts=0 is not a prompt count: give a whole "
                                                        "number >= 1, e.g. 4")


# ---- the whole diagnosis on a fake session ------------------------------------------------------------------
class DrafterSession(ServerlessSession):
    """Acceptance follows the cell's drafter: 4 per step with the pair's own layer ids and the tokenizer's mask, 1
    (nothing accepted) otherwise; thinking on accepts nothing either (a drafter trained without it)."""
    def __init__(self, spec, good_ids, good_mask):
        cfg = json.loads((Path(spec["drafter"]) / "config.json").read_text()) \
            if spec["method"] != "none" else {}
        d = cfg.get("dflash_config") or {}
        self.k = spec["num_speculative_tokens"]
        self.good = d.get("target_layer_ids") == good_ids and d.get("mask_token_id") == good_mask

    def measure(self, prompts, bench, progress, desc):
        rows = []
        for i, turns in enumerate(prompts):
            accept = 4 if self.good and not bench["thinking"] else 1
            lengths = [min(accept + (i + j) % 2, self.k + 1) if accept > 1 else 1 for j in range(12)] if self.k else []
            rows.append({"index": i, "turn": 0, "ok": True, "e2e_s": 0.5, "ttft_s": 0.02, "completion_tokens": 40,
                         "prompt_tokens": 10, "itl_s": [], "text": "a", "chunk_t_s": [0.02 + j / 100 for j in range(40)],
                         "chunk_tokens": [1] * 40, **({"acceptance_lengths": lengths} if self.k else {})})
        figures = request_figures(rows, wall_s=1.0)
        figures["spec_decode"] = acceptance_from_lengths([n for r in rows for n in r.get("acceptance_lengths", [])],
                                                         self.k + 1) if self.k else None
        return Measurement(rows, figures)


@pytest.fixture
def fake_backend(monkeypatch, random_results):
    models = random_results / "models" / "tiny"
    good = json.loads((models / "drafter" / "config.json").read_text())["dflash_config"]

    @contextlib.contextmanager
    def open_session(grid, sid, progress=True, how=None):
        yield DrafterSession(grid.servers[sid].spec, good["target_layer_ids"], good["mask_token_id"])
    monkeypatch.setattr(parts, "session", lambda name: types.SimpleNamespace(open_session=open_session))
    return models, good


def measured(results, drafter, models, *extra):
    from specsweep.run import runner

    grid = expand(compose_jobs([f"results_dir={results}", "study=d", "server=local", "kernel=local_sdpa",
                                "dataset=jsonl", f"dataset.path={DATA / 'two_categories.jsonl'}",
                                f"pair.target={models / 'target'}", f"pair.drafter={drafter}",
                                "pair.built_by_workflow=false", "sweep.num_speculative_tokens=[7]",
                                "sweep.concurrency=[1]", "sweep.repeats=1", "sweep.rounds=1", *extra]))
    for sid in sorted(grid.servers, key=lambda s: not grid.servers[s].is_baseline):
        runner.run_server_cell(grid, sid, schedule.run_marker(grid, sid), progress=False)
    [sid] = [s for s in grid.servers if not grid.servers[s].is_baseline]
    return grid, sid


@pytest.mark.parametrize("edit, expected", [({"target_layer_ids": [1, 2, 3]}, "target_layer_ids"),
                                            ({"mask_token_id": 0}, "mask_token"),
                                            ({}, "unexplained")])
def test_each_doctored_drafter_gets_its_cause(tmp_path, fake_backend, edit, expected):
    models, good = fake_backend
    drafter = counterfactuals.doctor(models / "drafter", tmp_path / "doctored", edit)
    assert (drafter / "model.safetensors").is_symlink()
    grid, sid = measured(tmp_path / "results", drafter, models, "sweep.diagnose.below_al=100")
    assert acceptance_checkpoint.acceptance(grid, sid, grid.acceptance_path(sid))["needed"]
    record = counterfactuals.diagnose(grid, sid, grid.diagnosis_path(sid), progress=False)
    [group] = record["groups"]
    assert group["needed"] and group["diagnosis"] == expected
    by_cause = {c["cause"]: c for c in group["causes"]}
    assert list(by_cause) == list(diagnosis.CAUSES)
    assert by_cause["thinking"]["status"] == diagnosis.NOT_APPLICABLE
    assert by_cause["vocabulary"]["status"] == diagnosis.RULED_OUT and "no counterfactual possible" in \
        by_cause["vocabulary"]["evidence"]
    if expected == "target_layer_ids":
        [cf] = by_cause["target_layer_ids"]["counterfactuals"]     # +1 would read past the 4-layer target
        assert cf["tag"] == "layers-1" and cf["rose"] and "-cf-layers-1-" in cf["server_cell"]
        assert (grid.server_dir(sid) / layout.COUNTERFACTUALS / cf["server_cell"]).is_dir()
        assert by_cause["mask_token"]["status"] == diagnosis.NOT_TESTED
    if expected == "mask_token":
        assert by_cause["target_layer_ids"]["status"] == diagnosis.RULED_OUT
        [cf] = by_cause["mask_token"]["counterfactuals"]
        assert cf["rose"] and "<|mask|>" in by_cause["mask_token"]["evidence"]
    if expected == "unexplained":            # the pair's own drafter at a threshold set high: not undertrained
        assert by_cause["mask_token"]["status"] == diagnosis.NOT_APPLICABLE
        assert by_cause["undertrained"]["status"] == diagnosis.RULED_OUT
    # the summary row and the pages carry it; the baseline's row has none
    study = Study.load(grid.study_files("d").dir, grid)
    rows = {r["method"]: r for r in summary.rows(study)}
    assert rows["dflash"]["diagnosis"] == expected and rows["dflash"]["diagnosis_evidence"]
    assert rows["none"]["diagnosis"] is None
    assert study.cells and not any("-cf-" in sid for sid, _ in study.cells)      # counterfactuals are no rows
    out = tmp_path / "page.html"
    pages.launch_page(study, sid, out)
    assert f"diagnosis {expected}" in out.read_text()
    files = grid.study_files("d")
    summary.write_summary(study, files.summary, files.k_comparison, files.by_category)
    pages.summary_page(files.summary, files.k_comparison, tmp_path / "summary.html")
    first = (tmp_path / "summary.html").read_text().split("</table>")[0]     # "The figures to read first"
    assert "<th>diagnosis</th>" in first and f"<td>{expected}</td>" in first
    [tags] = [row_tags(r) for r in read(files.summary) if r["method"] == "dflash"]
    assert tags["diagnosis"] == expected and tags["diagnosis_evidence"] == rows["dflash"]["diagnosis_evidence"]
    # a second diagnosis runs no counterfactual again
    before = {p: p.stat().st_mtime for p in grid.server_dir(sid).rglob(layout.METRICS)}
    counterfactuals.diagnose(grid, sid, grid.diagnosis_path(sid), progress=False)
    assert {p: p.stat().st_mtime for p in grid.server_dir(sid).rglob(layout.METRICS)} == before


def test_thinking_is_tried_first_when_the_cell_ran_with_it(tmp_path, fake_backend):
    models, _ = fake_backend
    grid, sid = measured(tmp_path / "results", models / "drafter", models, "sweep.thinking=[true]")
    record = counterfactuals.diagnose(grid, sid, grid.diagnosis_path(sid), progress=False)
    [group] = record["groups"]
    assert group["diagnosis"] == "thinking" and "thinking off" in group["evidence"]
    assert [c["status"] for c in group["causes"][1:3]] == [diagnosis.NOT_TESTED] * 2   # not run after a confirmed


def test_an_untrained_drafter_is_undertrained_and_the_row_says_what_it_would_take(tmp_path, fake_backend):
    models, _ = fake_backend
    drafter = counterfactuals.doctor(models / "drafter", tmp_path / "bad", {"target_layer_ids": [0, 1, 1]})
    grid, sid = measured(tmp_path / "results", drafter, models)          # the default threshold, 1.5
    record = counterfactuals.diagnose(grid, sid, grid.diagnosis_path(sid), progress=False)
    [group] = record["groups"]
    assert group["diagnosis"] == "undertrained"
    assert all(not t["rose"] for c in group["causes"] for t in c["counterfactuals"])
    [row] = [r for r in summary.rows(Study.load(grid.study_files("d").dir, grid)) if r["method"] != "none"]
    assert row["diagnosis"] == "undertrained" and "sweep.set_acceptance" in row["diagnosis_evidence"]


def test_a_healthy_cell_runs_nothing(tmp_path, fake_backend):
    models, _ = fake_backend
    grid, sid = measured(tmp_path / "results", models / "drafter", models)
    check = acceptance_checkpoint.acceptance(grid, sid, grid.acceptance_path(sid))     # what the workflow asks first
    assert not check["needed"] and check["groups"][0]["mean_acceptance_length"] > 1.5
    record = counterfactuals.diagnose(grid, sid, grid.diagnosis_path(sid), progress=False)
    assert not record["needed"] and "at least sweep.diagnose.below_al 1.5" in record["groups"][0]["reason"]
    assert not (grid.server_dir(sid) / layout.COUNTERFACTUALS).exists()
    assert read_json(grid.diagnosis_path(sid)) == record
    [row] = [r for r in summary.rows(Study.load(grid.study_files("d").dir, grid)) if r["method"] != "none"]
    assert row["diagnosis"] is None and row["diagnosis_evidence"] is None


def test_a_cell_served_with_random_weights_gets_no_diagnosis_and_its_row_says_why(tmp_path):
    """An 8B-shaped pair from config files alone (--load-format dummy): its drafter accepts nothing, and no
    counterfactual could find a cause, so no diagnosis runs (four more launches, on the H200, of about 125 s each),
    and the row says why; preflight does not wait for weights to download."""
    from specsweep.plan import checks

    dummy = ["+server.extra_args=[--load-format,dummy]"]
    grid = expand(compose_jobs([f"results_dir={tmp_path}", *dummy]))
    spec = [sid for sid, c in grid.servers.items() if not c.is_baseline]
    assert spec and all(grid.servers[s].random_weights and not grid.diagnosed(s) for s in spec)
    assert all(expand(compose_jobs([f"results_dir={tmp_path}"])).diagnosed(s)
               for s, c in expand(compose_jobs([f"results_dir={tmp_path}"])).servers.items() if not c.is_baseline)
    row = {"method": "dflash", "dataset": "synthetic", "thinking": False, "concurrency": 4}
    out = summary.diagnosis_columns(None, row, random_weights=True)
    assert out["diagnosis"] is None and out["diagnosis_evidence"].startswith("none: served with random weights")
    cfg = compose_jobs([f"results_dir={tmp_path}", "pair.target=/nowhere/target", "pair.drafter=/nowhere/drafter",
                        "pair.built_by_workflow=false", *dummy])[0]
    check = checks.check_memory(cfg, {"gpus": []})
    assert check.status == "pass" and "random weights" in check.message


# ---- a nested (multimodal) target's shape ---------------------------------------------------------------------
def nested_target(models, dest):
    """The tiny target with its config moved under text_config, as a multimodal wrapper keeps it."""
    dest.mkdir()
    for f in models.joinpath("target").iterdir():
        (dest / f.name).symlink_to(f)
    (dest / "config.json").unlink()
    text = json.loads((models / "target" / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({"architectures": text["architectures"],
                                                  "model_type": text["model_type"], "text_config": text,
                                                  "vision_config": {"depth": 1, "hidden_size": 8}}))
    return dest, text


def test_the_vocabulary_shapes_are_read_from_a_nested_target(tmp_path, random_results):
    models = random_results / "models" / "tiny"
    target, text = nested_target(models, tmp_path / "target")
    status, evidence = counterfactuals.vocabulary_evidence({"vocab_size": text["vocab_size"]}, target, target, None)
    assert status == diagnosis.RULED_OUT and f"target vocab_size {text['vocab_size']}," in evidence
    status, evidence = counterfactuals.vocabulary_evidence({"vocab_size": 7}, target, target, None)
    assert status != diagnosis.RULED_OUT and f"the drafter's vocab_size 7 is not the target's {text['vocab_size']}" \
        in evidence


def test_the_layer_id_counterfactuals_read_a_nested_targets_layers(tmp_path, fake_backend):
    """The doctored drafters stay within the target's layers, read from its text_config (4 layers: +1 would read
    past it, so only -1 is tried)."""
    models, _ = fake_backend
    target, _ = nested_target(models, tmp_path / "target")
    drafter = counterfactuals.doctor(models / "drafter", tmp_path / "doctored", {"target_layer_ids": [1, 2, 3]})
    grid, sid = measured(tmp_path / "results", drafter, models, "sweep.diagnose.below_al=100",
                         f"pair.target={target}")
    record = counterfactuals.diagnose(grid, sid, grid.diagnosis_path(sid), progress=False)
    [group] = record["groups"]
    by_cause = {c["cause"]: c for c in group["causes"]}
    assert [cf["tag"] for cf in by_cause["target_layer_ids"]["counterfactuals"]] == ["layers-1"]
