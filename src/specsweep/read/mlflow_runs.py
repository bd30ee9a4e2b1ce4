"""What a configuration's MLflow run holds, made without MLflow: `configuration_run(row, cells)` gives its name,
tags, params, metrics and artifacts (a `RunPayload`); tracking.ingest writes it to a store.

- name: what differs first, then the answer, then what a study mostly shares (run_name):
  `K=7 · c=4 · 1.16x [1.10, 1.22] faster · tiny · data=synthetic`, so that MLflow's runs table, which cuts a name
  after about 25 characters, shows the K, the concurrency and the speedup; `baseline · c=4 · tiny · data=synthetic`.
- tags: the summary row's columns that name a tag (table.Column.tag: the settings, the verdict, the reasons a
  figure is blank), each speedup with its CI as text (`speedup_e2e`: `1.18x [1.10, 1.27]`), the ids
  (`specsweep.server_cell`, `.bench_cells`, `.baseline_cell`), the K comparisons (`vs_K3`) and the server's
  versions over the repeats.
- params: the configuration's own resolved settings, one name per value, from its repeats' config.yaml: the
  server spec, the bench spec less the repeat, the pair's own keys (those the server spec does not hold), a
  replay's rates source. Not the study's job_config, and not the ids (tags). Two runs' differing params are
  what they differ in (K=3 and K=7: server_spec.num_speculative_tokens alone).
- metrics: every numeric figure of the row (table.metric_names: READ_FIRST's first, so the e2e speedup leads:
  MLflow 3.17's compare view plots the first metric the runs share), a list's entries as `<name>.<i>`, and each
  repeat's metrics.json figures under `repeat.`, step = the repeat index.
- artifacts: each repeat's files (layout.CELL_FILES) under `repeats/r<repeat>-<bench cell>`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from specsweep.core import registry, table
from specsweep.core.labels import SEP, bench, config_id, setting, several_output_lengths
from specsweep.core.nested import flatten
from specsweep.grid.cells import AA, stable_hash
from specsweep.read.study import Cell
from specsweep.verdicts.stats import format_ratio

REPEAT = "repeat."                        # prefix of the per-repeat metrics, logged with step = repeat index
TIMES = ("started_at", "finished_at")     # in metrics.json: wall-clock seconds, never logged as metrics
TAG_LIMIT = 5000                          # the longest tag value logged (a reason, an evidence)


@dataclass
class RunPayload:
    """One configuration's run. metrics: (key, value, timestamp ms, step); artifacts: (file, artifact folder)."""
    config_id: str
    name: str
    tags: dict[str, str]
    params: dict[str, str]
    metrics: list[tuple[str, float, int, int]]
    artifacts: list[tuple[Path, str]]
    start_ms: int | None
    end_ms: int | None
    dataset: dict | None = None          # the first repeat's bench_spec.dataset: the run's dataset input
    digest: str = field(default="")      # of everything above but the dataset: a re-ingest of the same adds nothing


def _tag_text(value, column: table.Column) -> str:
    if column.encoding == table.BOOL:
        return str(bool(value)).lower()
    if column.encoding == table.JSON:
        return json.dumps(value)
    return str(value)[:TAG_LIMIT]


def row_tags(row: dict) -> dict[str, str]:
    """The configuration's settings and its verdict over repeats as tags: each tagged column (table.Column.tag)
    where it is not blank, and each speedup with its CI as text (none for a baseline)."""
    cols = table.columns(table.SUMMARY)
    tags = {c.tag: _tag_text(row[n], c) for n, c in cols.items()
            if c.tag and n == c.name and not table.blank(row.get(n)) and row.get(n) != ""}
    if row.get("method") != "none" or row.get("pair") == AA:      # an A/A cell has a speedup, a baseline none
        for name, (point, low, high) in table.SPEEDUPS.items():
            if table.value(row, point) is not None:
                tags[table.SPEEDUP_TAGS[name]] = format_ratio(row[point], table.value(row, low),
                                                              table.value(row, high))
    return tags


def row_metrics(row: dict) -> dict[str, float]:
    """Every numeric figure of a summary row (blank ones skipped), the e2e speedup first; a list's numbers as
    `<name>.<i>`."""
    out = {}
    for name in table.metric_names():
        v = row.get(name)
        if isinstance(v, list):
            out.update({f"{name}.{i}": float(x) for i, x in enumerate(v)
                        if isinstance(x, (int, float)) and not isinstance(x, bool)})
        elif not table.blank(v):
            out[name] = float(v)
    return out


def settings(config: dict) -> dict:
    """A repeat's config.yaml as the configuration's settings, flat, one name per value: the server spec, the
    bench spec less the repeat, the pair's keys the server spec does not hold, a replay's rates source."""
    spec = config["server_spec"]
    own = {"server_spec": spec,
           "bench_spec": {k: v for k, v in config["bench_spec"].items() if k != "repeat"},
           "pair": {k: v for k, v in (config.get("pair") or {}).items() if k not in spec or spec[k] != v}}
    if config.get("set_acceptance_source"):
        own["set_acceptance_source"] = config["set_acceptance_source"]
    return flatten(own, split_lists=True)


def run_params(cells: list[Cell]) -> dict[str, str]:
    """The settings every repeat shares (MLflow's params: 250-character names, 6000-character values)."""
    configs = [settings(c.config) for c in cells]
    common = {k: v for k, v in (configs[0] if configs else {}).items() if all(c.get(k) == v for c in configs[1:])}
    return {k[:250]: str(v)[:6000] for k, v in common.items()}


def server_versions(row: dict, repeats: list[dict]) -> dict[str, str]:
    """The server's versions over a configuration's repeats (their metrics.json), as its backend names them
    (VERSION_FIELDS, e.g. vllm_version), each tagged where a repeat recorded it."""
    fields = registry.get(row["backend"]).VERSION_FIELDS if row.get("backend") in registry.names() else ()
    found = {key: sorted({str(m[key]) for m in repeats if m.get(key)}) for key in fields}
    return {key: " ".join(values) for key, values in found.items() if values}


def answer(row: dict) -> str:
    """The e2e speedup with its CI and the verdict, `1.16x [1.10, 1.22] faster`; '' for a row without a speedup
    (a baseline)."""
    point, low, high = table.SPEEDUPS["e2e"]
    if table.value(row, point) is None:
        return ""
    verdict = row.get("verdict")
    text = format_ratio(row[point], table.value(row, low), table.value(row, high))
    return text + (f" {verdict}" if verdict and not table.blank(verdict) else "")


def run_name(row: dict, pair: str | None = None) -> str:
    """A configuration's run name: the settings that differ within a study first (`K=7`, its method where not
    DFlash, a set acceptance, the verification; `baseline`, `A/A baseline`), then `think` and the concurrency,
    then the answer (answer), then the pair and the data. `pair` names a baseline by the pairs it is the baseline
    of."""
    aa = row.get("pair") == AA
    lead = setting(row, method=row.get("method") not in ("dflash", "none"))
    if aa:
        lead = ["A/A baseline"]
    backend = row.get("backend")
    if backend in registry.names() and registry.get(backend).ID_TAG:
        lead.append(backend)
    data, *rest = bench(row)                    # data=..., [think], c=N
    parts = [*lead, *rest, answer(row), pair or ("" if aa else row.get("pair")), data]
    return SEP.join(p for p in parts if p)


def _numeric(d: dict) -> dict[str, float]:
    return {k: float(v) for k, v in flatten(d, split_lists=True).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and k not in TIMES}


def k_tags(k_rows: list[dict]) -> dict[str, dict[str, str]]:
    """Per configuration id, its K comparisons against each smaller K (typed k_comparison.csv rows' statements),
    as tags `vs_K3`: `1.28x [1.26, 1.30] K=7 faster`."""
    out: dict[str, dict[str, str]] = {}
    lengths = several_output_lengths(k_rows)
    for row in k_rows:
        statement = row.get("statement") or ""
        if row.get("server_cell_a") and ": " in statement:
            key = config_id({**row, "server_cell": row["server_cell_a"]}, lengths)
            out.setdefault(key, {})[f"vs_K{row.get('k_b')}"] = statement.split(": ", 1)[1]
    return out


def configuration_run(row: dict, cells: list[Cell], pair: str | None = None,
                      vs: dict[str, str] | None = None, lengths: bool = False, eos: bool = False) -> RunPayload:
    """A typed summary row (table.read) and its repeats' finished cells, in repeat order, as one run. `pair` names
    a baseline by the pairs it is the baseline of; `vs` are its K comparison tags (k_tags)."""
    cells = sorted(cells, key=lambda c: int(c.bench["repeat"]))
    steps = [int(c.bench["repeat"]) for c in cells]
    times = [c.times_ms() for c in cells]
    start, end = min((t[0] for t in times), default=None), max((t[1] for t in times), default=None)
    tags = {**row_tags(row), **(vs or {}), **server_versions(row, [c.metrics for c in cells])}
    base = cells[0].metrics.get("baseline_cell") if cells else None
    if base and base != row["server_cell"]:
        tags["specsweep.baseline_cell"] = base
    metrics = [(k, v, end or 0, 0) for k, v in row_metrics(row).items()]
    for c, step, (_, finished) in zip(cells, steps, times):
        values = {**_numeric(c.metrics), "valid": float(c.valid)}
        metrics += [(REPEAT + k, v, finished, step) for k, v in values.items()]
    artifacts = [(f, f"repeats/r{step}-{c.bench_cell}") for c, step in zip(cells, steps) for f in c.files()]
    run = RunPayload(config_id(row, lengths, eos), run_name(row, pair), tags, run_params(cells), metrics, artifacts, start, end,
                     cells[0].bench["dataset"] if cells else None)
    run.digest = stable_hash([run.name, run.tags, run.params, run.metrics, [(f.name, a) for f, a in artifacts],
                              start, end])[:16]
    return run
