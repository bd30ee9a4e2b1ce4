"""`specsweep compare`'s second tool, predicted against measured: a replay of a drafter's per-position rates
(sweep.set_acceptance rates, e.g. {rates_from: DIR}) beside that drafter's own measured cell at the same grid
point, in one study or across the two, with both speedups, whether their CIs agree, and the two cells paired
directly where they ran the same requests. Its columns are derived_tables.PREDICTED.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


from specsweep.core import derived_tables, labels, layout, table
from specsweep.core.results import read_json
from specsweep.grid.cells import ADDED_SPEC_KEYS
from specsweep.metrics import median_mad
from specsweep.read.sides import Side, own_baseline, ratio_text, rounds_of, two_places
from specsweep.read.study import Cell
from specsweep.verdicts import stats

RATES_TOLERANCE = 0.01     # without a recorded source, a replay is of a drafter whose measured rates it holds to this


@dataclass
class Configuration:
    """One server cell's bench group (dataset, thinking, concurrency) on one side, over its valid repeats."""
    side_name: str          # "A", "B", or "" for one study
    side: Side
    cells: list[Cell]

    @property
    def spec(self) -> dict:
        return self.cells[0].server_spec

    @property
    def bench(self) -> dict:
        return self.cells[0].bench

    @property
    def pair(self) -> str:
        return (self.cells[0].config.get("pair") or {}).get("name")

    @property
    def study(self) -> str:
        return self.cells[0].path.parent.parent.name

    @property
    def server_cell(self) -> str:
        return self.cells[0].server_cell

    @property
    def replay(self) -> bool:
        """A cell whose acceptance is set to per-position rates: the prediction of a drafter with those rates."""
        s = self.spec
        return s["method"] != "none" and isinstance(s.get("set_acceptance"), list) and not s.get("k_schedule")

    @property
    def measured(self) -> bool:
        s = self.spec
        return s["method"] != "none" and s.get("set_acceptance") is None and not s.get("k_schedule")

    def point(self) -> tuple:
        """What must be equal for a replay to predict a measured cell: the pair, method, K and verification, the
        server and kernel settings, the hardware (env.json's GPU names), and the same requests but for
        ignore_eos (a replay forces it): dataset and its prompts, thinking, concurrency, temperature, seed,
        max_tokens."""
        s, b = self.spec, self.bench
        return (self.pair, s["method"], s["num_speculative_tokens"], s.get("verification", "standard"),
                _settings(s, "server"), _settings(s, "kernel"), _hardware(self.cells[0]), b["dataset"]["name"], self.cells[0].metrics.get("prompts_sha256"),
                b["thinking"], b["concurrency"], b["temperature"], b["seed"], b["max_tokens"])

    def rates(self) -> list[float]:
        """The per-position acceptance, per position the median over the repeats (as the summary's)."""
        per = [(c.metrics.get("spec_decode") or {}).get("per_position_acceptance") or [] for c in self.cells]
        width = min((len(p) for p in per), default=0)
        return [median_mad([p[i] for p in per])[0] for i in range(width)]

    def al(self) -> float | None:
        return median_mad([(c.metrics.get("spec_decode") or {}).get("mean_acceptance_length") for c in self.cells])[0]

    def label(self) -> str:
        return f"{self.side_name + ' ' if self.side_name else ''}{self.server_cell}"


def _settings(spec: dict, part: str) -> str:
    """A spec's server or kernel settings as JSON, less the keys added since v1 at their defaults (as the id
    leaves them out: cells.ADDED_SPEC_KEYS), so a study from before a key existed matches one from after."""
    settings = dict(spec[part])
    for path, default in ADDED_SPEC_KEYS.items():
        if path.startswith(f"{part}.") and settings.get(path.split(".", 1)[1], default) == default:
            settings.pop(path.split(".", 1)[1], None)
    return json.dumps(settings, sort_keys=True, default=str)


def _hardware(cell: Cell) -> tuple | None:
    """The GPUs the cell's study ran on, by name (() on a CPU host), from its env.json; None without one."""
    env = cell.path.parent.parent / layout.ENV
    if not env.exists():
        return None
    return tuple(sorted(g.get("name", "") for g in (read_json(env).get("gpus") or [])))


def configurations(side_name: str, side: Side) -> list[Configuration]:
    groups: dict[tuple, list[Cell]] = {}
    for c in side.cells:
        if c.valid:
            b = c.bench
            groups.setdefault((c.server_cell, b["dataset"]["name"], b["thinking"], b["concurrency"]), []).append(c)
    return [Configuration(side_name, side, sorted(cells, key=lambda c: c.path)) for cells in groups.values()]


def drafter_of(replay: Configuration, measured: Configuration) -> tuple[str | None, str]:
    """How the replay's rates are known to be the measured cell's drafter's, or None and why not. A recorded source
    (sweep.set_acceptance {rates_from: DIR}, config.yaml's set_acceptance_source) names its pair: the same pair's
    drafter (`own rates` where it is the measured cell itself). Without one (rates given as a list), the rates must
    be the measured cell's own per-position rates to RATES_TOLERANCE at every position."""
    source = replay.cells[0].set_acceptance_source or {}
    if source.get("pair"):
        if source["pair"] != measured.pair:
            return None, f"its rates came from pair {source['pair']} ({source['study']}/{source['server_cell']})"
        own = (source["study"], source["server_cell"]) == (measured.study, measured.server_cell)
        return ("own rates" if own else f"rates of {source['study']}/{source['server_cell']}"), ""
    given, rates = replay.spec["set_acceptance"], measured.rates()
    if len(rates) != len(given):
        return None, f"no source recorded, and the measured cell has {len(rates)} per-position rates, not {len(given)}"
    diff = max(abs(a - b) for a, b in zip(given, rates))
    if diff > RATES_TOLERANCE:
        return None, (f"no source recorded, and its rates differ from the measured cell's by up to {diff:.2f} (more "
                      f"than {RATES_TOLERANCE})")
    return f"by rates (no source recorded; the measured cell's to {diff:.4f})", ""


def _holds(lo, hi, x) -> bool:
    return lo is not None and hi is not None and x is not None and lo <= x <= hi


def _prediction(replay: Configuration, measured: Configuration, how: str) -> dict:
    pred, meas = own_baseline(replay.side, replay.cells), own_baseline(measured.side, measured.cells)
    p, m = pred["speedup_e2e_geomean"], meas["speedup_e2e_geomean"]
    p_lo, p_hi, m_lo, m_hi = (pred["speedup_e2e_ci_low"], pred["speedup_e2e_ci_high"],
                              meas["speedup_e2e_ci_low"], meas["speedup_e2e_ci_high"])
    given = replay.spec["set_acceptance"]
    row = {"pair": replay.pair, "method": replay.spec["method"],
           "num_speculative_tokens": replay.spec["num_speculative_tokens"], "dataset": replay.bench["dataset"]["name"],
           "thinking": replay.bench["thinking"], "concurrency": replay.bench["concurrency"],
           "predicted_side": replay.side_name, "measured_side": measured.side_name,
           "predicted_cell": str(replay.cells[0].path.parent), "measured_cell": str(measured.cells[0].path.parent),
           "predicted_repeats": len(replay.cells), "measured_repeats": len(measured.cells), "rates_source": how,
           "replayed_rates": json.dumps(given), "realised_rates": json.dumps([round(r, 4) for r in replay.rates()]),
           "measured_rates": json.dumps([round(r, 4) for r in measured.rates()]), "replayed_al": 1 + sum(given),
           "predicted_al": replay.al(), "measured_al": measured.al(),
           **{f"predicted_speedup_e2e_{k}": pred[f"speedup_e2e_{k}"] for k in ("geomean", "ci_low", "ci_high")},
           **{f"measured_speedup_e2e_{k}": meas[f"speedup_e2e_{k}"] for k in ("geomean", "ci_low", "ci_high")},
           "predicted_over_measured": p / m if p and m else None,
           # the rule: each 95% CI holds the other's figure; None where either has no CI
           "agree": (_holds(m_lo, m_hi, p) and _holds(p_lo, p_hi, m))
           if None not in (p_lo, p_hi, m_lo, m_hi) else None}
    row.update(dict.fromkeys(table.names(derived_tables.PREDICTED)[-4:]))
    # the same requests on both sides (a real cell run with sweep.ignore_eos=true, as its replay is): the two
    # cells paired directly, prompt by prompt, their baselines' noise out of it; above 1: the measured cell faster
    by_r, by_m = {c.bench_cell: c for c in replay.cells}, {c.bench_cell: c for c in measured.cells}
    if by_r.keys() == by_m.keys():
        bids = sorted(by_r)
        mine, theirs = rounds_of([by_m[b] for b in bids]), rounds_of([by_r[b] for b in bids])
        direct = stats.paired_speedup([by_m[b].requests() for b in bids], [by_r[b].requests() for b in bids],
                                      sides=("measured", "predicted"),
                                      rounds=(mine, theirs) if mine is not None and theirs is not None else None)
        row.update(measured_vs_predicted_e2e_geomean=direct["speedup_e2e_geomean"],
                   measured_vs_predicted_e2e_ci_low=direct["speedup_e2e_ci_low"],
                   measured_vs_predicted_e2e_ci_high=direct["speedup_e2e_ci_high"],
                   measured_vs_predicted_verdict=direct["verdict"])
    return row


def predictions(*sides: tuple[str, Side]) -> tuple[list[dict], list[str]]:
    """Every replay cell of the sides beside every measured cell of its drafter at the same grid point (the same
    side or the other): rows of predicted against measured, and a line for each replay left without one."""
    configs = [c for name, side in sides for c in configurations(name, side)]
    rows, unmatched = [], []
    for replay in (c for c in configs if c.replay):
        reasons = []
        for measured in (c for c in configs if c.measured and c.point() == replay.point()):
            how, why = drafter_of(replay, measured)
            if how:
                rows.append(_prediction(replay, measured, how))
            else:
                reasons.append(f"not {measured.label()}: {why}")
        if not any(r["predicted_cell"] == str(replay.cells[0].path.parent) for r in rows):
            where = (f"{replay.bench['dataset']['name']} think={replay.bench['thinking']} "
                     f"c={replay.bench['concurrency']}")
            unmatched.append(f"{replay.label()} {where}: " + ("; ".join(reasons) or
                             "no measured cell of its pair at its K, server, hardware and requests"))
    return rows, unmatched


def prediction_lines(rows: list[dict], unmatched: list[str]) -> list[str]:
    out = []
    if rows:
        out.append("predicted (a replay of the drafter's per-position rates) against measured (the drafter), e2e "
                   "speedup over each one's own baseline [95% CI]; agree: each CI holds the other's figure")
    for r in rows:
        sides = f"replay in {r['predicted_side']}, measured in {r['measured_side']}; " if r["predicted_side"] else ""
        out.append(f"{labels.label(r)} ({sides}{r['rates_source']}; {r['predicted_repeats']} and "
                   f"{r['measured_repeats']} repeat(s)):")
        out.append(f"  AL       replayed {r['replayed_al']:.3f}  realised {two_places(r['predicted_al'])}  "
                   f"measured {two_places(r['measured_al'])}")
        agree = {True: "agree", False: "disagree", None: "no CI"}[r["agree"]]
        ratio = "n/a" if r["predicted_over_measured"] is None else f"{r['predicted_over_measured']:.3f}"
        out.append(f"  speedup  predicted {ratio_text(r, 'predicted_speedup_e2e')}  measured {ratio_text(r, 'measured_speedup_e2e')}"
                   f"  predicted/measured {ratio}  {agree}")
        if r["measured_vs_predicted_e2e_geomean"] is not None:
            out.append(f"  paired   measured vs predicted on the same requests {ratio_text(r, 'measured_vs_predicted_e2e')} "
                       f"{r['measured_vs_predicted_verdict'] or 'no CI'}")
        out.append(f"  rates    replayed {r['replayed_rates']}  realised {r['realised_rates']}  "
                   f"measured {r['measured_rates']}")
    out += [f"no measured cell for the replay {line}" for line in unmatched]
    return out


def write_predictions(rows: list[dict], unmatched: list[str], out: str | Path, sides: dict) -> None:
    """Print the predictions and write predicted.csv, with what it came from beside it (sides: each side's path)."""
    print("\n".join(prediction_lines(rows, unmatched)))
    if rows:
        cells = sorted({r[f"{which}_cell"] for r in rows for which in ("predicted", "measured")})
        table.write(derived_tables.PREDICTED, rows, out, inputs={
            "written_by": "specsweep compare", **sides, "settings": {"agree": "each 95% CI holds the other's figure"},
            "cells": cells, "unmatched": unmatched})
        print(f"wrote {out}")
