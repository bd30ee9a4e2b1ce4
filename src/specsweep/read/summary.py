"""The study tables: one row per bench cell over its repeats (medians, MAD across repeats, and the paired
speedup with its CI and verdict), the K-against-K comparisons, and the per-category breakdown.

Paired figures use every valid repeat of both cells: requests are paired by prompt and turn, and the
bootstrap resamples prompts and each cell's repeats, and with sweep.rounds > 1 the rounds first (stats.py).
"""
from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd

from specsweep import metrics
from specsweep.core import labels, table
from specsweep.core.labels import k_label
from specsweep.core.nested import at
from specsweep.diagnose import diagnosis
from specsweep.grid import repeats, schedule
from specsweep.grid.cells import AA
from specsweep.metrics import length_shares, median_mad, phases
from specsweep.read import ceiling, step_cost, study_launches
from specsweep.read.study import Study
from specsweep.run import launch_record, looks
from specsweep.verdicts import stats


def rows(study: Study) -> list[dict]:
    """One row per server cell and bench settings (dataset, thinking, concurrency, lengths, ignore_eos), over its
    repeats."""
    grid, cells, out = study.grid, study, []
    for (sid, dataset, thinking, conc, lengths, exact), bids in sorted(cells.groups.items(), key=_group_order):
        cell = grid.servers[sid]
        valid = [cells.metrics(sid, b) for b in bids if cells.valid(sid, b)]
        row = {"study": study.name, "server_cell": sid, "backend": cell.spec["server"]["backend"],
               "pair": cell.pair["name"], "method": cell.spec["method"],
               "num_speculative_tokens": cell.spec["num_speculative_tokens"],
               "set_acceptance": cell.spec["set_acceptance"] if cell.sets_acceptance else None,
               "verification": None if cell.is_baseline else cell.spec.get("verification", "standard"),
               "k_schedule": cell.spec.get("k_schedule") or None,
               "prefix_caching": cell.spec["server"].get("prefix_caching"),
               "dataset": dataset, "thinking": thinking, "concurrency": conc, "repeats": len(bids),
               "valid_repeats": len(valid),
               "valid": bool(valid), "bench_cells": " ".join(sorted(bids)),
               "residency": " ".join(sorted({m.get("residency") or "relaunch" for m in valid})) or None,
               "launches": len(study.launches(sid))}
        row["bursty_streams"] = sum(m.get("bursty_streams") or 0 for m in valid)
        row["streamed_figures_invalid"] = next((f"repeat {i + 1} of {len(valid)}: {m['streamed_figures_invalid']}"
                                                for i, m in enumerate(valid) if m.get("streamed_figures_invalid")), None)
        row.update(timing_columns(valid))    # first: its reasons blank the server-timed medians (table.TIMING)
        row.update(quality_columns(valid))   # the same for the answers' and the streams' (table.QUALITY)
        row.update(median_columns(row, valid, table.medians()))
        # a record written before the check (bench_cell), or a baseline's own: equal empty texts say nothing
        vacuous = metrics.agreement_na(*(cells.requests(sid, b) for b in bids if cells.valid(sid, b)))
        row["greedy_agreement_na"] = vacuous or (first_reason(valid, "greedy_agreement_na")
                                                  if row["greedy_agreement"] is None else None)
        row["greedy_agreement"] = None if vacuous else row["greedy_agreement"]
        row["tpot_source"] = "server" if row["server_tpot_ms"] is not None else \
            "client stream" if row["streamed_tpot_ms"] is not None else None
        row.update(_against_baseline(cells, sid, bids, valid))
        row.update(repeat_agreement_columns(cells, sid, bids))
        row["figures_disagree"] = "; ".join(disagreements(row)) or None
        # None where the server does not say which drafts it accepted (SGLang 0.5.17: a counter alone)
        per_pos = [m["spec_decode"]["per_position_acceptance"] or [] for m in valid if m.get("spec_decode")]
        width = max((len(p) for p in per_pos), default=0)
        medians = [median_mad([p[i] for p in per_pos if i < len(p)])[0] for i in range(width)]
        row["per_position_acceptance"] = medians
        row["acceptance_length_shares"] = length_shares(medians) if medians else []
        row.update(axes_columns(cells, sid, bids, lengths), ignore_eos=exact)
        row.update(set_acceptance_columns(cells, sid, bids))
        out.append(row)
    out = step_cost.annotate(ceiling.annotate(out))
    warning = aa_warning(out)
    for row in out:
        row["aa_check"] = warning
        row.update(diagnosis_columns(study.diagnosis(row["server_cell"]) if row["method"] != "none" else None, row,
                                     study.grid.servers[row["server_cell"]].random_weights))
        row["label"] = labels.label(row)
    return out


# ---- issue #31: the length axes and acceptance by phase (table.AXES, docs/axes.md) ----------------------------
def _group_order(item) -> tuple:
    """Study.groups' items in a stable order: a prompt length of None (the dataset's own) before set ones, natural
    lengths before ignore_eos."""
    (sid, dataset, thinking, conc, (max_tokens, prompt_length), exact), _ = item
    return (sid, dataset, thinking, conc, max_tokens, -1 if prompt_length is None else prompt_length, exact)


def axes_columns(study: Study, sid: str, bids: list[str], lengths: tuple) -> dict:
    """A row's length axes (max_tokens: sweep.max_tokens; prompt_length: sweep.prompt_length, blank for the
    dataset's own prompts; prompt_tokens_mean: the server's prompt tokens per request, template included, the
    median over valid repeats) and its acceptance by phase, pooled over the valid repeats' finished requests
    (phases.columns; blank with phase_split_na's reason)."""
    valid = [study.metrics(sid, b) for b in bids if study.valid(sid, b)]
    per_request = [m["prompt_tokens"] / m["requests_completed"] for m in valid if m.get("requests_completed")]
    out = {"max_tokens": lengths[0], "prompt_length": lengths[1], "prompt_tokens_mean": median_mad(per_request)[0]}
    cell = study.grid.servers[sid]
    if cell.is_baseline:
        return {**out, **phases.columns({"na": "baseline: no drafts", "requests": 0})}
    thinking = bool(study.grid.benches[sid][bids[0]].spec["thinking"])
    splits = [phases.request_split(r, thinking) for run in study.runs(sid, bids) for r in run if r.get("ok")]
    return {**out, **phases.columns(phases.pooled(splits))}


# ---- measured by the server (issue #30, docs/timing.md; the columns: table.TIMING) --------------------------
def timing_columns(valid: list[dict]) -> dict:
    """A row's server-timed columns over its valid repeats (metrics.timing_figures per repeat) but its medians and
    tpot_source (summary.rows, after them): why the server's figures are blank, where each burst arose (summed),
    the client/server TPOT ratio (median) and the first repeat whose two TPOTs disagree."""
    out = {"server_figures_invalid": first_reason(valid, "server_figures_invalid") if valid else "no valid repeat",
           "server_itl_na": first_reason(valid, "server_itl_na"),
           "tpot_sources_disagree": first_reason(valid, "tpot_sources_disagree"),
           "server_timing_clock": next((m["server_timing_clock"] for m in valid if m.get("server_timing_clock")), None),
           "tpot_client_over_server": median_mad([m.get("tpot_client_over_server") for m in valid])[0]}
    if valid and any("server_figures_invalid" not in m for m in valid):     # a metrics.json from before these
        out["server_figures_invalid"] = "made before server timing was recorded"
    for key in ("bursts_in_server", "bursts_after_server", "bursts_unattributed"):
        out[key] = sum(m.get(key) or 0 for m in valid)
    return out


# ---- answers and streams (issue #30, docs/timing.md#answers-and-streams; the columns: table.QUALITY) ----------
def quality_columns(valid: list[dict]) -> dict:
    """A row's answer and stream columns over its valid repeats (metrics.quality_figures per repeat) but its medians
    (summary.rows, after them): each reason and flag of the first repeat that has one, the counts summed, whose
    clock (the first repeat's). A metrics.json from before these figures blanks the spread and the steady state."""
    out = {key: first_reason(valid, key)
           for key in ("answers_degenerate", "answers_na", "stream_spread_na", "stream_starvation", "steady_na")}
    out.update({key: next((m[key] for m in valid if m.get(key)), None) for key in ("decode_tok_s_source",
                                                                                 "steady_clock")})
    for key in ("degenerate_answers", "starved_streams"):
        out[key] = sum(m.get(key) or 0 for m in valid)
    if not valid:
        out.update(stream_spread_na="no valid repeat", steady_na="no valid repeat")
    elif any("steady_na" not in m for m in valid):
        out.update(stream_spread_na="made before the streams' spread was recorded",
                   steady_na="made before the steady state was recorded", degenerate_answers=None,
                   starved_streams=None)
    return out


def quality_row(valid: list[dict]) -> dict:
    """table.QUALITY's columns of these repeats' metrics.json, medians included, each blank where a repeat's reason
    blanks it: what `specsweep compare` shows of each side, under the summary's names."""
    out = quality_columns(valid)
    return {**out, **median_columns(out, valid, table.medians(table.QUALITY))}


def first_reason(valid: list[dict], key: str) -> str | None:
    """The first of these repeats' metrics.json with a `key` (a reason or flag), as "repeat i of n: reason"."""
    return next((f"repeat {i + 1} of {len(valid)}: {m[key]}" for i, m in enumerate(valid) if m.get(key)), None)


def median_columns(row: dict, valid: list[dict], columns) -> dict:
    """Each median column's median and MAD over these repeats, both blank where one of its reasons is set in `row`."""
    out = {}
    for c in columns:
        out[c.name], out[c.name + table.MAD] = (None, None) if any(row.get(r) for r in c.reasons) \
            else median_mad([at(m, c.source) for m in valid])
    return out


# ---- issue #30 item 8: a set acceptance, asked against realised (table.SET_ACCEPTANCE, docs/methods.md) ---------
def set_acceptance_columns(study: Study, sid: str, bids: list[str]) -> dict:
    """A set-acceptance row's asked, expected and realised acceptance over its valid repeats (metrics.
    set_acceptance_check): counters summed; each step's offered drafts from the requests' own per-step counts where
    every finished request has them, else every step offered K where the counters say so; blank for real acceptance."""
    cell = study.grid.servers[sid]
    blank = dict.fromkeys(table.names(table.SET_ACCEPTANCE))
    if cell.is_baseline or not cell.sets_acceptance:
        return blank
    k = cell.spec["num_speculative_tokens"]
    sds = [sd for b in bids if study.valid(sid, b) and (sd := (study.metrics(sid, b) or {}).get("spec_decode"))]
    drafts = sum(sd.get("num_drafts") or 0 for sd in sds)
    if not drafts:
        return {**blank, **metrics.set_acceptance_check(cell.spec["set_acceptance"], k, 0, 0),
                "set_acceptance_gap": "no valid repeat with drafts"}
    accepted = sum(sd["num_accepted_tokens"] for sd in sds)
    per_pos = [sum(sd["num_drafts"] * sd["per_position_acceptance"][i] for sd in sds) for i in range(k)] \
        if all(len(sd.get("per_position_acceptance") or []) == k for sd in sds) else None
    counts = [phases.step_counts(r) for run in study.runs(sid, bids) for r in run if r.get("ok")]
    by_drafts = metrics.steps_by_drafts([c[1] for c in counts]) if counts and all(counts) else None
    if by_drafts is not None and sum(by_drafts.values()) != drafts:
        by_drafts = None            # the requests' steps are not the counters' (a request left out): trust the counters
    if by_drafts is None and sum(sd.get("num_draft_tokens") or 0 for sd in sds) < drafts * k:
        return {**blank, **metrics.set_acceptance_check(cell.spec["set_acceptance"], k, 0, 0),
                "set_acceptance_gap": "no expected AL: the counters hold fewer draft tokens than drafts x K (steps cut "
                                      "short) and the requests carry no per-step drafted counts"}
    sequences = metrics.distinct_step_sequences([c[0] for c in counts]) if counts and all(counts) else None
    return metrics.set_acceptance_check(cell.spec["set_acceptance"], k, drafts, accepted, per_pos, by_drafts, sequences)


DIAGNOSIS_COLUMNS = ["diagnosis", "diagnosis_evidence"]


def diagnosis_columns(record: dict | None, row: dict, random_weights: bool = False) -> dict:
    """A row's diagnosis from its server cell's diagnosis.json: the diagnosis (a cause's name) and its evidence;
    both empty where no diagnosis was needed. An undertrained drafter's evidence adds what the system's curve
    says it would need (the row's ceiling columns)."""
    if random_weights and row["method"] != "none":
        return {"diagnosis": None, "diagnosis_evidence": "none: served with random weights (--load-format dummy), "
                                                          "whose acceptance says nothing a diagnosis could find"}
    entry = next((g for g in (record or {}).get("groups", []) if g.get("needed") and
                  (g["dataset"], g["thinking"], g["concurrency"]) == (row["dataset"], row["thinking"],
                                                                        row["concurrency"])), None)
    if entry is None:
        return dict.fromkeys(DIAGNOSIS_COLUMNS)
    evidence = entry["evidence"]
    if entry["diagnosis"] == "undertrained":
        evidence += "; " + diagnosis.ceiling_text(row)
    return {"diagnosis": entry["diagnosis"], "diagnosis_evidence": evidence}


def repeat_agreement_columns(study: Study, sid: str, bids: list[str]) -> dict:
    """A row's repeat_agreement (metrics.repeat_agreement over its valid repeats, each bench setting against its own
    first), or blank with repeat_agreement_na's reason where equal text is not expected: a set acceptance, sampling,
    or concurrency above 1, whose batches differ from repeat to repeat."""
    cell, bench = study.grid.servers[sid], study.grid.benches[sid][bids[0]].spec
    na = ("set acceptance: the text is not the target's" if cell.sets_acceptance else
          "sampled (temperature > 0): the text differs between repeats by chance" if bench["temperature"] != 0 else
          "concurrency above 1: batch composition varies between repeats; vLLM is not batch-invariant"
          if bench["concurrency"] > 1 else None)
    if na:
        return {"repeat_agreement": None, "repeat_agreement_na": na}
    settings = [[study.requests(sid, b) for _, b in sorted(by_repeat.items()) if b in bids and study.valid(sid, b)]
                for by_repeat in schedule.settings(study.grid, sid).values()]
    vacuous = metrics.agreement_na(*(run for runs in settings for run in runs))
    if vacuous:
        return {"repeat_agreement": None, "repeat_agreement_na": vacuous}
    share = metrics.repeat_agreement(settings)
    return {"repeat_agreement": share,
            "repeat_agreement_na": None if share is not None else "fewer than 2 valid repeats with finished requests"}


def _against_baseline(cells: Study, sid: str, bids: list[str], valid: list[dict]) -> dict:
    """Output tok/s as a ratio of medians over repeats (a CI from 3 repeats), and the paired speedup."""
    base = cells.grid.baseline_of.get(sid)
    out = {"speedup_output_tok_s": 1.0 if cells.grid.servers[sid].is_baseline else None,
           "speedup_output_tok_s_ci_low": None, "speedup_output_tok_s_ci_high": None,
           **dict.fromkeys(table.names(table.PAIRED) + table.names(table.SEQUENCE))}
    if base is None:
        return out
    ref_metrics = [cells.metrics(base, b) for b in bids if cells.valid(base, b)]
    ref = [m["output_tok_s"] for m in ref_metrics]
    tok = stats.ratio_of_medians([m["output_tok_s"] for m in valid], ref)
    out.update(speedup_output_tok_s=tok["ratio"], speedup_output_tok_s_ci_low=tok["ci_low"],
               speedup_output_tok_s_ci_high=tok["ci_high"])
    out.update(stats.paired_speedup(cells.runs(sid, bids), cells.runs(base, bids), sides=("this cell", "the baseline"),
                                    rounds=cells.rounds(((sid, bids), (base, bids))),
                                    equivalence=repeats.equivalence(cells.grid.configs[sid]["sweep"])))
    out.update(sequence(cells, sid, base, bids, out))
    return out


def sequence(study: Study, sid: str, ref: str, bids: list[str], paired: dict) -> dict:
    """A comparison's `looks` and `stopped`, and in an `auto` study its e2e interval and verdict from its stopping
    rule over its repeat blocks (looks.sequence_columns); `degenerate` stays."""
    out = looks.sequence_columns(study.grid, sid, ref, bids, *study.paired_runs(sid, ref, bids), paired)
    if paired.get("verdict") == stats.DEGENERATE:
        out.pop("verdict", None)
    return out


def aa_warning(rows: list[dict]) -> str | None:
    """Where an A/A cell (sweep.aa: a second server of the baseline's configuration) came out `faster` or `slower`
    than its baseline: the study's warning, on every row; no verdict of such a study can be trusted."""
    bad = [f"{r['server_cell']} {r['dataset']} c={r['concurrency']} {r['verdict']} "
           + stats.format_ratio(r["speedup_e2e_geomean"], r["speedup_e2e_ci_low"], r["speedup_e2e_ci_high"])
           for r in rows if r["pair"] == AA and r["verdict"] in (stats.FASTER, stats.SLOWER)]
    return ("the A/A check failed: two servers of one configuration differ (" + "; ".join(bad)
            + "), so no verdict of this study can be trusted") if bad else None


# ---- the figures of one row against each other ------------------------------------------------------------
NO_CI_TOLERANCE = 0.25    # a figure without a CI stands for x / 1.25 .. x * 1.25 (docs/reference.md says why)


def _interval(row: dict, point: str, low: str, high: str) -> tuple[float, float] | None:
    """A figure's CI, or for a figure without one, itself widened by NO_CI_TOLERANCE; None where it is blank."""
    x, lo, hi = (table.value(row, c) for c in (point, low, high))
    if x is None:
        return None
    return (lo, hi) if lo is not None and hi is not None else (x / (1 + NO_CI_TOLERANCE), x * (1 + NO_CI_TOLERANCE))


def disagreements(row: dict) -> list[str]:
    """Where two figures of one summary row that measure the same thing contradict each other beyond their CIs
    (a figure without a CI: NO_CI_TOLERANCE). The speedups, each baseline / cell:
    - no two resolve in opposite directions (one interval above 1, the other below);
    - e2e and output tok/s time the same requests' whole time: their intervals overlap;
    - e2e = TTFT + decode, and speculation leaves TTFT about as it was, so the e2e speedup lies between 1
      (widened by the tolerance) and the streamed-TPOT speedup.
    Per token, in ms: the streamed TPOT is at most the e2e time per output token (which adds TTFT), within the
    tolerance. A blank figure (not measured, or void by its own check) is not compared."""
    shown = {name: iv for name, cols in table.SPEEDUPS.items() if (iv := _interval(row, *cols)) is not None}
    out = []
    for a, b in itertools.combinations(shown, 2):
        (alo, ahi), (blo, bhi) = shown[a], shown[b]
        if (alo > 1 and bhi < 1) or (ahi < 1 and blo > 1):
            out.append(f"the {a} speedup [{alo:.2f}, {ahi:.2f}] and the {b} speedup [{blo:.2f}, {bhi:.2f}] point "
                       "in opposite directions")
    if "e2e" in shown and "output tok/s" in shown:
        (alo, ahi), (blo, bhi) = shown["e2e"], shown["output tok/s"]
        if ahi < blo or bhi < alo:
            out.append(f"the e2e speedup [{alo:.2f}, {ahi:.2f}] and the output tok/s speedup [{blo:.2f}, {bhi:.2f}] "
                       "do not overlap")
    if "e2e" in shown and "streamed TPOT" in shown:
        (alo, ahi), (tlo, thi) = shown["e2e"], shown["streamed TPOT"]
        lo, hi = min(1 / (1 + NO_CI_TOLERANCE), tlo), max(1 + NO_CI_TOLERANCE, thi)
        if ahi < lo or alo > hi:
            out.append(f"the e2e speedup [{alo:.2f}, {ahi:.2f}] lies outside [{lo:.2f}, {hi:.2f}], between no change "
                       "and the streamed TPOT speedup")
    tpot, per_token = table.value(row, "streamed_tpot_ms"), table.value(row, "e2e_ms_per_output_token")
    if tpot is not None and per_token is not None and tpot > per_token * (1 + NO_CI_TOLERANCE):
        out.append(f"the streamed TPOT {tpot:.3g} ms exceeds the e2e time per output token {per_token:.3g} ms, "
                   "which includes TTFT")
    return out


def assert_consistent(summary) -> None:
    """Raise AssertionError, naming each row and problem, where a summary row's figures disagree (disagreements);
    `summary` is summary rows (dicts) or the summary as a DataFrame."""
    records = summary.to_dict("records") if isinstance(summary, pd.DataFrame) else summary
    problems = [f"{r['server_cell']} {r['dataset']} c={r['concurrency']}: {p}" for r in records
                for p in disagreements(r)]
    assert not problems, "summary figures disagree:\n" + "\n".join(problems)


def k_comparison(study: Study) -> list[dict]:
    """Each two speculative cells that differ only in K, on the same bench cells: the paired speedup of
    the larger K over the smaller, its verdict, and whether it is answered (`resolved`: faster, slower or
    equivalent; stats.answered)."""
    grid, cells = study.grid, study

    def label(sid: str) -> str:
        return k_label(grid.servers[sid].spec["num_speculative_tokens"], grid.servers[sid].spec.get("k_schedule"))

    out = []
    for hi, lo in looks.k_pairs(grid, [sid for sid, cell in grid.servers.items() if cell.study == study.name]):
        for (sid, dataset, thinking, conc, lengths, exact), bids in sorted(cells.groups.items(), key=_group_order):
            if sid != hi:
                continue
            ka, kb = (grid.servers[s].spec["num_speculative_tokens"] for s in (hi, lo))
            la, lb = label(hi), label(lo)
            hi_runs, lo_runs = cells.runs(hi, bids), cells.runs(lo, bids)
            paired = stats.paired_speedup(hi_runs, lo_runs, sides=(la, lb),
                                          rounds=cells.rounds(((hi, bids), (lo, bids))),
                                          equivalence=repeats.equivalence(grid.configs[hi]["sweep"]))
            seq = sequence(cells, hi, lo, bids, paired)
            paired.update({k: v for k, v in seq.items() if k in paired})
            text = stats.format_ratio(paired["speedup_e2e_geomean"], paired["speedup_e2e_ci_low"],
                                      paired["speedup_e2e_ci_high"])
            word = (paired["verdict"] or "").split(" ")[0]
            result = {stats.FASTER: f"{la} faster", stats.SLOWER: f"{lb} faster", "": "no CI",
                      stats.DEGENERATE: "no verdict: degenerate answers"}.get(word, paired["verdict"])
            out.append({"study": study.name, "pair": grid.servers[hi].pair["name"],
                        "method": grid.servers[hi].spec["method"], "dataset": dataset, "thinking": thinking,
                        "concurrency": conc, "max_tokens": lengths[0], "prompt_length": lengths[1],
                        "ignore_eos": exact, "k_a": ka, "k_b": kb, "server_cell_a": hi, "server_cell_b": lo,
                        "repeats_a": len(hi_runs), "repeats_b": len(lo_runs), **paired,
                        "looks": seq["looks"], "stopped": seq["stopped"], "launch_sd": seq["launch_sd"],
                        "launch_sd_launches": seq["launch_sd_launches"],
                        "answered_repeat": seq["answered_repeat"], "answered_s": seq["answered_s"],
                        "schedule_a": la if grid.servers[hi].spec.get("k_schedule") else None,
                        "resolved": stats.answered(paired["verdict"]),
                        "statement": f"{la} vs {lb}: {text} {result}"
                        + (f", {answer}" if (answer := looks.answered_text(seq)) else "")})
    return out


def category_rows(study: Study) -> list[dict]:
    """Per prompt category (where the dataset has categories), each speculative cell's acceptance and
    paired speedup, pooled over valid repeats."""
    grid, cells, out = study.grid, study, []
    for (sid, dataset, thinking, conc, lengths, exact), bids in sorted(cells.groups.items(), key=_group_order):
        cell, base = grid.servers[sid], grid.baseline_of.get(sid)
        if cell.is_baseline:
            continue
        cell_runs, ref_runs = cells.runs(sid, bids), cells.runs(base, bids) if base else []
        for cat in sorted({r["category"] for run in cell_runs for r in run if r.get("category")}):
            pick = lambda runs: [[r for r in run if r.get("category") == cat] for run in runs]  # noqa: E731
            in_cat = [r for run in pick(cell_runs) for r in run]
            out.append({"study": study.name, "server_cell": sid, "pair": cell.pair["name"], "method": cell.spec["method"],
                        "num_speculative_tokens": cell.spec["num_speculative_tokens"], "dataset": dataset,
                        "thinking": thinking, "concurrency": conc, "max_tokens": lengths[0],
                        "prompt_length": lengths[1], "ignore_eos": exact, "category": cat,
                        "prompts": len({r["index"] for r in in_cat}),
                        "mean_acceptance_length": stats.mean_acceptance_length(in_cat),
                        **stats.paired_speedup(pick(cell_runs), pick(ref_runs), sides=("this cell", "the baseline"),
                                               rounds=cells.rounds(((sid, bids), (base, bids))) if base else None)})
    return out


def phase_text(row: dict, phase: str) -> str:
    """`2.75 [2.60, 2.90]`: a row's pooled acceptance length in a phase with its CI (`2.75 (no CI)` without one)."""
    al, lo, hi = (row.get(f"{phase}_acceptance_length{c}") for c in ("", "_ci_low", "_ci_high"))
    return f"{al:.2f} [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else f"{al:.2f} (no CI)"


def verdict_lines(summary: list[dict], ks: list[dict]) -> list[str]:
    """What the summarize job prints: each speculative cell's verdict, then each K comparison."""
    lines = []
    several = len({r.get("max_tokens") for r in summary}) > 1       # a length axis: each line names its length
    for r in summary:
        if r["method"] != "none" or r["pair"] == AA:
            text = stats.format_ratio(r["speedup_e2e_geomean"], r["speedup_e2e_ci_low"], r["speedup_e2e_ci_high"])
            lengths = (f" out={r['max_tokens']}" if several else "") + \
                (f" prompt={r['prompt_length']}" if r.get("prompt_length") is not None else "")
            lines.append(f"{r['server_cell']} {r['dataset']} think={r['thinking']} c={r['concurrency']}{lengths}: "
                         f"e2e speedup {text} {r['verdict'] or 'no CI'} ({r['paired_prompts']} prompts, "
                         f"{r['valid_repeats']} repeat(s), {r['looks']} look(s), stopped: "
                         f"{looks.answered_text(r) or r['stopped']}); "
                         "output tok/s "
                         + stats.format_ratio(r["speedup_output_tok_s"], r["speedup_output_tok_s_ci_low"],
                                              r["speedup_output_tok_s_ci_high"]) + "; streamed TPOT "
                         + (f"n/a ({r['speedup_streamed_tpot_na']})" if r["speedup_streamed_tpot_na"] else
                            stats.format_ratio(r["speedup_streamed_tpot_geomean"], r["speedup_streamed_tpot_ci_low"],
                                               r["speedup_streamed_tpot_ci_high"]))
                         + "; server TPOT " + (f"n/a ({r['speedup_server_tpot_na']})" if r["speedup_server_tpot_na"]
                                               else stats.format_ratio(r["speedup_server_tpot_geomean"],
                                                                       r["speedup_server_tpot_ci_low"],
                                                                       r["speedup_server_tpot_ci_high"]))
                         + (f" = AL {r['mean_acceptance_length']:.2f} / a step of {r['step_cost']:.2f}x a decode step"
                            if r.get("step_cost") is not None else ""))     # step_cost.py: why the speedup is that
            if r.get("verdict_reason"):
                lines.append(f"  NO VERDICT: degenerate answers: {r['verdict_reason']}")
            if r.get("stream_starvation"):
                lines.append(f"  WARNING: a stream starved: {r['stream_starvation']}")
            if r.get("tpot_sources_disagree"):
                lines.append(f"  WARNING: client and server TPOT disagree: {r['tpot_sources_disagree']}")
            if r["figures_disagree"]:
                lines.append(f"  WARNING: figures disagree: {r['figures_disagree']}")
            if r.get("think_acceptance_length") is not None:       # acceptance by phase (phases.py)
                lines.append("  acceptance by phase: " + "; ".join(
                    f"{p} {phase_text(r, p)} ({r[f'{p}_token_share']:.0%} of tokens)"
                    for p in phases.PHASES if r.get(f"{p}_acceptance_length") is not None))
    lines += [f"{k['dataset']} think={k['thinking']} c={k['concurrency']}: {k['statement']}" for k in ks]
    if summary and summary[0].get("aa_check"):
        lines.append(f"WARNING: {summary[0]['aa_check']}")
    return lines


def write_summary(study: Study, summary_csv: str | Path, k_comparison_csv: str | Path,
                  by_category_csv: str | Path) -> pd.DataFrame:
    """The study's three tables, each at the path given (the summarize rule's outputs); prints the verdicts."""
    summary, ks, cats = rows(study), k_comparison(study), category_rows(study)
    frame = table.write(table.SUMMARY, summary, summary_csv)
    table.write(table.K_COMPARISON, ks, k_comparison_csv)
    table.write(table.BY_CATEGORY, cats, by_category_csv)
    print(f"summary: {len(frame)} rows -> {summary_csv}; {len(ks)} K comparisons -> {k_comparison_csv}, "
          f"{len(cats)} category rows -> {by_category_csv}")
    print("\n".join(verdict_lines(summary, ks)))
    launch_record.write(study.files.dir, study_launches.entries(study))
    return frame
