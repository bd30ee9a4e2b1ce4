"""`specsweep compare A B`: two studies (results/<study>) or two bench cells side by side, e.g. two vLLM
versions or two drafters for one target, with paired CIs and verdicts (stats.py).

Studies are matched cell by cell on (method, K, dataset, thinking, concurrency, repeat); requests are
paired by prompt and turn. A pair that did not run the same requests is refused, since its per-request
ratios would compare different work: different prompts, sampling (temperature, seed), max_tokens or
ignore_eos (a bench spec without that key predates it: false).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import labels, layout, phases, stats, summary, table
from .cells import ADDED_SPEC_KEYS, Grid
from .datasets import load_prompt_rows, prompts_digest
from .errors import ConfigError
from .metrics import median_mad
from .results import atomic_write_text, read_json
from .study import KEY, Cell, Study

# What must match for two cells' requests to be the same requests: (bench spec key, the config key to set).
SAME_WORK = (("temperature", "sweep.temperature"), ("seed", "sweep.seed"), ("max_tokens", "sweep.max_tokens"),
             ("ignore_eos", "sweep.ignore_eos"), ("thinking", "sweep.thinking"))


def prompts_sha256(cell: Cell) -> str:
    """The digest recorded at the cell's end, or (a cell from before it was recorded) the digest of its dataset
    file, found the way the grid names it under the cell's results_dir."""
    if cell.metrics.get("prompts_sha256"):
        return cell.metrics["prompts_sha256"]
    ds = cell.bench["dataset"]
    path = Path(Grid(results_dir=cell.path.parents[2]).dataset_file(ds))
    if not path.exists():
        raise ConfigError(f"compare: cannot check the prompts of {cell.path}: its dataset file {path} is gone: "
                          f"restore it, or rerun the cell so {layout.METRICS} records prompts_sha256")
    return prompts_digest([r["turns"] for r in load_prompt_rows(path, ds)[0]])


@dataclass
class Side:
    """What one side of a comparison is: one bench cell, or a study's cells."""
    kind: str                        # "cell" or "study"
    cells: list[Cell]
    study: Study | None = None

    def baseline(self, cell: Cell) -> Cell | None:
        """The cell's matched baseline, finished: the study's own, or for a lone cell the one beside it."""
        return cell.baseline() if self.study is None else self.study.baseline(cell)


def rounds_of(cells: list[Cell]) -> list[int] | None:
    """The round each cell ran in (sweep.rounds), or None where none ran in more than one."""
    rounds = [c.round for c in cells]
    return None if all(r is None for r in rounds) else [r or 0 for r in rounds]


def side_of(path: str | Path) -> Side:
    """A finished bench cell, or a study directory (read by Study.load)."""
    p = Path(path)
    if Cell.finished(p):
        return Side("cell", [Cell.load(p)])
    if not p.is_dir() or not any(p.glob(f"*/*/{layout.METRICS}")):
        raise ConfigError(f"compare: {p} is neither a study directory (results/<study>) nor a finished bench cell "
                          f"(results/<study>/<server cell>/<bench cell> with {layout.METRICS}): give one of those")
    study = Study.load(p)
    return Side("study", [study.cells[k] for k in sorted(study.cells)], study)


def check_same_work(a: Cell, b: Cell) -> None:
    """Refuse, in one line, a pair whose requests are not the same requests."""
    for key, setting in SAME_WORK:
        va, vb = a.bench.get(key, False), b.bench.get(key, False)
        if va != vb:
            raise ConfigError(f"compare: {a.path} and {b.path} differ in {key} ({va} vs {vb}), so their requests are "
                              f"not the same: compare cells run with the same {setting}")
    da, db = prompts_sha256(a), prompts_sha256(b)
    if da != db:
        raise ConfigError(f"compare: {a.path} and {b.path} ran different prompts (prompt digests {da[:12]} vs "
                          f"{db[:12]}): compare cells of the same dataset file and dataset.num_prompts")


def _without_max_tokens(key: tuple) -> tuple:
    i = KEY.index("max_tokens")
    return key[:i] + (None,) + key[i + 1:]


def _pairs(a: Side, b: Side, required: bool = True) -> list[tuple[Cell, Cell]]:
    if a.kind != b.kind:
        raise ConfigError(f"compare: A is a {a.kind} and B a {b.kind}: give two studies or two bench cells")
    if a.kind == "cell":
        return [(a.cells[0], b.cells[0])]
    by_key = []
    for side in (a, b):
        keyed: dict[tuple, Cell] = {}
        for c in side.cells:
            if c.key in keyed:
                raise ConfigError(f"compare: {keyed[c.key].path} and {c.path} are the same kind of cell in one study "
                                  "(they differ in a setting compare does not match on): compare bench cells directly")
            keyed[c.key] = c
        by_key.append(keyed)
    common = sorted(set(by_key[0]) & set(by_key[1]), key=repr)
    if not common:      # two studies of one output length each: matched without it, so check_same_work says so
        by_key = [{_without_max_tokens(k): c for k, c in keyed.items()} for keyed in by_key]
        if all(len(keyed) == len(side.cells) for keyed, side in zip(by_key, (a, b))):
            common = sorted(set(by_key[0]) & set(by_key[1]), key=repr)
    if not common and required:
        raise ConfigError("compare: no cell of A matches one of B on (method, K, set acceptance, verification, K "
                          "schedule, dataset, thinking, concurrency, ignore_eos, repeat): compare studies that ran "
                          "the same grid points")
    return [(by_key[0][k], by_key[1][k]) for k in common]


def _own_baseline(side: Side, cells: list[Cell]) -> dict:
    """A side's cells against their own matched baselines, paired as the summary pairs them (with rounds,
    the rounds resampled first)."""
    own = [(c, base) for c in cells if c.valid and (base := side.baseline(c)) is not None and base.valid]
    mine, theirs = rounds_of([c for c, _ in own]), rounds_of([base for _, base in own])
    rounds = (mine, theirs) if own and mine is not None and theirs is not None else None
    return stats.paired_speedup([c.requests() for c, _ in own], [base.requests() for _, base in own],
                                rounds=rounds)


def compare(path_a: str | Path, path_b: str | Path, required: bool = True) -> list[dict]:
    """One row per matched grid point, repeats pooled: each side's acceptance and speedup over its own
    baseline, and B against A (latency ratios A / B: above 1, B is faster). Where both studies ran their
    cells in several rounds (sweep.rounds), the paired CIs resample rounds first, as the summary's do; B
    against A pairs round i of B with round i of A. `required=False`: no matched grid point gives no rows
    instead of refusing."""
    side_a, side_b = side_of(path_a), side_of(path_b)
    pairs = _pairs(side_a, side_b, required)
    for a, b in pairs:
        check_same_work(a, b)
    groups: dict[tuple, list[tuple[Cell, Cell]]] = {}
    for a, b in pairs:
        groups.setdefault(a.key[:-1], []).append((a, b))
    out = []
    for key, every in groups.items():
        point = dict(zip(KEY, key))
        # only repeats that both cells' own checks accept (valid: true), as the summary takes them
        matched = [(a, b) for a, b in every if a.valid and b.valid] or every
        void = "; ".join(f"{side} {c.path.name}: {void_reason(c)}" for pair in every for side, c in zip("AB", pair)
                         if not c.valid) or None
        a_runs, b_runs = [a.requests() for a, _ in matched], [b.requests() for _, b in matched]
        a_spec, b_spec = matched[0][0].server_spec, matched[0][1].server_spec
        row = {"method": point["method"], "num_speculative_tokens": point["num_speculative_tokens"],
               "set_acceptance": a_spec.get("set_acceptance"), "verification": point["verification"],
               "k_schedule": a_spec.get("k_schedule"), "b_method": b_spec["method"],
               "b_num_speculative_tokens": b_spec["num_speculative_tokens"], "dataset": point["dataset"],
               "thinking": point["thinking"], "concurrency": point["concurrency"],
               "max_tokens": matched[0][0].bench["max_tokens"], "prompt_length": point["prompt_length"],
               "repeats": len(matched) if void is None or len(matched) < len(every) else 0,
               "cell_a": str(matched[0][0].path), "cell_b": str(matched[0][1].path), "repeats_void": void}
        for side, (name, cells) in ((side_a, ("a", [a for a, _ in matched])), (side_b, ("b", [b for _, b in matched]))):
            row[f"{name}_mean_acceptance_length"] = median_mad([(c.metrics.get("spec_decode") or {})
                                                                .get("mean_acceptance_length") for c in cells])[0]
            row[f"{name}_output_tok_s"] = median_mad([c.metrics.get("output_tok_s") for c in cells])[0]
            row.update(phase_figures(name, cells))
            vs_base = _own_baseline(side, cells)
            row.update({f"{name}_{figure}": vs_base[figure] for figure in
                        ("speedup_e2e_geomean", "speedup_e2e_ci_low", "speedup_e2e_ci_high", "verdict",
                         "verdict_reason")})
            # the answers and the streams under the summary's names (table.QUALITY), blank where a cell's check voids
            row.update({f"{name}_{k}": v for k, v in summary.quality_row([c.metrics for c in cells]).items()
                        if not k.endswith(table.MAD)})
        acc = stats.acceptance_ratio(b_runs, a_runs)
        row.update(b_vs_a_acceptance_ratio=acc["ratio"], b_vs_a_acceptance_ci_low=acc["ci_low"],
                   b_vs_a_acceptance_ci_high=acc["ci_high"])
        # the streamed-TPOT ratio only where every repeat of both sides passes its own stream check
        rounds_b, rounds_a = rounds_of([b for _, b in matched]), rounds_of([a for a, _ in matched])
        rounds = (rounds_b, rounds_a) if rounds_b is not None and rounds_a is not None else None
        row.update({f"b_vs_a_{name}": v for name, v in
                    stats.paired_speedup(b_runs, a_runs, sides=("B", "A"), rounds=rounds).items()})
        tok = stats.ratio_of_medians([b.metrics.get("output_tok_s") for _, b in matched],
                                     [a.metrics.get("output_tok_s") for a, _ in matched])
        row.update(b_vs_a_output_tok_s_ratio=tok["ratio"], b_vs_a_output_tok_s_ci_low=tok["ci_low"],
                   b_vs_a_output_tok_s_ci_high=tok["ci_high"])
        out.append(blank_void(row, matched, every_void=row["repeats"] == 0))
    return out


def void_reason(cell: Cell) -> str:
    """Why a cell's own checks reject its figures (metrics.json's valid: false), in its words."""
    return cell.metrics.get("invalid_reason") or "valid: false"


# figures a cell's own recorded check voids: its metrics.json key, and the compare columns it blanks
VOIDED_BY = (("streamed_figures_invalid", "b_vs_a_speedup_streamed_tpot"),
             ("server_figures_invalid", "b_vs_a_speedup_server_tpot"))


def blank_void(row: dict, matched: list[tuple[Cell, Cell]], every_void: bool = False) -> dict:
    """Blank every figure of a compare row that the cells' own checks void: all of them where no repeat of the
    point is valid on both sides (repeats_void says why); a paired TPOT ratio where any cell it pairs recorded that
    figure's check as failed (streamed_figures_invalid, server_figures_invalid in its metrics.json), whatever its
    rows would say today, with that cell's reason in the ratio's `_na`."""
    if every_void:
        keep = {"repeats", "repeats_void", "cell_a", "cell_b", "b_method", "b_num_speculative_tokens", *KEY_COLUMNS}
        return {k: v if k in keep else (f"no repeat valid on both sides: {row['repeats_void']}" if k.endswith("_na")
                                        else None) for k, v in row.items()}
    for key, stem in VOIDED_BY:
        reason = next((f"{side} {c.path.name}: {c.metrics[key]}" for pair in matched for side, c in zip("AB", pair)
                       if c.metrics.get(key)), None)
        if reason:
            row.update({f"{stem}_geomean": None, f"{stem}_ci_low": None, f"{stem}_ci_high": None})
            row[f"{stem}_na"] = row.get(f"{stem}_na") or reason
    return row


KEY_COLUMNS = ("method", "num_speculative_tokens", "set_acceptance", "verification", "k_schedule", "dataset",
               "thinking", "concurrency", "max_tokens", "prompt_length")


def phase_figures(name: str, cells: list[Cell]) -> dict:
    """A side's acceptance by phase over its cells' requests (phases.py), under the summary's names with the
    side's prefix (a_think_acceptance_length, ...; per-position lists as JSON); blank for a baseline, with
    phase_split_na's reason."""
    if not cells or cells[0].server_spec["method"] == "none":
        cols = phases.columns({"na": "baseline: no drafts", "requests": 0})
    else:
        thinking = bool(cells[0].bench["thinking"])
        cols = phases.columns(phases.pooled([phases.request_split(r, thinking) for c in cells for r in c.requests()
                                             if r.get("ok")]))
    return {f"{name}_{k}": json.dumps(v) if isinstance(v, list) else v for k, v in cols.items()}


def _fmt(row: dict, stem: str, point: str = "geomean") -> str:
    return stats.format_ratio(row[f"{stem}_{point}"], row[f"{stem}_ci_low"], row[f"{stem}_ci_high"])


def _two_places(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def table_lines(rows: list[dict]) -> list[str]:
    """The printed table: a few lines per grid point, each headed by its configuration's label (labels.label, less
    the pair: a grid point is matched across pairs)."""
    out = []
    for r in rows:
        b_cell = "" if (r["b_method"], r["b_num_speculative_tokens"]) == (r["method"], r["num_speculative_tokens"]) \
            else " (B: " + labels.SEP.join(labels.setting({"method": r["b_method"],
                                                           "num_speculative_tokens": r["b_num_speculative_tokens"]})) + ")"
        out.append(f"{labels.label(r, with_pair=False)}{b_cell}, {r['repeats']} repeat(s):")
        if r.get("repeats_void"):
            out.append(f"  left out (their own checks void them): {r['repeats_void']}")
        if r["method"] != "none":
            out += [f"  acceptance       A {_two_places(r['a_mean_acceptance_length'])}  "
                    f"B {_two_places(r['b_mean_acceptance_length'])}  B/A {_fmt(r, 'b_vs_a_acceptance', 'ratio')}",
                    f"  vs own baseline  A {_fmt(r, 'a_speedup_e2e')} {r['a_verdict'] or 'no CI'}  "
                    f"B {_fmt(r, 'b_speedup_e2e')} {r['b_verdict'] or 'no CI'}"]
        out += [f"  {side} no verdict    {r[f'{side.lower()}_verdict_reason']}" for side in ("A", "B")
                if r.get(f"{side.lower()}_verdict_reason")]
        out.append(f"  B vs A           e2e {_fmt(r, 'b_vs_a_speedup_e2e')} {r['b_vs_a_verdict'] or 'no CI'}  "
                   "streamed TPOT " + (f"n/a ({r['b_vs_a_speedup_streamed_tpot_na']})"
                                       if r["b_vs_a_speedup_streamed_tpot_na"] else _fmt(r, "b_vs_a_speedup_streamed_tpot"))
                   + "  server TPOT " + (f"n/a ({r['b_vs_a_speedup_server_tpot_na']})"
                                         if r.get("b_vs_a_speedup_server_tpot_na")
                                         else _fmt(r, "b_vs_a_speedup_server_tpot"))
                   + f"  output tok/s {_fmt(r, 'b_vs_a_output_tok_s', 'ratio')}")
        if r.get("b_vs_a_verdict_reason"):
            out.append(f"  B vs A no verdict  {r['b_vs_a_verdict_reason']}")
        if r["concurrency"] > 1:
            out.append("  streams          " + "  ".join(
                f"{side} steady {_two_places(r[f'{p}_steady_output_tok_s'])} tok/s"
                + (f" (n/a: {r[f'{p}_steady_na']})" if r[f"{p}_steady_na"] else "")
                + f", decode tok/s min/max {_two_places(r[f'{p}_decode_tok_s_min_over_max'])}"
                + (f", starved: {r[f'{p}_stream_starvation']}" if r[f"{p}_stream_starvation"] else "")
                for side, p in (("A", "a"), ("B", "b"))))
    return out


# ---- predicted against measured: a replay of a drafter's rates beside that drafter's own cell -------------------
RATES_TOLERANCE = 0.01     # without a recorded source, a replay is of a drafter whose measured rates it holds to this
PREDICTED_COLUMNS = [
    "pair", "method", "num_speculative_tokens", "dataset", "thinking", "concurrency", "predicted_side",
    "measured_side", "predicted_cell", "measured_cell", "predicted_repeats", "measured_repeats", "rates_source",
    "replayed_rates", "realised_rates", "measured_rates", "replayed_al", "predicted_al", "measured_al",
    "predicted_speedup_e2e_geomean", "predicted_speedup_e2e_ci_low", "predicted_speedup_e2e_ci_high",
    "measured_speedup_e2e_geomean", "measured_speedup_e2e_ci_low", "measured_speedup_e2e_ci_high",
    "predicted_over_measured", "agree", "measured_vs_predicted_e2e_geomean", "measured_vs_predicted_e2e_ci_low",
    "measured_vs_predicted_e2e_ci_high", "measured_vs_predicted_verdict"]


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
    pred, meas = _own_baseline(replay.side, replay.cells), _own_baseline(measured.side, measured.cells)
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
    row.update(dict.fromkeys(PREDICTED_COLUMNS[-4:]))
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
        out.append(f"  AL       replayed {r['replayed_al']:.3f}  realised {_two_places(r['predicted_al'])}  "
                   f"measured {_two_places(r['measured_al'])}")
        agree = {True: "agree", False: "disagree", None: "no CI"}[r["agree"]]
        ratio = "n/a" if r["predicted_over_measured"] is None else f"{r['predicted_over_measured']:.3f}"
        out.append(f"  speedup  predicted {_fmt(r, 'predicted_speedup_e2e')}  measured {_fmt(r, 'measured_speedup_e2e')}"
                   f"  predicted/measured {ratio}  {agree}")
        if r["measured_vs_predicted_e2e_geomean"] is not None:
            out.append(f"  paired   measured vs predicted on the same requests {_fmt(r, 'measured_vs_predicted_e2e')} "
                       f"{r['measured_vs_predicted_verdict'] or 'no CI'}")
        out.append(f"  rates    replayed {r['replayed_rates']}  realised {r['realised_rates']}  "
                   f"measured {r['measured_rates']}")
    out += [f"no measured cell for the replay {line}" for line in unmatched]
    return out


def write_predictions(rows: list[dict], unmatched: list[str], out: str | Path) -> None:
    print("\n".join(prediction_lines(rows, unmatched)))
    if rows:
        atomic_write_text(out, pd.DataFrame(rows, columns=PREDICTED_COLUMNS).to_csv(index=False))
        print(f"wrote {out}")


def write_comparison(path_a: str | Path, path_b: str | Path | None, out: str | Path,
                     predicted_out: str | Path = "predicted.csv") -> list[dict]:
    """Compare, write the CSV, print the table; then predicted against measured wherever a side holds a replay and
    a side its drafter's own cell (written to predicted_out). One study (path_b None): that table alone."""
    if path_b is None:
        side = side_of(path_a)
        rows, unmatched = predictions(("", side))
        if not rows:
            raise ConfigError(f"compare: {path_a} has no replay cell (sweep.set_acceptance rates, e.g. "
                              "[{rates_from: <server cell>}]) beside a measured cell of the same drafter at its grid "
                              "point" + (f" ({unmatched[0]})" if unmatched else "") + ": run the replay in the "
                              "drafter's study, or give two studies")
        print(f"study = {path_a}")
        write_predictions(rows, unmatched, predicted_out)
        return rows
    side_a, side_b = side_of(path_a), side_of(path_b)
    predicted, unmatched = predictions(("A", side_a), ("B", side_b)) if side_a.kind == side_b.kind else ([], [])
    try:
        rows = compare(path_a, path_b, required=not predicted)
    except ConfigError as e:
        if not predicted:
            raise
        rows, refused = [], str(e)
    else:
        refused = None if rows else ("no cell of A matches one of B on (method, K, set acceptance, verification, K "
                                     "schedule, dataset, thinking, concurrency, ignore_eos, repeat)")
    print(f"A = {path_a}\nB = {path_b}\n(ratios B vs A above 1: B is faster; 95% CIs resample prompts and repeats)")
    if refused:      # e.g. a replay's baseline decodes to max_tokens and the other study's to the stop token
        print(f"no side-by-side table: {refused}")
    if rows:
        atomic_write_text(out, pd.DataFrame(rows).to_csv(index=False))
        print("\n".join(table_lines(rows)))
        print(f"wrote {out}")
    write_predictions(predicted, unmatched, predicted_out)
    return rows
