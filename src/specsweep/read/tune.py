"""`specsweep tune`: predict every K from a study's largest K, recommend K per concurrency, verify.

A step accepts a prefix of its drafts, so the per-position acceptance rates r_1..r_K measured at the
largest K give the mean acceptance length at any smaller K: AL(K') = 1 + r_1 + ... + r_K' (the prefix
model; it assumes the first K' drafts at K are the drafts at K', docs/tune.md says how far that holds).
Step time comes from every measured K: step = (time per output token) x AL per cell, fitted per concurrency
as base (the baseline's step) + drafter overhead + per-draft-token cost x K. The predicted time per token at
K' is its step over AL(K'); the speedup is the baseline's over that. AL(K') there is the prefix model
calibrated by the other measured K (`calibrate`), where the study has any.

The time per output token is one of the summary's own figures, the same function and the same median over
repeats (metrics.py): the streamed TPOT (`streamed_tpot_ms`) where every cell of the group passes its stream
check, else, with a note saying why, the e2e time per output token (`e2e_ms_per_output_token`, TTFT
included). The measured speedup is the summary's paired speedup of that figure (stats.paired_speedup).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specsweep import metrics
from specsweep.core import derived_tables, layout, table
from specsweep.core.errors import ConfigError
from specsweep.core.results import atomic_write_yaml
from specsweep.metrics import request_spec
from specsweep.read.study import Cell, Study
from specsweep.verdicts import stats

N_RESAMPLES = 2000
SEED = 0
STREAMED, E2E = "streamed_tpot_ms", "e2e_ms_per_output_token"     # the time per token a group's model uses
PAIRED_OF = {STREAMED: "speedup_streamed_tpot_geomean", E2E: "speedup_e2e_geomean"}


# ---- pure: acceptance -----------------------------------------------------------------------------------
def position_rates(histogram: np.ndarray) -> np.ndarray:
    """r_1..r_K from acceptance histograms (last axis: index j counts steps that accepted j drafts):
    r_p is the share of steps that accepted at least p drafts."""
    h = np.asarray(histogram, dtype=float)
    tail = np.cumsum(h[..., ::-1], axis=-1)[..., ::-1]         # tail[j]: steps that accepted >= j drafts
    return tail[..., 1:] / tail[..., :1]


def predicted_al(rates: np.ndarray) -> np.ndarray:
    """AL(K') = 1 + r_1 + ... + r_K' for K' = 1..K (last axis)."""
    return 1.0 + np.cumsum(rates, axis=-1)


def calibrate(predicted: np.ndarray, measured: dict[int, float]) -> np.ndarray:
    """Predicted AL(1..K) times measured / predicted, that ratio taken linearly in K between the measured K
    (the largest K's is 1 by construction) and held at the smallest measured K's below it. The prefix model
    runs high for DFlash at smaller K (docs/tune.md); the other measured K say by how much."""
    ks = sorted(k for k in measured if 1 <= k <= len(predicted))
    if not ks:
        return np.asarray(predicted, dtype=float)
    ratios = [measured[k] / predicted[k - 1] for k in ks]
    return np.asarray(predicted) * np.interp(np.arange(1, len(predicted) + 1), ks, ratios)


def al_ci(histograms: np.ndarray, seed: int = SEED, n: int = N_RESAMPLES, level: float = 0.95):
    """95% percentile-bootstrap bounds of AL(1..K), resampling requests (rows of per-request histograms)."""
    h = np.asarray(histograms, dtype=float)
    if len(h) < 2:
        return None, None
    idx = np.random.default_rng(seed).integers(0, len(h), size=(n, len(h)))
    als = predicted_al(position_rates(h[idx].sum(axis=1)))
    return tuple(np.quantile(als, [(1 - level) / 2, (1 + level) / 2], axis=0))


# ---- pure: step cost ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepCost:
    """Step time in ms at one concurrency: the baseline's at K = 0, base + overhead + per_token x K above."""
    base_ms: float
    overhead_ms: float         # the drafter's forward and the speculative bookkeeping, whatever K
    per_token_ms: float        # each draft position: one more verified token and drafted position
    rms_residual_ms: float     # of the fit over the measured K (0 with exactly two)

    def step_ms(self, k: int) -> float:
        return self.base_ms if k == 0 else self.base_ms + self.overhead_ms + self.per_token_ms * k


def fit_step_cost(step_ms: dict[int, float]) -> StepCost:
    """Least squares over {K: measured step ms}, K = 0 being the baseline; needs it and at least two K."""
    ks = sorted(k for k in step_ms if k > 0)
    if 0 not in step_ms or len(ks) < 2:
        raise ValueError(f"a step-cost fit needs the baseline and at least two K, got K={sorted(step_ms)}")
    base = step_ms[0]
    extra = np.array([step_ms[k] - base for k in ks])
    slope, intercept = np.polyfit(np.array(ks, dtype=float), extra, 1)
    resid = extra - (intercept + slope * np.array(ks))
    return StepCost(base, float(intercept), float(slope), float(np.sqrt(np.mean(resid ** 2))))


def predict(als: np.ndarray, cost: StepCost | None) -> list[dict]:
    """Per K' = 1..K, from AL(K'): given a cost model, step ms, TPOT ms and speedup over the baseline."""
    out = []
    for k, al in enumerate(als, start=1):
        row = {"k": k, "al": float(al)}
        if cost is not None:
            step = cost.step_ms(k)
            row.update(predicted_step_ms=step, predicted_ms_per_token=step / al,
                       predicted_speedup=cost.base_ms * al / step)
        out.append(row)
    return out


def ms_per_token(rows: list[dict], figure: str) -> float | None:
    """One repeat's time per output token as the summary has it: the mean streamed TPOT (metrics.json's
    streamed_tpot_ms.mean) or the e2e ms per output token; None where the repeat's streams fail their check."""
    if figure == STREAMED:
        return metrics.streamed_figures(rows)["streamed_tpot_ms"]["mean"]
    return metrics.e2e_ms_per_output_token(rows)


# ---- a study on disk ------------------------------------------------------------------------------------
@dataclass
class Measured:
    """One (dataset, thinking, concurrency, K) over its valid repeats."""
    cells: list[Cell]

    @property
    def k(self) -> int:
        return self.cells[0].config["server_spec"]["num_speculative_tokens"]

    def median(self, *path) -> float | None:
        vals = []
        for c in self.cells:
            v = c.metrics
            for key in path:
                v = v.get(key) if isinstance(v, dict) else None
            if v is not None:
                vals.append(v)
        return statistics.median(vals) if vals else None

    def histograms(self) -> np.ndarray:
        """One acceptance histogram per finished request (index j: steps that accepted j drafts), padded to K+1."""
        rows = []
        for c in self.cells:
            for r in c.requests():
                spec = request_spec(r, self.k) if r.get("ok") else None
                if spec and spec["num_spec_steps"]:
                    h = list(spec["acceptance_histogram"])[: self.k + 1]
                    rows.append(h + [0] * (self.k + 1 - len(h)))
        return np.array(rows, dtype=float).reshape(-1, self.k + 1)

    def al(self) -> float | None:
        """Token-weighted mean acceptance length pooled over the repeats' requests (vLLM's convention)."""
        h = self.histograms()
        return float(predicted_al(position_rates(h.sum(axis=0)))[-1]) if h.size else None

    def runs(self) -> list[list[dict]]:
        """The repeats' request rows, in bench-cell order."""
        return [c.requests() for c in sorted(self.cells, key=lambda c: c.path.name)]

    def streamed_na(self) -> str | None:
        """Why this cell's streamed TPOT cannot be used: its first repeat whose streams fail their check."""
        runs = self.runs()
        return next((f"K={self.k} repeat {i + 1} of {len(runs)}: {why}" for i, run in enumerate(runs)
                     if (why := metrics.streamed_invalid(run))), None)

    def ms_per_token(self, figure: str) -> float | None:
        """The median over repeats of the figure per repeat: the summary's column of that name."""
        runs = [v for v in (ms_per_token(r, figure) for r in self.runs()) if v is not None]
        return statistics.median(runs) if runs else None

    def step_ms(self, figure: str) -> float | None:
        per_token = self.ms_per_token(figure)
        al = 1.0 if self.k == 0 else self.al()
        return per_token * al if per_token and al else None


def load_study(path: str | Path) -> dict[tuple, dict[int, Measured]]:
    """(pair, dataset, thinking, concurrency) -> K -> its valid repeats; K = 0 is the baseline."""
    if Cell.finished(path):
        raise ConfigError(f"tune: {path} is one bench cell: give a study directory (results/<study>)")
    groups: dict[tuple, dict[int, list[Cell]]] = {}
    for c in sorted(Study.load(path).cells.values(), key=lambda c: c.path):
        if not c.metrics.get("valid"):
            continue
        s, b = c.config["server_spec"], c.config["bench_spec"]
        pair = c.config["job_config"]["pair"]["name"]
        key = (pair, b["dataset"]["name"], bool(b["thinking"]), int(b["concurrency"]))
        groups.setdefault(key, {}).setdefault(s["num_speculative_tokens"], []).append(c)
    if not any(k > 0 for g in groups.values() for k in g):
        raise ConfigError(f"tune: {path} has no valid speculative cell: run a study with "
                          "sweep.num_speculative_tokens set to the largest K to consider")
    return {key: {k: Measured(cs) for k, cs in sorted(g.items())} for key, g in sorted(groups.items())}


def tune_rows(study: dict[tuple, dict[int, Measured]]) -> tuple[list[dict], list[str]]:
    """The tune table (one row per group and K' up to the group's largest K) and notes on groups with no
    cost model (why no recommendation there)."""
    out, notes = [], []
    for (pair, dataset, thinking, conc), by_k in study.items():
        kmax = max(by_k)
        if kmax == 0:
            continue
        hist = by_k[kmax].histograms()
        if not hist.size:
            raise ConfigError(f"tune: K={kmax} at concurrency {conc} has no per-request acceptance figures: rerun it "
                              f"with server.per_request_spec_metrics=detailed (vLLM) so {layout.REQUESTS} carries them")
        na = next((why for m in by_k.values() if (why := m.streamed_na())), None)
        figure = E2E if na else STREAMED
        if na:
            notes.append(f"{dataset} thinking={thinking} c={conc}: streamed TPOT not usable ({na}): step times from "
                         "the e2e ms per output token, TTFT included")
        steps = {k: m.step_ms(figure) for k, m in by_k.items() if m.step_ms(figure) is not None}
        try:
            cost = fit_step_cost(steps)
        except ValueError:
            cost = None
            notes.append(f"{dataset} thinking={thinking} c={conc}: no step-cost model (measured K={sorted(steps)}; "
                         "it needs the baseline and at least two K): AL only")
        low, high = al_ci(hist)
        base_tok_s = by_k[0].median("output_tok_s") if 0 in by_k else None
        pure = predicted_al(position_rates(hist.sum(axis=0)))
        calibrated = calibrate(pure, {k: m.al() for k, m in by_k.items() if k > 0 and m.al()})
        preds = predict(calibrated, cost)
        best = max(preds, key=lambda r: r["predicted_speedup"])["k"] if cost else None
        for row in preds:
            k, m = row["k"], by_k.get(row["k"])
            out.append({"pair": pair, "dataset": dataset, "thinking": thinking, "concurrency": conc, "k": k,
                        "from_k": kmax, "calibrated_from_k": " ".join(str(k_) for k_ in sorted(by_k) if k_ > 0),
                        "predicted_al": float(pure[k - 1]), "predicted_al_calibrated": row["al"],
                        "predicted_al_ci_low": None if low is None else float(low[k - 1]),
                        "predicted_al_ci_high": None if high is None else float(high[k - 1]),
                        "ms_per_token_figure": figure,
                        "predicted_step_ms": row.get("predicted_step_ms"),
                        "predicted_ms_per_token": row.get("predicted_ms_per_token"),
                        "predicted_speedup": row.get("predicted_speedup"),
                        "predicted_output_tok_s": (base_tok_s * row["predicted_speedup"]
                                                   if cost and base_tok_s else None),
                        "measured_al": m.al() if m else None,
                        "measured_ms_per_token": m.ms_per_token(figure) if m else None,
                        "measured_speedup": _measured_speedup(by_k, k, figure),
                        "step_fit_rms_ms": cost.rms_residual_ms if cost else None,
                        "recommended": k == best})
    return out, notes


def _measured_speedup(by_k: dict[int, Measured], k: int, figure: str) -> float | None:
    """The summary's paired speedup of the figure the prediction models (stats.paired_speedup: the geomean of
    per-request ratios), not a ratio of two cells' medians."""
    if k not in by_k or 0 not in by_k:
        return None
    return stats.paired_speedup(by_k[k].runs(), by_k[0].runs())[PAIRED_OF[figure]]


def k_by_concurrency(rows: list[dict], neighbours: bool = False) -> dict[int, list[int]]:
    """The recommended K per concurrency (with one K each side that the table covers, for --verify)."""
    out: dict[int, set[int]] = {}
    for r in rows:
        if r["recommended"]:
            ks = {r["k"] - 1, r["k"], r["k"] + 1} if neighbours else {r["k"]}
            out.setdefault(r["concurrency"], set()).update(k for k in ks if 1 <= k <= r["from_k"])
    return {c: sorted(ks) for c, ks in sorted(out.items())}


def override(mapping: dict[int, list[int]]) -> str:
    """The mapping as one Hydra override."""
    items = ",".join(f"{c}:{ks[0] if len(ks) == 1 else '[' + ','.join(map(str, ks)) + ']'}" for c, ks in mapping.items())
    return f"sweep.k_by_concurrency={{{items}}}"


def k_schedule(mapping: dict[int, list[int]]) -> list[list[int]] | None:
    """The recommendation as vLLM's num_speculative_tokens_per_batch_size (sweep.k_schedule): concurrency c_i's K
    covers batch sizes c_(i-1)+1 .. c_i (from 1), and vLLM carries the last K on past the largest."""
    out, start = [], 1
    for conc, ks in sorted(mapping.items()):
        out.append([start, int(conc), int(ks[0])])
        start = int(conc) + 1
    return out or None


def schedule_override(mapping: dict[int, list[int]]) -> str:
    return "sweep.k_schedule=[" + ",".join(f"[{a},{b},{k}]" for a, b, k in k_schedule(mapping) or []) + "]"


def write_tune(study_dir: str | Path) -> tuple[list[dict], dict[int, list[int]], list[str]]:
    """The tune table and the mapping a study takes (layout.TUNE_TABLE, TUNE_MAPPING) in the study directory: the
    mapping as sweep.k_by_concurrency, and the same recommendation as vLLM's own dynamic K schedule
    (vllm.num_speculative_tokens_per_batch_size)."""
    study = load_study(study_dir)
    rows, notes = tune_rows(study)
    files = layout.StudyFiles(Path(study_dir))
    table.write(derived_tables.TUNE, rows, files.tune_table, inputs=inputs(study_dir, study, notes=notes))
    mapping = k_by_concurrency(rows)
    atomic_write_yaml(files.tune_mapping, {"sweep": {"k_by_concurrency": mapping},
                                           "vllm": {"num_speculative_tokens_per_batch_size": k_schedule(mapping)}})
    return rows, mapping, notes


def inputs(study_dir: str | Path, study: dict[tuple, dict[int, Measured]], **settings) -> dict:
    """What tune.csv (or tune_verify.csv) came from: its settings and the valid bench cells each group's K used."""
    return {"written_by": "specsweep tune", "study": str(study_dir),
            "settings": {"n_resamples": N_RESAMPLES, "seed": SEED, "ms_per_token_figures": [STREAMED, E2E],
                         **settings},
            "cells": {f"{pair} {dataset} thinking={thinking} c={conc} K={k}": [str(c.path) for c in m.cells]
                      for (pair, dataset, thinking, conc), by_k in study.items() for k, m in by_k.items()}}


# ---- verify ---------------------------------------------------------------------------------------------
def verify_jobs(study_dir: str | Path, mapping: dict[int, list[int]]) -> list[dict]:
    """The study's own jobs (already done: nothing reruns) plus each with the mapping, in the same study and
    results directory, so the DAG runs only the new cells and the study's summary keeps every cell."""
    jobs: dict[str, dict] = {}
    results_dir = str(Path(study_dir).resolve().parent)
    for c in sorted(Study.load(study_dir).cells.values(), key=lambda c: c.path):
        job = dict(c.config["job_config"], results_dir=results_dir)
        jobs.setdefault(repr(job), job)
    linked = [dict(j, sweep=dict(j["sweep"], k_by_concurrency={c: list(ks) for c, ks in mapping.items()}))
              for j in jobs.values() if j["pair"]["method"] != "none"]
    return list(jobs.values()) + linked


def verify_rows(before: list[dict], study_dir: str | Path, mapping: dict[int, list[int]]) -> list[dict]:
    """Predicted (from the study before verify) against measured AL and speedup for the verified K."""
    after = {(r["pair"], r["dataset"], r["thinking"], r["concurrency"], r["k"]): r
             for r in tune_rows(load_study(study_dir))[0]}
    out = []
    for r in before:
        if r["k"] not in mapping.get(r["concurrency"], []):
            continue
        now = after.get((r["pair"], r["dataset"], r["thinking"], r["concurrency"], r["k"]), {})
        al, sp = now.get("measured_al"), now.get("measured_speedup")
        out.append({"pair": r["pair"], "dataset": r["dataset"], "thinking": r["thinking"],
                    "concurrency": r["concurrency"], "k": r["k"], "recommended": r["recommended"],
                    "in_study_before": r["measured_al"] is not None,
                    "predicted_al": r["predicted_al"], "predicted_al_calibrated": r["predicted_al_calibrated"],
                    "measured_al": al, "al_error": r["predicted_al"] / al - 1 if al else None,
                    "al_calibrated_error": r["predicted_al_calibrated"] / al - 1 if al else None,
                    "predicted_speedup": r["predicted_speedup"], "measured_speedup": sp,
                    "speedup_error": r["predicted_speedup"] / sp - 1 if sp and r["predicted_speedup"] else None})
    return out
