"""The derived tables' columns, in table.py's form (`Column`: kind, source, unit, direction, encoding): tune.csv and
tune_verify.csv (`specsweep tune`, read/tune.py), compare.csv and predicted.csv (`specsweep compare`,
read/compare.py and read/predictions.py). Each is written by `table.write`, which refuses a row whose columns are
not its table's, and read back typed by `table.read(path, TABLE)`. Each is a table derived from a study's cells, so
`table.write(..., inputs=...)` records beside it (layout.inputs_of: tune.inputs.json, compare.inputs.json, ...) the
settings and the input cells it came from, as vLLM's `benchmarks/sweep` records its parameters beside its answer.

A side's figures in compare.csv are the summary's own columns under `a_` and `b_` (`_side`), so they keep its
unit, direction and encoding; B against A is `b_vs_a_` and the paired columns' names (stats.paired_speedup's order).
"""
from __future__ import annotations

from dataclasses import replace

from specsweep.core.table import (
    BOOL, FIGURE, HIGHER, ID, INT, LABEL, LOWER, SETTING, SUMMARY, TEXT, VERDICT, Column, columns,
)

_OF_SUMMARY = columns(SUMMARY)


def _summary(*names: str, prefix: str = "") -> tuple[Column, ...]:
    """The summary's columns of these names (a `_mad` name: its figure's), renamed with the prefix, no MLflow tag."""
    return tuple(replace(_OF_SUMMARY[n], name=prefix + n, median=False, tag=None, blank_when=(), streamed=False)
                 for n in names)


_GROUP = (Column("pair", SETTING, "the pair's name", encoding=TEXT),
          Column("dataset", SETTING, "bench_spec.dataset.name", encoding=TEXT),
          Column("thinking", SETTING, "bench_spec.thinking", encoding=BOOL),
          Column("concurrency", SETTING, "bench_spec.concurrency", "requests", encoding=INT),
          Column("k", SETTING, "the K predicted (K' up to the group's largest measured K)", "tokens", encoding=INT))

# tune.csv: one row per group and K' (tune.tune_rows), in file order
TUNE = (*_GROUP,
        Column("from_k", SETTING, "the group's largest measured K, whose per-position rates predict", "tokens",
               encoding=INT),
        Column("calibrated_from_k", SETTING, "the measured K that calibrate the prefix model, space-separated",
               encoding=TEXT),
        Column("predicted_al", FIGURE, "the prefix model: 1 + r_1 + ... + r_K'", "tokens", HIGHER),
        Column("predicted_al_calibrated", FIGURE, "the prefix model calibrated by the other measured K", "tokens",
               HIGHER),
        Column("predicted_al_ci_low", FIGURE, "its 95% bootstrap CI over requests (tune.al_ci)", "tokens"),
        Column("predicted_al_ci_high", FIGURE, "its 95% bootstrap CI over requests (tune.al_ci)", "tokens"),
        Column("ms_per_token_figure", LABEL, "the time per token the step model uses: streamed_tpot_ms or "
               "e2e_ms_per_output_token", encoding=TEXT),
        Column("predicted_step_ms", FIGURE, "the fitted step: base + drafter overhead + per-draft cost x K", "ms",
               LOWER),
        Column("predicted_ms_per_token", FIGURE, "the step over the calibrated AL", "ms", LOWER),
        Column("predicted_speedup", FIGURE, "the baseline's time per token over the predicted one", "x", HIGHER),
        Column("predicted_output_tok_s", FIGURE, "the baseline's output tok/s times the predicted speedup", "tok/s",
               HIGHER),
        Column("measured_al", FIGURE, "the measured K's acceptance length (blank: not measured)", "tokens", HIGHER),
        Column("measured_ms_per_token", FIGURE, "the measured K's time per token, the same figure", "ms", LOWER),
        Column("measured_speedup", FIGURE, "the summary's paired speedup of that figure (stats.paired_speedup)", "x",
               HIGHER),
        Column("step_fit_rms_ms", FIGURE, "the step-cost fit's RMS residual", "ms", LOWER),
        Column("recommended", VERDICT, "the K of the largest predicted speedup at its concurrency", encoding=BOOL))

# tune_verify.csv: the verified K, predicted (before) against measured (after) (tune.verify_rows)
TUNE_VERIFY = (*_GROUP,
               Column("recommended", VERDICT, "the tune table's recommendation", encoding=BOOL),
               Column("in_study_before", LABEL, "the K was measured before --verify ran it", encoding=BOOL),
               Column("predicted_al", FIGURE, "the tune table's prefix-model AL, before", "tokens", HIGHER),
               Column("predicted_al_calibrated", FIGURE, "the tune table's calibrated AL, before", "tokens", HIGHER),
               Column("measured_al", FIGURE, "the verified cell's AL", "tokens", HIGHER),
               Column("al_error", FIGURE, "predicted_al / measured_al - 1", ""),
               Column("al_calibrated_error", FIGURE, "predicted_al_calibrated / measured_al - 1", ""),
               Column("predicted_speedup", FIGURE, "the tune table's predicted speedup, before", "x", HIGHER),
               Column("measured_speedup", FIGURE, "the verified cell's paired speedup", "x", HIGHER),
               Column("speedup_error", FIGURE, "predicted_speedup / measured_speedup - 1", ""))

# compare.csv: a grid point's columns (compare.compare), each side's figures under a_ / b_, then B against A
COMPARE_KEY = ("method", "num_speculative_tokens", "set_acceptance", "verification", "k_schedule", "dataset",
               "thinking", "concurrency", "max_tokens", "prompt_length")
_PHASES = tuple(f"{p}_{f}" for p in ("think", "answer") for f in (
    "acceptance_length", "acceptance_length_ci_low", "acceptance_length_ci_high", "acceptance_rate",
    "per_position_acceptance", "token_share"))
# summary.quality_row's order: its reasons and labels, its sums, then its medians
_QUALITY = ("answers_degenerate", "answers_na", "stream_spread_na", "stream_starvation", "steady_na",
            "decode_tok_s_source", "steady_clock", "degenerate_answers", "starved_streams", "degenerate_share",
            "repetition_median", "decode_tok_s_p10", "decode_tok_s_p50", "decode_tok_s_p90",
            "decode_tok_s_min_over_max", "steady_output_tok_s", "steady_window_s")
_VS_BASE = ("speedup_e2e_geomean", "speedup_e2e_ci_low", "speedup_e2e_ci_high", "verdict", "verdict_reason", "looks",
            "stopped")
# stats.paired_speedup's keys, in the order it returns them
_PAIRED = ("speedup_e2e_geomean", "speedup_e2e_ci_low", "speedup_e2e_ci_high", "paired_prompts", "paired_requests",
           "speedup_streamed_tpot_geomean", "speedup_streamed_tpot_ci_low", "speedup_streamed_tpot_ci_high",
           "speedup_server_tpot_geomean", "speedup_server_tpot_ci_low", "speedup_server_tpot_ci_high",
           "speedup_streamed_tpot_na", "speedup_server_tpot_na", "verdict", "verdict_reason")


def _side(side: str) -> tuple[Column, ...]:
    return _summary("mean_acceptance_length", "output_tok_s", "phase_split_na", "phase_requests", *_PHASES,
                    *_VS_BASE, *_QUALITY, prefix=f"{side}_")


COMPARE = (
    *_summary("method", "num_speculative_tokens", "set_acceptance", "verification", "k_schedule"),
    Column("b_method", SETTING, "B's server_spec.method (a replay's cell is matched apart from its drafter)",
           encoding=TEXT),
    Column("b_num_speculative_tokens", SETTING, "B's server_spec.num_speculative_tokens", "tokens", encoding=INT),
    *_summary("dataset", "thinking", "concurrency", "max_tokens", "prompt_length"),
    Column("repeats", FIGURE, "the repeats both sides' checks accept (0: every one voided)", "repeats", encoding=INT),
    Column("cell_a", ID, "A's first matched bench cell", encoding=TEXT),
    Column("cell_b", ID, "B's first matched bench cell", encoding=TEXT),
    Column("repeats_void", LABEL, "the repeats left out, and why (their own checks void them)", encoding=TEXT),
    *_side("a"), *_side("b"),
    Column("b_vs_a_acceptance_ratio", VERDICT, "B's acceptance length over A's (stats.acceptance_ratio)", "x"),
    Column("b_vs_a_acceptance_ci_low", VERDICT, "its 95% bootstrap CI", "x"),
    Column("b_vs_a_acceptance_ci_high", VERDICT, "its 95% bootstrap CI", "x"),
    *_summary(*_PAIRED, prefix="b_vs_a_"),
    Column("b_vs_a_output_tok_s_ratio", VERDICT, "B's output tok/s over A's, the ratio of the medians", "x", HIGHER),
    Column("b_vs_a_output_tok_s_ci_low", VERDICT, "its 95% bootstrap CI (stats.ratio_of_medians)", "x"),
    Column("b_vs_a_output_tok_s_ci_high", VERDICT, "its 95% bootstrap CI (stats.ratio_of_medians)", "x"),
)

# predicted.csv: a replay of a drafter's rates against that drafter's own cell (predictions._prediction)
_RATES = "per-position rates, as JSON text"
PREDICTED = (
    *_summary("pair", "method", "num_speculative_tokens", "dataset", "thinking", "concurrency"),
    Column("predicted_side", ID, "the side (A, B; blank: one study) holding the replay", encoding=TEXT),
    Column("measured_side", ID, "the side holding the drafter's own cell", encoding=TEXT),
    Column("predicted_cell", ID, "the replay's server cell folder", encoding=TEXT),
    Column("measured_cell", ID, "the drafter's server cell folder", encoding=TEXT),
    Column("predicted_repeats", FIGURE, "the replay's repeats", "repeats", encoding=INT),
    Column("measured_repeats", FIGURE, "the drafter's repeats", "repeats", encoding=INT),
    Column("rates_source", LABEL, "how the replay is the drafter's: own rates, or by its rates alone", encoding=TEXT),
    Column("replayed_rates", SETTING, f"the rates the replay set; {_RATES}", encoding=TEXT),
    Column("realised_rates", FIGURE, f"the rates the replay realised; {_RATES}", encoding=TEXT),
    Column("measured_rates", FIGURE, f"the drafter's measured rates; {_RATES}", encoding=TEXT),
    Column("replayed_al", SETTING, "1 + the sum of the replayed rates", "tokens"),
    Column("predicted_al", FIGURE, "the replay's realised AL", "tokens", HIGHER),
    Column("measured_al", FIGURE, "the drafter's AL", "tokens", HIGHER),
    *(Column(f"{side}_speedup_e2e_{k}", VERDICT, f"the {side} cell's e2e speedup over its own baseline", "x",
             HIGHER if k == "geomean" else None)
      for side in ("predicted", "measured") for k in ("geomean", "ci_low", "ci_high")),
    Column("predicted_over_measured", FIGURE, "the two speedups' ratio", "x"),
    Column("agree", VERDICT, "each 95% CI holds the other's figure (blank: either has no CI)", encoding=BOOL),
    Column("measured_vs_predicted_e2e_geomean", VERDICT, "the two cells paired on the same requests (blank: not the "
           "same requests)", "x", HIGHER),
    Column("measured_vs_predicted_e2e_ci_low", VERDICT, "its 95% CI", "x"),
    Column("measured_vs_predicted_e2e_ci_high", VERDICT, "its 95% CI", "x"),
    Column("measured_vs_predicted_verdict", VERDICT, "its verdict", encoding=TEXT),
)
