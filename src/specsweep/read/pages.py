"""The HTML pages a study's Snakemake report shows besides its plots: the summary table, the env check, each
server cell's launch record and the tiny pair's training figures. The report renders images, HTML and PDF
in place and offers any other file as a download, so the CSV and JSON records are shown through these."""
from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from specsweep.core import labels, layout
from specsweep.core.nested import flatten
from specsweep.core.results import atomic_write_text, read_json
from specsweep.core.table import K_COMPARISON, K_READ_FIRST, READ_FIRST, frame
from specsweep.read.study import Study

STYLE = """<style>
body { font-family: sans-serif; font-size: 13px; margin: 1em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; position: sticky; top: 0; }
code, pre { font-size: 12px; white-space: pre-wrap; word-break: break-all; }
</style>"""


# Which TPOT is which (issue #30, docs/timing.md): the note under the first table, whose server-timed columns
# (table.READ_FIRST) sit beside the client's streamed ones
TIMING_NOTE = ("<p><b>Which TPOT is which.</b> <code>server_*</code> columns are timed by the server itself "
               "(vLLM's engine core with --enable-per-request-metrics, or the local engine's own steps); "
               "<code>streamed_*</code> columns by the client, from when each chunk arrived. "
               "<code>tpot_source</code> says which TPOT a row has (server where the server's timing holds); a "
               "blank figure has its reason beside it (<code>server_figures_invalid</code>, "
               "<code>streamed_figures_invalid</code>, <code>speedup_*_tpot_na</code>). "
               "<code>bursts_after_server</code>: streams the server produced smoothly and that arrived in a burst "
               "(held back after the engine: its HTTP front end, the client, or the shared box); "
               "<code>bursts_in_server</code>: produced in a burst by the server. See docs/timing.md.</p>")


# Answers and streams (issue #30, docs/timing.md#answers-and-streams): the note beside TIMING_NOTE
QUALITY_NOTE = ("<p><b>Answers and streams.</b> <code>verdict</code> is <code>degenerate</code>, with "
                "<code>verdict_reason</code>, where more than 10% of either side's answers repeat themselves (half "
                "or more of an answer repeats an earlier 16-character n-gram): a speedup on such text says nothing "
                "of the drafter. At concurrency above 1, <code>decode_tok_s_*</code> is the spread of the streams' "
                "decode rates (<code>decode_tok_s_min_over_max</code>: 1 is even), <code>starved_streams</code> "
                "counts streams below a quarter of the median rate per verify step, and "
                "<code>steady_output_tok_s</code> is the output tok/s while every stream was decoding "
                "(<code>steady_window_s</code> long), beside the whole run's <code>output_tok_s</code>; blank with "
                "<code>steady_na</code> where the window is empty, too short or the streams bursty.</p>")


def page(title: str, *sections: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>{STYLE}"
            f"</head><body><h2>{html.escape(title)}</h2>{''.join(sections)}</body></html>")


def table(frame: pd.DataFrame, caption: str = "") -> str:
    head = f"<h3>{html.escape(caption)}</h3>" if caption else ""
    return head + frame.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}", border=0)


def key_values(record: dict, caption: str = "") -> str:
    """A nested record as one two-column table of its flattened keys."""
    rows = [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in flatten(record, split_lists=True).items()]
    return table(pd.DataFrame(rows, columns=["key", "value"]), caption)


def summary_page(summary_csv: str | Path, k_comparison_csv: str | Path, out: str | Path) -> None:
    """The summary, one row per cell: first each configuration's label and the figures to read first
    (table.READ_FIRST: the verdict's figure first, the paired streamed TPOT beside it, blank where the streams
    failed their check with the reason beside it, the server's own TPOT beside the client's (TIMING_NOTE), any
    disagreement between a row's figures, the diagnosis), then the whole table; then the K-against-K statements."""
    summary = frame(summary_csv)
    first = summary[[c for c in READ_FIRST if c in summary]].copy()
    first.insert(0, "configuration", [labels.label(r) for _, r in summary.iterrows()])
    sections = [table(first, "The figures to read first"), TIMING_NOTE, QUALITY_NOTE,
                table(summary, f"{layout.SUMMARY}: one row per cell over its repeats")]
    if not (k := frame(k_comparison_csv, K_COMPARISON)).empty:
        sections.append(table(k[[c for c in K_READ_FIRST if c in k]], "K against K"))
    atomic_write_text(out, page("Summary", *sections))


def env_page(env_json: str | Path, out: str | Path) -> None:
    atomic_write_text(out, page(f"Environment check ({layout.ENV})", key_values(read_json(env_json))))


# A launch's start-up in its server.json: its wall, how many members started beside it, its phases (vLLM's own log:
# backends/vllm/startlog.py) and whether its compiled graphs came from the host's compile cache
STARTUP = ("ready_s", "start_at_once", "compile_cache", "before_engine_s", "model_load_s", "torch_compile_s",
           "graph_capture_s", "profile_kv_s")


def launch_page(study: Study, sid: str, out: str | Path) -> None:
    """A server cell's launch records (server.json, one per launch: argv, PID, process group, versions, residency)
    and its bench cells. The local engine backend starts no server, so its cells have none."""
    records = study.launches(sid) or [{"server": "none: the local engine ran inside the job"}]
    starts = [{"launch": i, **{k: r.get(k) for k in STARTUP}} for i, r in enumerate(records, 1) if "ready_s" in r]
    sections = [table(pd.DataFrame(starts), "Where each start-up went (seconds, from the server's own log)")] \
        if starts else []
    for i, record in enumerate(records, 1):
        argv = " ".join(record.get("argv") or [])
        sections += [f"<h3>launch {i} of {len(records)}: argv</h3><pre>{html.escape(argv)}</pre>",
                     key_values({k: v for k, v in record.items() if k != "argv"}, f"launch record {i}")]
    cells = []
    for bid in study.grid.benches[sid]:
        m = study.metrics(sid, bid) or {}
        cells.append({"bench cell": bid, "valid": m.get("valid"), "requests": m.get("requests_completed"),
                      "output tok/s": m.get("output_tok_s"), "residency": m.get("residency"),
                      "server log": m.get("server_log")})
    atomic_write_text(out, page(f"Server cell {sid}", *sections, table(pd.DataFrame(cells), "bench cells"),
                                diagnosis_section(study.diagnosis(sid))))


def diagnosis_section(record: dict | None) -> str:
    """A server cell's low-acceptance diagnosis (diagnosis.json): per diagnosed bench group, the diagnosis and
    each cause in order with its status and evidence (a counterfactual cell's figures only where it was valid)."""
    if not record or not record.get("needed"):
        return ""
    sections = []
    for g in record["groups"]:
        if not g.get("needed"):
            continue
        rows = [{"cause": c["label"], "status": c["status"], "evidence": c["evidence"],
                 "counterfactual cells": " ".join(t["server_cell"] for t in c.get("counterfactuals", []))}
                for c in g["causes"]]
        head = (f"Low acceptance: {g['dataset']}, thinking {g['thinking']}, concurrency {g['concurrency']}: AL "
                f"{g['mean_acceptance_length']:.3g} < {record['below_al']:g}: diagnosis {g['diagnosis']}")
        sections.append(table(pd.DataFrame(rows), head))
    return "".join(sections)


def training_page(reports: dict[str, str], out: str) -> None:
    """The tiny pair's training records (losses, held-out accuracy and acceptance, times)."""
    atomic_write_text(out, page("Tiny pair: training", *(key_values(read_json(p), f"{name}: {p}")
                                                          for name, p in reports.items())))


def write_pages(study: Study, summary_csv: str | Path, k_comparison_csv: str | Path, env_json: str | Path,
                out: dict) -> None:
    """Every page of one study: out names the summary and env pages and the launches directory."""
    summary_page(summary_csv, k_comparison_csv, out["summary"])
    env_page(env_json, out["env"])
    Path(out["launches"]).mkdir(parents=True, exist_ok=True)
    for sid in study.grid.servers:
        launch_page(study, sid, layout.launch_page(out["launches"], sid))
