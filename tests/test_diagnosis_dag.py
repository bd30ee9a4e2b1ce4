"""The low-acceptance diagnosis on three doctored drafters of the trained tiny pair, through the DAG on the local
engine (server=local): layer ids shifted by one, a wrong mask token, and an untrained (randomly initialised)
drafter. Each must get its own cause, and a confirming counterfactual must have raised acceptance by the stated
test (diagnosis.py); no training outcome (a number) is asserted."""
import csv
import json

import pytest
import yaml
from helpers import snakemake

from specsweep.core import layout
from specsweep.core.results import read_json
from specsweep.diagnose import counterfactuals, diagnosis
from specsweep.grid.config import compose_jobs

SWEEP = ["study=diag", "server=local", "kernel=local_sdpa", "sweep.num_speculative_tokens=[7]", "sweep.concurrency=[1]",
         "sweep.thinking=[false]", "sweep.repeats=1", "sweep.rounds=1", "dataset.num_prompts=8", "sweep.max_tokens=48",
         "tracking=off", "pair.built_by_workflow=false",
         # every cell is diagnosed, whatever its acceptance: the causes are what is tested, not the threshold
         "sweep.diagnose.below_al=100", "sweep.diagnose.prompts=8"]


def doctored(tiny_results, tmp_path) -> dict[str, str]:
    """Three drafters of the trained pair: every target_layer_id one too high (as a server that taps layer i + 1
    for i would read them), the end-of-turn token as the mask token (the pad token, another never-trained
    embedding, is no test: the trained drafter accepts as much with it), and an untrained one."""
    from transformers import AutoConfig, AutoTokenizer

    from specsweep.models.tiny import init_drafter

    models = tiny_results / "models" / "tiny"
    cfg = json.loads((models / "drafter" / "config.json").read_text())["dflash_config"]
    ids, eos = cfg["target_layer_ids"], AutoTokenizer.from_pretrained(models / "target").convert_tokens_to_ids("<|im_end|>")
    out = {"target_layer_ids": counterfactuals.doctor(models / "drafter", tmp_path / "shifted",
                                                      {"target_layer_ids": [i + 1 for i in ids]}),
           "mask_token": counterfactuals.doctor(models / "drafter", tmp_path / "mask", {"mask_token_id": eos})}
    init_drafter(AutoConfig.from_pretrained(models / "target"), cfg["mask_token_id"], tmp_path / "untrained", seed=3)
    out["undertrained"] = tmp_path / "untrained"
    return {cause: str(path) for cause, path in out.items()}


@pytest.mark.dag
def test_the_low_acceptance_diagnosis_on_three_doctored_drafters(tiny_results, tmp_path):
    drafters = doctored(tiny_results, tmp_path)
    target = tiny_results / "models" / "tiny" / "target"
    results = tmp_path / "results"
    jobs = [job for d in drafters.values()
            for job in compose_jobs([*SWEEP, f"results_dir={results}", f"pair.target={target}", f"pair.drafter={d}"])]
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(yaml.safe_dump(jobs))
    out = snakemake(tmp_path / "work", "--config", f"jobs_file={jobs_file}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # each group's job wrote its cell's acceptance record (acceptance_checkpoint.record_acceptance): the checkpoint ran none
    assert "checkpoint acceptance:" not in out.stdout + out.stderr

    rows = {r["server_cell"]: r for r in csv.DictReader(open(results / "diag" / layout.SUMMARY))}
    by_drafter = {}
    for sid, row in rows.items():
        if row["method"] == "none":
            assert not row["diagnosis"] and not row["diagnosis_evidence"]
            continue
        [config] = (results / "diag" / sid).glob(f"*/{layout.CONFIG}")
        by_drafter[yaml.safe_load(config.read_text())["server_spec"]["drafter"]] = (sid, row)
    assert set(by_drafter) == set(drafters.values())
    for expected, drafter in drafters.items():
        sid, row = by_drafter[drafter]
        assert row["diagnosis"] == expected, (expected, row["diagnosis_evidence"])
        record = read_json(results / "diag" / sid / layout.DIAGNOSIS)
        [group] = record["groups"]
        causes = {c["cause"]: c for c in group["causes"]}
        assert list(causes) == list(diagnosis.CAUSES)
        tried = [t for c in group["causes"] for t in c["counterfactuals"]]
        for t in tried:                          # each a real cell under the diagnosed one, checked by its own checks
            assert t["valid"], t
            m = read_json(results / "diag" / sid / layout.COUNTERFACTUALS / t["server_cell"] / t["bench_cell"]
                          / layout.METRICS)
            assert m["valid"] and m["requests_completed"] == 8
        if expected == "undertrained":
            assert tried and not any(t["rose"] for t in tried)
            assert all(r < diagnosis.LOW_RATE for r in group["per_position_acceptance"])
            assert "sweep.set_acceptance" in row["diagnosis_evidence"]
            continue
        [rose] = [t for t in causes[expected]["counterfactuals"] if t["rose"]]
        assert rose["z"] >= diagnosis.Z_RISE
        assert rose["al_counterfactual"] - rose["al_cell"] >= diagnosis.MIN_RISE
        assert f"-cf-{rose['tag']}-" in rose["server_cell"]
        assert rose["tag"] == ("layers-1" if expected == "target_layer_ids" else "mask")
        if expected == "mask_token":              # the layer shift came first and did not raise acceptance
            assert causes["target_layer_ids"]["status"] == diagnosis.RULED_OUT
        page = layout.launch_page(results / "diag" / layout.PAGES / layout.LAUNCHES, sid).read_text()
        assert f"diagnosis {expected}" in page

    [base] = [sid for sid, r in rows.items() if r["method"] == "none"]
    assert not list((results / "diag" / base).glob("acceptance*"))
    # a rerun reruns no diagnosis
    again = snakemake(tmp_path / "work", "-n", "--config", f"jobs_file={jobs_file}")
    assert again.returncode == 0 and "diagnose" not in again.stdout, again.stdout[-2000:]
    # a record its group's job did not write (a group that failed, a study from before) is the checkpoint's to write
    sid, _ = by_drafter[drafters["mask_token"]]
    [record] = (results / "diag" / sid).glob("acceptance-*.json")
    record.unlink()
    (results / "diag" / layout.SUMMARY).unlink()
    plan = snakemake(tmp_path / "work", "-n", "--config", f"jobs_file={jobs_file}")
    assert plan.returncode == 0 and "checkpoint acceptance:" in plan.stdout + plan.stderr, plan.stdout[-3000:]
    # another threshold is another record (Grid.acceptance_path): decided afresh by the checkpoint, no cell rerun
    jobs = [{**j, "sweep": {**j["sweep"], "diagnose": {**j["sweep"]["diagnose"], "below_al": 99}}} for j in jobs]
    jobs_file.write_text(yaml.safe_dump(jobs))
    plan = snakemake(tmp_path / "work", "-n", "--config", f"jobs_file={jobs_file}")
    text = plan.stdout + plan.stderr
    assert plan.returncode == 0 and "checkpoint acceptance:" in text and "serve_and_bench" not in text, text[-3000:]
