"""The study's tables as data: every column of summary.csv, k_comparison.csv and summary_by_category.csv, with
its kind, source, unit, direction and encoding; the one writer and the one typed reader of those files.

summary.write_summary writes the tables through `write`; the plots, the pages and MLflow (tracking) read them
through `read` (rows as dicts) or `frame` (a DataFrame), and summary.rows' own rows are typed the same way (the
ceiling, the diagnosis, labels.py): numbers are numbers, a blank is None, a JSON column (a list, a schedule) is its
value. Nothing else decodes a column or parses a number out of one.

A column is one `Column` entry in its table's tuple, in file order (summary.csv: its ANSWER first):

    Column("server_ttft_ms", FIGURE, ("server_timing", "ttft_ms"), unit="ms", better=LOWER, median=True)

- kind: ID (which row), SETTING (what ran), FIGURE (a measured number), VERDICT (the paired speedup, its CI and
  verdict), LABEL (text for a reader) or DIAGNOSIS (why a figure is missing, suspect or low).
- source: for a FIGURE with `median=True`, its key path in metrics.json: the summary takes the median over the
  valid repeats and writes `<name>_mad` beside it (one entry, two columns; summary.rows computes every such
  column from this tuple, so adding a metrics.json figure to the summary is this one entry). Other columns
  name where their value comes from, in words.
- unit, better (HIGHER, LOWER or None): what the number is and which way is good.
- encoding: TEXT, INT, FLOAT, BOOL or JSON (a list or a schedule, written as JSON).
- streamed=True: a median figure blanked where a repeat's streams fail their check; blank_when: the row's
  diagnosis columns any of whose reasons blanks it too (the server-timed figures: docs/timing.md).

Adding a column: one entry here, at its place in the file; the row that summary.rows (or k_comparison,
category_rows) builds must carry it, or `write` refuses the table. MLflow logs every numeric FIGURE and VERDICT
column as a metric (a JSON list of numbers as `<name>.<i>`), and a column with `tag=` as that tag. A column to
read first (the pages' first table, MLflow's first metrics) is also named in READ_FIRST (docs/table.md).
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

from specsweep.core import layout
from specsweep.core.errors import ConfigError
from specsweep.core.results import atomic_write_json, atomic_write_text

ID, SETTING, FIGURE, VERDICT, LABEL, DIAGNOSIS = "id", "setting", "figure", "verdict", "label", "diagnosis"  # kinds
TEXT, INT, FLOAT, BOOL, JSON = "text", "int", "float", "bool", "json"        # encodings
HIGHER, LOWER = "higher", "lower"
MAD = "_mad"


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    source: str | tuple[str, ...] = ""      # a key path in metrics.json (median=True), else where it comes from
    unit: str = ""
    better: str | None = None               # HIGHER, LOWER or None
    encoding: str = FLOAT
    median: bool = False                    # the median over valid repeats, with `<name>_mad` beside it
    streamed: bool = False                  # blank where a repeat's streams fail their check
    tag: str | None = None                  # the MLflow tag it is, on a configuration's run
    blank_when: tuple[str, ...] = ()        # a median figure: blank where any of these row columns holds a reason

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, self.name + MAD) if self.median else (self.name,)

    @property
    def reasons(self) -> tuple[str, ...]:
        """The row's columns whose reason blanks this median figure (streamed: streamed_figures_invalid)."""
        return (("streamed_figures_invalid",) if self.streamed else ()) + self.blank_when


def _median(name, path, unit, better, streamed=False, blank_when=()) -> Column:
    return Column(name, FIGURE, path, unit, better, median=True, streamed=streamed, blank_when=tuple(blank_when))


def _speedup(stem: str, source: str) -> tuple[Column, ...]:
    """A speedup (baseline / cell, or B / A) and its 95% CI: point, ci_low, ci_high."""
    point = "speedup_output_tok_s" if stem == "output_tok_s" else f"speedup_{stem}_geomean"
    return tuple(Column(n, VERDICT, source, "x", HIGHER) for n in
                 (point, f"speedup_{stem}_ci_low", f"speedup_{stem}_ci_high"))


PAIRED_SOURCE = "paired bootstrap over prompts and repeats (stats.paired_speedup)"
# what stats.paired_speedup returns, in its order: the summary's, the K comparison's and the categories' columns
PAIRED = (*_speedup("e2e", PAIRED_SOURCE), *_speedup("streamed_tpot", PAIRED_SOURCE),
          Column("speedup_streamed_tpot_na", DIAGNOSIS, "the first repeat whose streams fail their check",
                 encoding=TEXT, tag="speedup_streamed_tpot_na"),
          # issue #30: the paired TPOT speedup by the server's own timing (docs/timing.md)
          *_speedup("server_tpot", PAIRED_SOURCE),
          Column("speedup_server_tpot_na", DIAGNOSIS, "the first repeat whose server timing fails its check "
                 "(metrics.server_invalid)", encoding=TEXT, tag="speedup_server_tpot_na"),
          Column("paired_prompts", VERDICT, PAIRED_SOURCE, "prompts", encoding=INT),
          Column("paired_requests", VERDICT, PAIRED_SOURCE, "requests", encoding=INT),
          Column("verdict", VERDICT, "the e2e speedup's interval (stats.verdict): faster, slower, equivalent within ±δ, "
                 "unresolved; `degenerate` where either side's answers degenerate", encoding=TEXT, tag="verdict"),
          Column("verdict_reason", DIAGNOSIS, "why the verdict is `degenerate`: the first repeat of either side whose "
                 "answers degenerate (stats.degenerate_na)", encoding=TEXT, tag="verdict_reason"))
SEQUENCE = (Column("looks", VERDICT, "looks.sequence_columns (issue 46): looks at its verdict", "looks", encoding=INT),
            Column("stopped", VERDICT, "fixed, answered at repeat r, budget, time", encoding=TEXT, tag="stopped"),
            Column("answered_repeat", VERDICT, "issue 54: the repeat an `auto` comparison was answered at", "", LOWER, INT),
            Column("answered_s", VERDICT, "issue 54: looks.json's s from the group's first turn to that look", "s", LOWER),
            Column("launch_sd", VERDICT, "the launch SD (log) its e2e interval carries (sweep.launch_sd)", ""),
            Column("launch_sd_launches", VERDICT, "the recorded launches it came from", "launches", encoding=INT))

# issue #31 (docs/axes.md): the length axes, and acceptance by phase (phases.py: a thinking answer's verify steps
# split at its </think>, pooled over the row's requests, 95% bootstrap CI over requests)
LENGTHS = (Column("max_tokens", SETTING, "bench_spec.max_tokens (sweep.max_tokens, an axis)", "tokens", encoding=INT,
                  tag="max_tokens"),
           Column("prompt_length", SETTING, "bench_spec.prompt_length (sweep.prompt_length; blank: the dataset's own)",
                  "tokens", encoding=INT, tag="prompt_length"),
           Column("ignore_eos", SETTING, "bench_spec.ignore_eos: each request decodes exactly max_tokens "
                  "(sweep.ignore_eos, or a set acceptance's; a set-acceptance study's baseline has a row of each)",
                  encoding=BOOL, tag="ignore_eos"))


def _phase(phase: str) -> tuple[Column, ...]:
    span = f"the {'thinking' if phase == 'think' else 'answer'} span (phases.py)"
    return (Column(f"{phase}_acceptance_length", FIGURE, f"pooled acceptance length in {span}", "tokens", HIGHER),
            Column(f"{phase}_acceptance_length_ci_low", FIGURE, "its 95% bootstrap CI over requests", "tokens"),
            Column(f"{phase}_acceptance_length_ci_high", FIGURE, "its 95% bootstrap CI over requests", "tokens"),
            Column(f"{phase}_acceptance_rate", FIGURE, f"accepted / drafted tokens in {span}", "", HIGHER),
            Column(f"{phase}_per_position_acceptance", FIGURE, f"per position 1..K, in {span}", better=HIGHER,
                   encoding=JSON),
            Column(f"{phase}_token_share", FIGURE, f"the share of output tokens in {span}", ""))


AXES = (*LENGTHS,
        Column("prompt_tokens_mean", FIGURE, "prompt tokens per request as the server counts them (template "
               "included), the median over valid repeats", "tokens"),
        Column("phase_split_na", DIAGNOSIS, "why the phase columns are blank (phases.py)", encoding=TEXT,
               tag="phase_split_na"),
        Column("phase_requests", FIGURE, "the requests split by phase", "requests", encoding=INT),
        *_phase("think"), *_phase("answer"))

# issue #30 (docs/timing.md): measured by the server itself (vLLM's --enable-per-request-metrics, the local
# engine's steps, SGLang's meta_info), beside the client's streamed figures; per repeat metrics.timing_figures
TIMING = (
    Column("server_figures_invalid", DIAGNOSIS, "the first valid repeat's server_figures_invalid (or: no valid "
           "repeat; a repeat recorded before server timing was)", encoding=TEXT,
           tag="server_figures_invalid"),
    Column("server_itl_na", DIAGNOSIS, "the first valid repeat's server_itl_na: why the ITL is blank", encoding=TEXT),
    _median("server_tpot_ms", ("server_tpot_ms", "mean"), "ms", LOWER, blank_when=("server_figures_invalid",)),
    _median("server_itl_ms_median", ("server_itl_ms", "median"), "ms", LOWER,
            blank_when=("server_figures_invalid", "server_itl_na")),
    Column("tpot_source", LABEL, "which TPOT the row has: server where the server's holds in every valid repeat, "
           "else client stream where the streamed one does", encoding=TEXT, tag="tpot_source"),
    Column("server_timing_clock", LABEL, "the first valid repeat's server_timing_clock: whose clock timed it",
           encoding=TEXT),
    Column("bursts_in_server", FIGURE, "each repeat's bursts_in_server, summed: streams the server produced in a "
           "burst", "streams", LOWER, INT),
    Column("bursts_after_server", FIGURE, "each repeat's bursts_after_server, summed: streams produced smoothly "
           "that arrived in a burst", "streams", LOWER, INT),
    Column("bursts_unattributed", FIGURE, "each repeat's bursts_unattributed, summed: bursty streams without the "
           "server's timing", "streams", LOWER, INT),
    Column("tpot_client_over_server", FIGURE, "the client's streamed TPOT over the server's, the median over valid "
           "repeats of each repeat's", "x"),
    Column("tpot_sources_disagree", DIAGNOSIS, "the first valid repeat whose two TPOTs disagree beyond the "
           "tolerance (metrics.tpot_agreement)", encoding=TEXT, tag="tpot_sources_disagree"),
)

# issue #30 (docs/timing.md#answers-and-streams): degenerate answers, the spread of the streams' decode rates and
# throughput at full load; per repeat metrics.quality_figures. The reasons come first: they blank the medians.
QUALITY = (
    Column("answers_degenerate", DIAGNOSIS, "the first valid repeat's answers_degenerate: more than "
           "metrics.DEGENERATE_SHARE of its answers degenerate", encoding=TEXT, tag="answers_degenerate"),
    Column("answers_na", DIAGNOSIS, "the first valid repeat's answers_na: why its answers were not judged (random "
           "weights, a set acceptance: cells.answers_not_judged)", encoding=TEXT),
    Column("degenerate_answers", FIGURE, "each repeat's degenerate_answers, summed: answers of repetition at least "
           "metrics.DEGENERATE_REPETITION", "answers", LOWER, INT),
    _median("degenerate_share", ("degenerate_share",), "", LOWER, blank_when=("answers_na",)),
    _median("repetition_median", ("repetition", "median"), "", LOWER, blank_when=("answers_na",)),
    Column("stream_spread_na", DIAGNOSIS, "the first valid repeat's stream_spread_na: why the decode-rate spread "
           "is blank", encoding=TEXT),
    Column("decode_tok_s_source", LABEL, "the first valid repeat's decode_tok_s_source: whose TPOT the rates are "
           "from", encoding=TEXT),
    _median("decode_tok_s_p10", ("decode_tok_s", "p10"), "tok/s", HIGHER, blank_when=("stream_spread_na",)),
    _median("decode_tok_s_p50", ("decode_tok_s", "p50"), "tok/s", HIGHER, blank_when=("stream_spread_na",)),
    _median("decode_tok_s_p90", ("decode_tok_s", "p90"), "tok/s", HIGHER, blank_when=("stream_spread_na",)),
    _median("decode_tok_s_min_over_max", ("decode_tok_s", "min_over_max"), "", HIGHER,
            blank_when=("stream_spread_na",)),
    Column("starved_streams", FIGURE, "each repeat's starved_streams, summed (metrics.STARVED_SHARE)", "streams",
           LOWER, INT),
    Column("stream_starvation", DIAGNOSIS, "the first valid repeat's stream_starvation: a stream starved",
           encoding=TEXT, tag="stream_starvation"),
    Column("steady_na", DIAGNOSIS, "the first valid repeat's steady_na: why the steady-state throughput is blank",
           encoding=TEXT, tag="steady_na"),
    Column("steady_clock", LABEL, "the first valid repeat's steady_clock: whose clock set the window", encoding=TEXT),
    _median("steady_output_tok_s", ("steady_output_tok_s",), "tok/s", HIGHER, blank_when=("steady_na",)),
    _median("steady_window_s", ("steady_window_s",), "s", None, blank_when=("steady_na",)),
)

# issue #30 item 8 (docs/methods.md#a-set-acceptance-asked-and-realised): a set-acceptance cell's length as asked,
# as its steps should give it, and as it came out, pooled over its valid repeats (metrics.set_acceptance_check);
# blank for a cell whose acceptance is real
SET_ACCEPTANCE = (
    Column("set_acceptance_length", FIGURE, "1 + the sum of the set rates (metrics.set_acceptance_rates): the AL asked "
           "for where every step offers K drafts", "tokens"),
    Column("expected_acceptance_length", FIGURE, "what the set rates give on the cell's own steps (a step cut short at "
           "the budget edge offers fewer drafts), pooled over valid repeats (metrics.set_acceptance_check)", "tokens"),
    Column("acceptance_gap", FIGURE, "pooled realised AL - expected_acceptance_length", "tokens"),
    Column("acceptance_gap_z", FIGURE, "the gap in accepted drafts over its binomial standard deviation, steps "
           "independent (metrics.set_acceptance_check)", ""),
    Column("set_acceptance_gap", DIAGNOSIS, "why the realised AL is not the expected one: |acceptance_gap_z| > "
           "metrics.SET_ACCEPTANCE_Z (3), or why the expectation is blank", encoding=TEXT, tag="set_acceptance_gap"),
)

_SUMMARY = (      # in the order of where each comes from; SUMMARY below puts the answer first
    Column("study", ID, "the grid", encoding=TEXT),
    Column("server_cell", ID, "the grid (cells.Grid)", encoding=TEXT, tag="specsweep.server_cell"),
    Column("backend", SETTING, "server_spec.server.backend", encoding=TEXT, tag="backend"),
    Column("pair", SETTING, "the pair's name", encoding=TEXT, tag="pair"),
    Column("method", SETTING, "server_spec.method", encoding=TEXT, tag="method"),
    Column("num_speculative_tokens", SETTING, "server_spec.num_speculative_tokens", "tokens", encoding=INT, tag="K"),
    Column("set_acceptance", SETTING, "server_spec.set_acceptance: a length or per-position rates", encoding=JSON,
           tag="set_acceptance"),
    Column("verification", SETTING, "server_spec.verification (blank for a baseline)", encoding=TEXT,
           tag="verification"),
    Column("k_schedule", SETTING, "server_spec.k_schedule: [[from, to, K], ...]", encoding=JSON, tag="k_schedule"),
    Column("prefix_caching", SETTING, "server_spec.server.prefix_caching (vLLM's; blank where the backend has no "
           "such key)", encoding=BOOL, tag="prefix_caching"),
    Column("dataset", SETTING, "bench_spec.dataset.name", encoding=TEXT, tag="dataset"),
    Column("thinking", SETTING, "bench_spec.thinking", encoding=BOOL, tag="thinking"),
    Column("concurrency", SETTING, "bench_spec.concurrency", "requests", encoding=INT, tag="concurrency"),
    Column("repeats", FIGURE, "the finished repeats", "repeats", encoding=INT, tag="repeats"),
    Column("valid_repeats", FIGURE, "the repeats whose figures are valid", "repeats", encoding=INT),
    Column("valid", FIGURE, "at least one valid repeat", encoding=BOOL, tag="valid"),
    Column("bench_cells", ID, "the repeats' bench cell ids, space-separated", encoding=TEXT,
           tag="specsweep.bench_cells"),
    Column("residency", SETTING, "how the repeats' servers were kept (each repeat's residency figure, residency.py): "
           "coresident, sleep or relaunch, space-separated where they differ", encoding=TEXT, tag="residency"),
    Column("launches", FIGURE, "the server cell's launches (its launch records, one per launch)", "launches",
           encoding=INT),
    Column("bursty_streams", FIGURE, "each repeat's bursty_streams, summed", "streams", LOWER, INT),
    Column("streamed_figures_invalid", DIAGNOSIS, "the first valid repeat's streamed_figures_invalid",
           encoding=TEXT, tag="streamed_figures_invalid"),
    _median("output_tok_s", ("output_tok_s",), "tok/s", HIGHER),
    _median("request_throughput", ("request_throughput",), "req/s", HIGHER),
    _median("streamed_tpot_ms", ("streamed_tpot_ms", "mean"), "ms", LOWER, streamed=True),
    _median("streamed_itl_ms_median", ("streamed_itl_ms", "median"), "ms", LOWER, streamed=True),
    _median("ttft_ms_median", ("ttft_ms", "median"), "ms", LOWER),
    _median("e2e_ms_median", ("e2e_ms", "median"), "ms", LOWER),
    _median("e2e_ms_per_output_token", ("e2e_ms_per_output_token",), "ms", LOWER),
    _median("mean_acceptance_length", ("spec_decode", "mean_acceptance_length"), "tokens", HIGHER),
    _median("acceptance_rate", ("spec_decode", "acceptance_rate"), "", HIGHER),
    _median("greedy_agreement", ("greedy_agreement",), "", HIGHER),
    Column("greedy_agreement_na", DIAGNOSIS, "the first repeat's greedy_agreement_na: why it is blank", encoding=TEXT),
    _median("greedy_divergence_margin", ("greedy_divergence_margin",), "nats", LOWER),     # sweep.divergence
    Column("repeat_agreement", FIGURE, "the later valid repeats' share of texts equal to the first's, per prompt and "
           "turn (metrics.repeat_agreement): one server across its wakes or launches", "", HIGHER),
    Column("repeat_agreement_na", DIAGNOSIS, "why repeat_agreement is blank", encoding=TEXT, tag="repeat_agreement_na"),
    _median("error_rate", ("error_rate",), "", LOWER),
    *TIMING,
    *QUALITY,
    *_speedup("output_tok_s", "ratio of the medians over repeats, CI by bootstrap (stats.ratio_of_medians)"),
    *PAIRED, *SEQUENCE,
    Column("aa_check", DIAGNOSIS, "summary.aa_warning: an A/A cell (sweep.aa) is faster or slower", encoding=TEXT,
           tag="aa_check"),
    Column("figures_disagree", DIAGNOSIS, "summary.disagreements", encoding=TEXT, tag="figures_disagree"),
    Column("per_position_acceptance", FIGURE, "per position, the median over repeats of spec_decode's",
           better=HIGHER, encoding=JSON),
    Column("acceptance_length_shares", FIGURE, "the share of steps of each acceptance length, from the above",
           encoding=JSON),
    Column("ceiling_points", FIGURE, "ceiling.py: the set-acceptance curve's [AL, speedup, ci_low, ci_high]",
           encoding=JSON),
    Column("break_even_al", FIGURE, "ceiling.py: the AL at which the curve reaches 1x", "tokens", LOWER),
    Column("al_for_1_5x", FIGURE, "ceiling.py: the AL at which the curve reaches 1.5x", "tokens", LOWER),
    Column("al_for_2x", FIGURE, "ceiling.py: the AL at which the curve reaches 2x", "tokens", LOWER),
    Column("break_even_al_low", FIGURE, "ceiling.py: the break-even from the CIs' upper bounds", "tokens", LOWER),
    Column("break_even_al_high", FIGURE, "ceiling.py: the break-even from the CIs' lower bounds", "tokens", LOWER),
    Column("ceiling_speedup_at_al", FIGURE, "ceiling.py: the curve's speedup at the drafter's own AL", "x", HIGHER),
    Column("ceiling_na", DIAGNOSIS, "ceiling.py: what the curve cannot say", encoding=TEXT),
    *(Column(n, FIGURE, "step_cost.py: a verify step's time over a baseline decode step (AL / server TPOT speedup)",
             "x", LOWER) for n in ("step_cost", "step_cost_ci_low", "step_cost_ci_high")),
    Column("diagnosis", DIAGNOSIS, "the server cell's diagnosis (counterfactuals.py): the cause of a low acceptance", encoding=TEXT, tag="diagnosis"),
    Column("diagnosis_evidence", DIAGNOSIS, "the diagnosis's evidence", encoding=TEXT, tag="diagnosis_evidence"),
    *AXES,
    *SET_ACCEPTANCE,
)
# issue 43: summary.csv opens at its answer: the configuration's label, its verdict, the e2e speedup with its CI
# and the acceptance length (with its MAD); every other column follows, in _SUMMARY's order
ANSWER = ("label", "verdict", "speedup_e2e_geomean", "speedup_e2e_ci_low", "speedup_e2e_ci_high",
          "mean_acceptance_length")
SUMMARY = (Column("label", LABEL, "labels.label: the configuration's label", encoding=TEXT),
           *(c for name in ANSWER for c in _SUMMARY if c.name == name), *(c for c in _SUMMARY if c.name not in ANSWER))

K_COMPARISON = (
    Column("study", ID, "the grid", encoding=TEXT),
    *(c for c in SUMMARY if c.name in ("pair", "method", "dataset", "thinking", "concurrency")),
    *LENGTHS,
    Column("k_a", SETTING, "the larger K", "tokens", encoding=INT),
    Column("k_b", SETTING, "the smaller K", "tokens", encoding=INT),
    Column("server_cell_a", ID, "the larger K's server cell", encoding=TEXT),
    Column("server_cell_b", ID, "the smaller K's server cell", encoding=TEXT),
    Column("repeats_a", FIGURE, "its valid repeats", "repeats", encoding=INT),
    Column("repeats_b", FIGURE, "its valid repeats", "repeats", encoding=INT),
    *PAIRED, *SEQUENCE,
    Column("schedule_a", LABEL, "the larger side's K schedule, as labels.k_label writes it", encoding=TEXT),
    Column("resolved", VERDICT, "answered: the verdict is faster, slower or equivalent (stats.answered)", encoding=BOOL),
    Column("statement", LABEL, "`K=7 vs K=3: 1.28x [1.26, 1.30] K=7 faster, answered at 64 s, repeat 10`", encoding=TEXT),
)

BY_CATEGORY = (
    *(c for c in SUMMARY if c.name in ("study", "server_cell", "pair", "method", "num_speculative_tokens", "dataset",
                                       "thinking", "concurrency")),
    *LENGTHS,
    Column("category", SETTING, "the prompt's category in the dataset", encoding=TEXT),
    Column("prompts", FIGURE, "the category's prompts", "prompts", encoding=INT),
    Column("mean_acceptance_length", FIGURE, "pooled over the category's requests", "tokens", HIGHER),
    *PAIRED,
)

# The figures to read first, in reading order: the pages' first table and the first metrics a configuration's MLflow
# run logs (MLflow's compare view plots the first metric two runs share), the verdict's figure first.
READ_FIRST = ("server_cell", "method", "num_speculative_tokens", "dataset", "thinking", "concurrency", "valid",
              "speedup_e2e_geomean", "speedup_e2e_ci_low", "speedup_e2e_ci_high", "verdict", "verdict_reason",
              "looks", "stopped", "answered_s", "answered_repeat", "aa_check", "degenerate_share", "answers_degenerate",
              "speedup_streamed_tpot_geomean", "speedup_streamed_tpot_ci_low", "speedup_streamed_tpot_ci_high",
              "speedup_streamed_tpot_na",
              # issue #30: which TPOT is which, the server's beside the client's (docs/timing.md)
              "tpot_source", "server_tpot_ms", "streamed_tpot_ms", "speedup_server_tpot_geomean",
              "speedup_server_tpot_ci_low", "speedup_server_tpot_ci_high", "speedup_server_tpot_na",
              "server_figures_invalid", "streamed_figures_invalid", "bursts_in_server", "bursts_after_server",
              "tpot_sources_disagree",
              "speedup_output_tok_s", "speedup_output_tok_s_ci_low", "speedup_output_tok_s_ci_high",
              "mean_acceptance_length", "step_cost", "step_cost_ci_low", "step_cost_ci_high",
              "set_acceptance_length", "expected_acceptance_length", "acceptance_gap", "set_acceptance_gap",  # #30.8
              "acceptance_rate", "output_tok_s",
              # issue #30: the streams at concurrency above 1 (docs/timing.md#answers-and-streams)
              "steady_output_tok_s", "steady_window_s", "steady_na", "decode_tok_s_p10", "decode_tok_s_p50",
              "decode_tok_s_p90", "decode_tok_s_min_over_max", "starved_streams", "stream_starvation",
              "figures_disagree", "diagnosis", "diagnosis_evidence",
              # issue #31: the length axes and acceptance by phase (docs/axes.md)
              "max_tokens", "prompt_length", "think_acceptance_length", "think_acceptance_length_ci_low",
              "think_acceptance_length_ci_high", "answer_acceptance_length", "answer_acceptance_length_ci_low",
              "answer_acceptance_length_ci_high", "think_token_share", "phase_split_na")
K_READ_FIRST = ("statement", "looks", "answered_s", "answered_repeat", "speedup_e2e_geomean", "speedup_e2e_ci_low",
                "speedup_e2e_ci_high", "verdict_reason", "speedup_streamed_tpot_geomean",
                "speedup_streamed_tpot_ci_low", "speedup_streamed_tpot_ci_high", "speedup_streamed_tpot_na",
                "speedup_server_tpot_geomean", "speedup_server_tpot_ci_low", "speedup_server_tpot_ci_high",
                "speedup_server_tpot_na", "paired_prompts", "server_cell_a", "server_cell_b")
# The speedups a summary row holds, each (point, ci_low, ci_high), by the name a reader knows it by, and its tag
SPEEDUPS = {"e2e": ("speedup_e2e_geomean", "speedup_e2e_ci_low", "speedup_e2e_ci_high"),
            "streamed TPOT": ("speedup_streamed_tpot_geomean", "speedup_streamed_tpot_ci_low",
                              "speedup_streamed_tpot_ci_high"),
            "server TPOT": ("speedup_server_tpot_geomean", "speedup_server_tpot_ci_low", "speedup_server_tpot_ci_high"),
            "output tok/s": ("speedup_output_tok_s", "speedup_output_tok_s_ci_low", "speedup_output_tok_s_ci_high")}
SPEEDUP_TAGS = {"e2e": "speedup_e2e", "streamed TPOT": "speedup_streamed_tpot", "server TPOT": "speedup_server_tpot",
                "output tok/s": "speedup_output_tok_s"}


def blank(value) -> bool:
    """None, or NaN (how a DataFrame holds a blank in a numeric column)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def value(row, column: str):
    """A typed row's value (a dict, a DataFrame row), None where it is blank or absent."""
    got = row.get(column)
    return None if blank(got) else got


def names(table: tuple[Column, ...]) -> list[str]:
    """The table's file columns, in order (a median figure and its `_mad`)."""
    return [n for c in table for n in c.names]


def columns(table: tuple[Column, ...]) -> dict[str, Column]:
    """File column -> its Column (a `_mad` column maps to its figure's)."""
    return {n: c for c in table for n in c.names}


def medians(table: tuple[Column, ...] = SUMMARY) -> list[Column]:
    """The figures the summary takes as medians over repeats from metrics.json (source: the key path)."""
    return [c for c in table if c.median]


def metric_names(table: tuple[Column, ...] = SUMMARY) -> list[str]:
    """The FIGURE and VERDICT columns that hold numbers or lists of them (MLflow's metrics), READ_FIRST's first,
    then in file order."""
    cols = columns(table)
    numeric = [n for n in names(table) if cols[n].kind in (FIGURE, VERDICT) and cols[n].encoding in (INT, FLOAT, JSON)]
    return [n for n in READ_FIRST if n in numeric] + [n for n in numeric if n not in READ_FIRST]


# ---- the writer ---------------------------------------------------------------------------------------------
def _encode(value, column: Column):
    return json.dumps(value) if column.encoding == JSON and value is not None else value


def write(table: tuple[Column, ...], rows: list[dict], path: str | Path, inputs: dict | None = None):
    """The rows as the table's CSV at `path` (JSON columns encoded), and the pandas DataFrame written. A row whose
    columns are not the table's is refused: a new column is declared in table.py (or derived_tables.py) first.
    `inputs`, a derived table's settings and input cells, goes beside it (layout.inputs_of) with its columns."""
    order, cols = names(table), columns(table)
    for row in rows:
        if set(row) != set(order):
            extra, missing = sorted(set(row) - set(order)), sorted(set(order) - set(row))
            raise ValueError(f"table: a row's columns are not the table's (undeclared {extra}, missing {missing}): "
                             "declare each column once in specsweep/core/table.py")
    import pandas as pd

    frame = pd.DataFrame([{n: _encode(row[n], cols[n]) for n in order} for row in rows], columns=order)
    whole = {n: "Int64" for n in order if cols[n].encoding == INT and frame[n].dtype.kind == "f"  # blanks made it
             and frame[n].dropna().map(float.is_integer).all()}                                  # float: "4", not "4.0"
    atomic_write_text(path, frame.astype(whole).to_csv(index=False))
    if inputs is not None:
        atomic_write_json(layout.inputs_of(path), {"table": Path(path).name, "columns": order, **inputs})
    return frame


# ---- the typed reader ---------------------------------------------------------------------------------------
def _decode(text: str, column: Column | None):
    if text == "":
        return None
    if column is None or column.encoding == TEXT:
        return text
    if column.encoding == BOOL:
        if text not in ("True", "False"):
            raise ValueError("not True or False")
        return text == "True"
    if column.encoding == JSON:
        return json.loads(text)
    number = float(text)
    if math.isnan(number):
        return None
    return int(number) if column.encoding == INT and number.is_integer() else number


def read(path: str | Path, table: tuple[Column, ...] = SUMMARY) -> list[dict]:
    """The table's rows, typed: each declared column decoded by its encoding, a blank None; a column the table does
    not declare (a file from a newer specsweep) stays text; one it declares but the file lacks (an older one) is
    absent from the rows."""
    cols = columns(table)
    with open(path, newline="") as f:
        records = list(csv.DictReader(f))
    out = []
    for line, record in enumerate(records, start=2):
        row = {}
        for name, text in record.items():
            try:
                row[name] = _decode(text or "", cols.get(name))
            except ValueError as e:
                raise ConfigError(f"{path} line {line}, column {name}: {text!r} is not a {cols[name].encoding} "
                                  f"({e}): rerun the rule that writes it (delete the file, then snakemake)") from None
        out.append(row)
    return out


def frame(path: str | Path, table: tuple[Column, ...] = SUMMARY):
    """`read` as a pandas DataFrame, in the file's column order (the plots' and pages' form)."""
    import pandas as pd

    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    out = pd.DataFrame(read(path, table), columns=header)
    # a float column's blanks are NaN, never None, so that arithmetic on it (a CI's error bar) gives NaN, not a
    # TypeError: a column blank in some rows (a CI that needs more prompts) or in all of them reads back as numbers
    numeric = [c.name for c in table if c.encoding == FLOAT and c.name in out.columns]
    numeric += [c.name + MAD for c in table if c.median and c.name + MAD in out.columns]
    for name in numeric:
        out[name] = pd.to_numeric(out[name], errors="coerce")
    return out
