"""What a speculative step costs: its time over one decode step of its baseline, the other half of a speedup.

A member that emits AL tokens a step (mean_acceptance_length) in steps that each take c times its baseline's decode
step has a time per output token of c / AL times the baseline's, so its server-timed TPOT speedup is AL / c, and

    step_cost = mean_acceptance_length / speedup_server_tpot_geomean

(the pages' AL x TPOT(K) / TPOT(baseline)), its range from the TPOT speedup's CI alone (the AL is a count). Server
TPOT leaves the prefill out, so this is the verify step, the drafter's pass included, at the row's concurrency.
Blank on a baseline row, and where either figure is blank: the server TPOT speedup is blanked where a repeat's
server timing fails its check (speedup_server_tpot_na says why).

Pure: typed summary rows in (summary.rows), the same rows with these columns out.
"""
from __future__ import annotations

from specsweep.core.table import value

COLUMNS = ("step_cost", "step_cost_ci_low", "step_cost_ci_high")


def annotate(rows: list[dict]) -> list[dict]:
    for row in rows:
        row.update(dict.fromkeys(COLUMNS))
        al, point = value(row, "mean_acceptance_length"), value(row, "speedup_server_tpot_geomean")
        if row.get("method") == "none" or row.get("valid") is not True or not al or not point:
            continue
        low, high = value(row, "speedup_server_tpot_ci_low"), value(row, "speedup_server_tpot_ci_high")
        row["step_cost"] = al / point
        row["step_cost_ci_low"] = al / high if high else None      # the faster bound gives the cheaper step
        row["step_cost_ci_high"] = al / low if low else None
    return rows
