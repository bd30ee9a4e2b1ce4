"""How many repeats a comparison will take to be answered, from a spread and an effect (issue 54 item 4:
`specsweep doctor` predicts each comparison of a study from the blocks this host has recorded). Pure.

At look n the interval of a comparison whose blocks have spread `spread` (their standard deviation, log scale)
and mean `effect` (log speedup) is taken to be its expectation: effect +- h(n) spread, h the rule's half-width in
spread units: b_k / sqrt(n_k) at the planned looks (spending.t_boundaries), the confidence sequence's closed form
after every repeat (sequential.confidence_sequence). It is answered at the first look where that interval decides
(lies above or below 0, or inside the equivalence margin) and, with a precision, is that narrow. A typical study,
not a probability: half of the studies of that spread and effect answer about then, the others later or sooner.
A launch SD the study carries (sweep.launch_sd) adds 1.96 x its value in quadrature to every half-width
(launches.widen; the planned looks' own levels reach a little further), so a precision narrower than 2 x 1.96 x
launch SD is never met.
"""
from __future__ import annotations

import math

from specsweep.verdicts import launches, sequential, spending
from specsweep.verdicts.stats import EQUIVALENCE


def half_widths(max_repeats: int, looks: str = spending.PLANNED) -> dict[int, float]:
    """Each look's half-width in spread units, by the repeat it is taken after."""
    if looks == spending.PLANNED:
        plan = spending.plan(max_repeats)
        return {n: b / math.sqrt(n) for n, b in zip(plan, spending.t_boundaries(plan))}
    c, a, out = sequential.MIXTURE, sequential.ALPHA, {}
    for t in range(2, max_repeats + 1):
        q = (t + c) / t * (1 - (a ** 2 * c / (t + c)) ** (1 / t))
        if q < 1:
            out[t] = math.sqrt(q / (1 - q))
    return out


def repeats_to_answer(spread: float, effect: float, max_repeats: int, looks: str = spending.PLANNED,
                      precision: float | None = None, equivalence: float = EQUIVALENCE,
                      launch_sd: float = 0.0) -> int | None:
    """The first look (a repeat) at which the typical interval answers the comparison; None where no look of the
    budget does (the budget is unlikely to answer it)."""
    margin = math.log1p(equivalence)
    for n, h in half_widths(max_repeats, looks).items():
        half = math.hypot(h * spread, launches.Z95 * launch_sd)
        decided = abs(effect) > half or abs(effect) + half <= margin
        if decided and (precision is None or 2 * half <= math.log1p(precision)):
            return n
    return None
