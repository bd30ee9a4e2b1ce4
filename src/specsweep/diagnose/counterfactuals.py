"""The low-acceptance diagnosis of one speculative server cell (the diagnose job), asked for only where the
acceptance checkpoint (acceptance_checkpoint.py) found a bench group below sweep.diagnose.below_al: it runs the
known causes' counterfactual cells on the cell's own backend, through the one loop (runner.run_server_cell), and
writes diagnosis.json; drafter_evidence.py holds what files alone say (the vocabulary cause).

A counterfactual cell is the cell with one thing changed: thinking off (`nothink`), its drafter's
target_layer_ids shifted by one (`layers-1`, `layers+1`, where in range), the tokenizer's own mask token
(`mask`). The doctored drafter is a folder under the cell's (layout.doctored_drafter): an edited config.json and
links to the weights. The counterfactual cells run the dataset's first sweep.diagnose.prompts prompts, one repeat,
and are compared with the cell's own requests on the same prompts (diagnosis.py's statistic). Finished ones are
never rerun: an interrupted diagnosis resumes where it stopped.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from specsweep import metrics
from specsweep.core import layout, registry
from specsweep.core.errors import SpecsweepError
from specsweep.core.results import atomic_write_json, read_json, read_jsonl
from specsweep.diagnose import diagnosis
from specsweep.diagnose.acceptance_checkpoint import groups_needed, settings
from specsweep.diagnose.drafter_evidence import tokenizer_mask, vocabulary_evidence
from specsweep.grid import schedule
from specsweep.grid.cells import Grid
from specsweep.models import drafter_config, model_shape
from specsweep.plan.checks import local_dir


# ---- what the cell measured ---------------------------------------------------------------------------------
def _histogram(spec_decode: dict | None) -> list[float] | None:
    """A cell's step histogram (index j: steps that accepted j drafts): its own, or from its per-position rates."""
    if not spec_decode:
        return None
    if spec_decode.get("acceptance_length_histogram"):
        return [float(h) for h in spec_decode["acceptance_length_histogram"]]
    rates, drafts = spec_decode.get("per_position_acceptance"), spec_decode.get("num_drafts")
    return diagnosis.histogram_from_rates(rates, drafts) if rates and drafts else None


def _reference(grid: Grid, sid: str, bids: list[str], prompts: int) -> tuple[list[float] | None, str]:
    """The cell's step histogram on the counterfactuals' prompts (the requests of index < prompts of its first
    valid repeat: one repeat, as the counterfactual ran, since a greedy repeat's steps are the same steps again),
    or, where its requests carry no per-request figures, over its whole run; and which it is."""
    k = grid.servers[sid].spec["num_speculative_tokens"]
    valid = [(b, m) for b in sorted(bids, key=lambda b: grid.benches[sid][b].spec["repeat"])
             if (m := read_json(grid.metrics_path(sid, b))).get("valid")]
    if not valid:
        return None, "no valid repeat"
    first = valid[0][0]
    rows = [r for r in read_jsonl(grid.bench_dir(sid, first) / layout.REQUESTS) if r["index"] < prompts]
    own = metrics.per_request_acceptance(rows, k) if rows else None
    if own and own["num_drafts"]:
        return [float(h) for h in own["acceptance_length_histogram"]], \
            f"the same {prompts} prompts of repeat {grid.benches[sid][first].spec['repeat']}"
    valid = [m for _, m in valid]
    hists = [h for h in (_histogram(m.get("spec_decode")) for m in valid) if h]
    if not hists:
        return None, "no step histogram"
    width = max(map(len, hists))
    return [sum(h[i] for h in hists if i < len(h)) for i in range(width)], "its whole run (no per-request figures)"


# ---- doctored drafters and what the checkpoint says ---------------------------------------------------------
def doctor(source: Path, out: Path, edit: dict) -> Path:
    """A drafter folder whose config.json is the source's with dflash_config updated by `edit`, every other file
    a link to the source's."""
    cfg = json.loads((source / "config.json").read_text())
    cfg["dflash_config"] = {**(cfg.get("dflash_config") or {}), **edit}
    for key in edit:                         # a top-level copy would disagree with dflash_config
        cfg.pop(key, None)
    out.mkdir(parents=True, exist_ok=True)
    for f in source.iterdir():
        link = out / f.name
        if f.name != "config.json" and not link.exists() and not link.is_symlink():
            link.symlink_to(f.resolve())
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return out


def max_layer_id(backend: str, n_layers: int, env: dict) -> int:
    """The largest target_layer_id the backend can read of an n-layer target: it reads hidden_states[id + 1 +
    offset] (vLLM's offset from its probe in env.json, else the backend's LAYER_ID_OFFSET fact)."""
    probed = (env.get("server_env") or {}).get("dflash_layer_offset")      # only vLLM's probe records one
    offset = probed if probed is not None else getattr(registry.get(backend), "LAYER_ID_OFFSET", 1)
    return n_layers - 1 - offset


def counterfactual_bench(grid: Grid, sid: str, bids: list[str], prompts: int) -> dict:
    """The bench spec a counterfactual cell runs: the group's first bench cell, one repeat, its first prompts."""
    return {**grid.benches[sid][sorted(bids)[0]].spec, "repeat": 0, "prompts_limit": prompts}


def on_own_server(grid: Grid, sid: str) -> list[tuple[str, list[str]]]:
    """The counterfactual cells of sid's diagnosis that sid's own server can serve, each (its id, its unfinished
    bench ids): thinking off is a bench setting, so a low group with thinking on has its `nothink` cell served by
    the server it was measured on. Empty until sid's cells are finished and its acceptance asks for a diagnosis.
    The group's job runs these before its servers stop (runner.run_cells); the diagnose job then finds them done
    and launches only the doctored drafters."""
    if not grid.diagnosed(sid) or schedule.pending(grid, sid):
        return []
    below, prompts = settings(grid.configs[sid])
    out = []
    for entry, bids, _ in groups_needed(grid, sid, below):
        if entry["needed"] and entry["thinking"]:
            cf = grid.add_counterfactual(sid, "nothink", {}, [{**counterfactual_bench(grid, sid, bids, prompts),
                                                               "thinking": False}])
            if schedule.pending(grid, cf):
                out.append((cf, schedule.pending(grid, cf)))
    return out


# ---- one group ----------------------------------------------------------------------------------------------
class _Run:
    """Runs one group's counterfactual cells and compares each with the cell."""

    def __init__(self, grid: Grid, sid: str, bids: list[str], prompts: int, progress: bool):
        self.grid, self.sid, self.prompts, self.progress = grid, sid, prompts, progress
        self.reference, self.reference_is = _reference(grid, sid, bids, prompts)
        self.bench = counterfactual_bench(grid, sid, bids, prompts)

    def measure(self, tag: str, spec: dict, bench: dict | None = None) -> dict:
        from specsweep.run import (
            runner,  # here: the acceptance step, a local job per cell, needs none of what it imports
        )

        cf = self.grid.add_counterfactual(self.sid, tag, spec, [bench or self.bench])
        [bid] = self.grid.benches[cf]
        record = {"tag": tag, "server_cell": cf, "bench_cell": bid, "compared_with": self.reference_is}
        try:
            runner.run_server_cell(self.grid, cf, schedule.run_marker(self.grid, cf), self.progress)
        except SpecsweepError as e:
            return {**record, "valid": False, "problem": str(e).splitlines()[0], "rose": False}
        m = read_json(self.grid.metrics_path(cf, bid))
        if not m.get("valid"):          # a figure the cell's own checks reject is not shown
            return {**record, "valid": False, "problem": m.get("invalid_reason"), "rose": False}
        hist = _histogram(m.get("spec_decode"))
        if self.reference is None or hist is None:
            return {**record, "valid": True, "problem": "no step histogram to compare", "rose": False}
        return {**record, "valid": True, **diagnosis.rise(self.reference, hist)}


def _cause(cause: str, status: str, evidence: str, tried: list[dict] | None = None) -> dict:
    return {"cause": cause, "label": diagnosis.LABELS[cause], "status": status, "evidence": evidence,
            "counterfactuals": tried or []}


def _tried(cause: str, tried: list[dict], what: dict[str, str], prompts: int) -> dict:
    """A cause whose counterfactuals ran: confirmed by the first that rose, else ruled out (or not tested where
    none could be compared)."""
    texts = [diagnosis.rise_text(what[t["tag"]], t, prompts) if t.get("al_counterfactual") is not None
             else f"{what[t['tag']]}: not compared ({t.get('problem')})" for t in tried]
    rose = [t for t in tried if t["rose"]]
    if rose:
        best = max(rose, key=lambda t: t["al_counterfactual"])
        return _cause(cause, diagnosis.CONFIRMED, diagnosis.rise_text(what[best["tag"]], best, prompts), tried)
    compared = [t for t in tried if t.get("al_counterfactual") is not None]
    status = diagnosis.RULED_OUT if compared else diagnosis.NOT_TESTED
    return _cause(cause, status, "acceptance did not rise: " + "; ".join(texts) if compared else "; ".join(texts),
                  tried)


def diagnose_group(grid: Grid, sid: str, bids: list[str], thinking: bool, prompts: int, env: dict,
                   progress: bool = True) -> list[dict]:
    """The causes in order for one low group, each with its evidence; stops running counterfactuals at the first
    confirmed cause (the later ones are `not tested`)."""
    cell = grid.servers[sid]
    spec, pair = cell.spec, cell.pair
    run = _Run(grid, sid, bids, prompts, progress)
    causes, found = [], False

    def skipped(cause):
        return _cause(cause, diagnosis.NOT_TESTED, "not run: an earlier cause was confirmed")

    # 1. thinking on for a drafter trained without it
    if not thinking:
        causes.append(_cause("thinking", diagnosis.NOT_APPLICABLE, "the cell ran with thinking off"))
    else:
        trained = pair.get("trained_with_thinking")
        t = run.measure("nothink", {}, {**run.bench, "thinking": False})
        causes.append(_tried("thinking", [t], {"nothink": f"thinking off (the pair's trained_with_thinking: "
                                                          f"{trained})"}, prompts))
        found = causes[-1]["status"] == diagnosis.CONFIRMED

    ddir = local_dir(spec.get("drafter")) if spec["method"] == "dflash" else None
    dcfg = model_shape.read_config(ddir) if ddir else None
    tdir, tokdir = local_dir(spec["target"]), local_dir(spec["tokenizer"])
    target = model_shape.shape(tdir) if tdir else None
    # 2. the target_layer_ids offset
    ids = drafter_config.target_layer_ids(dcfg) if dcfg else None
    if found:
        causes.append(skipped("target_layer_ids"))
    elif spec["method"] != "dflash":
        causes.append(_cause("target_layer_ids", diagnosis.NOT_APPLICABLE, f"method {spec['method']} reads no layers"))
    elif not ids or target is None:
        causes.append(_cause("target_layer_ids", diagnosis.NOT_TESTED,
                             "the drafter's or the target's config is not on this machine: no doctored drafter"))
    else:
        top = max_layer_id(spec["server"]["backend"], target.layers, env)
        tried, what = [], {}
        for shift in (-1, 1):
            shifted = [i + shift for i in ids]
            if all(0 <= i <= top for i in shifted):
                tag = f"layers{shift:+d}"
                what[tag] = f"target_layer_ids shifted by {shift:+d} ({ids} -> {shifted})"
                doctored = doctor(ddir, layout.doctored_drafter(grid.server_dir(sid), tag),
                                  {"target_layer_ids": shifted})
                tried.append(run.measure(tag, {"drafter": str(doctored)}))
        if tried:
            causes.append(_tried("target_layer_ids", tried, what, prompts))
            found = causes[-1]["status"] == diagnosis.CONFIRMED
        else:
            causes.append(_cause("target_layer_ids", diagnosis.NOT_APPLICABLE,
                                 f"no shift by one of {ids} stays within 0..{top} for this target and backend"))
    # 3. the mask token
    mask = spec.get("mask_token_id") if spec.get("mask_token_id") is not None else \
        drafter_config.mask_token_id(dcfg) if dcfg else None
    token, token_id = tokenizer_mask(tokdir)
    if found:
        causes.append(skipped("mask_token"))
    elif dcfg is None:
        causes.append(_cause("mask_token", diagnosis.NOT_APPLICABLE if spec["method"] != "dflash" else
                             diagnosis.NOT_TESTED, "no DFlash drafter config on this machine"))
    elif token_id is None:
        causes.append(_cause("mask_token", diagnosis.NOT_TESTED,
                             f"the tokenizer names no mask token (or it is not in its vocabulary): mask id {mask} "
                             "not tried against another"))
    elif token_id == mask:
        causes.append(_cause("mask_token", diagnosis.NOT_APPLICABLE,
                             f"the drafter already uses the tokenizer's mask token {token} (id {mask})"))
    else:
        doctored = doctor(ddir, layout.doctored_drafter(grid.server_dir(sid), "mask"),
                          {"mask_token_id": token_id, "mask_token": token})
        change = {"drafter": str(doctored)}
        if spec.get("mask_token_id") is not None:
            change["mask_token_id"] = token_id
        t = run.measure("mask", change)
        causes.append(_tried("mask_token", [t], {"mask": f"the tokenizer's mask token {token} (id {mask} -> "
                                                         f"{token_id})"}, prompts))
        found = causes[-1]["status"] == diagnosis.CONFIRMED
    # 4. a tokenizer or vocabulary mismatch: shapes only
    if dcfg is None and spec["method"] != "dflash":
        causes.append(_cause("vocabulary", diagnosis.NOT_APPLICABLE, f"method {spec['method']} has no drafter config"))
    else:
        causes.append(_cause("vocabulary", *vocabulary_evidence(dcfg or {}, tdir, tokdir, mask)))
    return causes


def diagnose(grid: Grid, sid: str, out: str | Path, env_json: str | Path | None = None,
             progress: bool = True) -> dict:
    """Write the cell's diagnosis.json at `out`: per bench group, whether it was needed, and if so each cause in
    order with its evidence and the diagnosis (diagnosis.decide)."""
    below, prompts = settings(grid.configs[sid])
    env = read_json(env_json) if env_json and Path(env_json).exists() else {}
    entries = []
    for entry, bids, rates in groups_needed(grid, sid, below):
        if not entry["needed"]:
            entries.append(entry)
            continue
        where = f"{sid} {entry['dataset']} think={entry['thinking']} c={entry['concurrency']}"
        al = entry["mean_acceptance_length"]
        print(f"[specsweep] {where}: AL {al:.3g} < {below:g}: diagnosing", flush=True)
        causes = diagnose_group(grid, sid, bids, entry["thinking"], prompts, env, progress)
        decided = diagnosis.decide(causes, rates, al)
        print(f"[specsweep] {where}: {decided['diagnosis']}: {decided['evidence']}", flush=True)
        entries.append({**entry, **decided})
    record = {"server_cell": sid, "below_al": below, "prompts": prompts,
              "statistic": {"min_rise": diagnosis.MIN_RISE, "z": diagnosis.Z_RISE, "low_rate": diagnosis.LOW_RATE},
              "needed": any(e["needed"] for e in entries), "groups": entries, "finished_at": time.time()}
    atomic_write_json(out, record)
    return record
