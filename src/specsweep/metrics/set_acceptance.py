"""A set acceptance, asked against realised (docs/methods.md#a-set-acceptance-asked-and-realised)."""
from __future__ import annotations

import math

# flagged when what it realised lies further from that mean than SET_ACCEPTANCE_Z standard deviations.
SET_ACCEPTANCE_Z = 3.0       # |z| above this: flagged (two-sided 0.27% for independent steps)


def set_acceptance_rates(value, k: int) -> list[float]:
    """A set acceptance (a mean acceptance length, the bonus counted, or K unconditional rates) as K rates: a length
    is vLLM's minimum-variance schedule (SpeculativeConfig._acceptance_length_to_rates, 0.26): floor(L - 1)
    positions always accepted, the next with the fractional part, the rest never. Raises ValueError on bad input."""
    if isinstance(value, (list, tuple)):
        if len(value) != k:
            raise ValueError(f"set acceptance rates {list(value)} have {len(value)} entries but K={k}")
        return [float(r) for r in value]
    length = float(value)
    if not 1.0 <= length <= k + 1:
        raise ValueError(f"synthetic acceptance length must be in [1, {k + 1}], got {length}")
    drafts = length - 1
    full = int(drafts)
    return ([1.0] * full + [drafts - full] + [0.0] * (k - full - 1))[:k]


def set_step_moments(rates: list[float], drafts: int) -> tuple[float, float]:
    """Mean and variance of the drafts one synthetic step keeps when it offers `drafts` of them: X with
    P(X >= i) = r_i for i <= drafts, so E[X] = sum r_i and E[X^2] = sum (2i - 1) r_i."""
    head = rates[:drafts]
    mean = sum(head)
    second = sum((2 * i + 1) * r for i, r in enumerate(head))
    return mean, max(second - mean * mean, 0.0)


def steps_by_drafts(per_request_drafted: list[list[int]]) -> dict[int, int]:
    """Verify steps by the drafts each offered ({drafts: steps}), from requests' per-step drafted counts
    (phases.step_counts: the local engine's own, vLLM's detailed per-request metrics)."""
    out: dict[int, int] = {}
    for drafted in per_request_drafted:
        for d in drafted:
            out[int(d)] = out.get(int(d), 0) + 1
    return out


def distinct_step_sequences(per_request_accepted: list[list[int]]) -> tuple[int, int] | None:
    """(distinct, requests): how many different per-step acceptance sequences the requests drew. A set acceptance
    draws each step afresh, so independent draws give about one sequence per request (unless the schedule is
    deterministic); far fewer say the requests share their random draws (vLLM keys a draw by the request's seed and
    the token's position, so requests sent one seed share them)."""
    seqs = [tuple(s) for s in per_request_accepted if s]
    return (len(set(seqs)), len(seqs)) if seqs else None


def set_acceptance_check(value, k: int, drafts: float, accepted: float, per_pos: list[float] | None = None,
                         by_drafts: dict[int, int] | None = None, sequences: tuple[int, int] | None = None) -> dict:
    """A set-acceptance cell's asked, expected and realised acceptance, pooled over its steps.

    value: the cell's set acceptance (a length or K rates); drafts, accepted: its verify steps and accepted drafts;
    per_pos: accepted drafts per position (counts, positions 1..K), for the reason; by_drafts: steps by drafts
    offered (steps_by_drafts), None meaning every step offered K. Returns set_acceptance_length (1 + sum of the
    rates: what it asks where every position is reached), expected_acceptance_length (what the rates give on these
    steps), acceptance_gap (realised - expected), acceptance_gap_z (the gap in accepted drafts over its standard
    deviation, steps independent) and set_acceptance_gap (the one-line reason where |z| > SET_ACCEPTANCE_Z)."""
    rates = set_acceptance_rates(value, k)
    asked = 1.0 + sum(rates)
    out = {"set_acceptance_length": asked, "expected_acceptance_length": None, "acceptance_gap": None,
           "acceptance_gap_z": None, "set_acceptance_gap": None}
    if not drafts:
        return out
    by_drafts = by_drafts or {k: int(drafts)}
    steps = sum(by_drafts.values())
    if steps != int(drafts):
        raise ValueError(f"set acceptance: the per-step counts hold {steps} steps but the counters {int(drafts)}")
    mean = var = 0.0
    for d, n in by_drafts.items():
        m, v = set_step_moments(rates, d)
        mean, var = mean + n * m, var + n * v
    expected, realised = 1.0 + mean / steps, 1.0 + accepted / steps
    diff = accepted - mean
    z = diff / var ** 0.5 if var > 0 else (0.0 if abs(diff) < 1e-9 else math.copysign(math.inf, diff))
    out.update(expected_acceptance_length=expected, acceptance_gap=realised - expected, acceptance_gap_z=z)
    if abs(z) > SET_ACCEPTANCE_Z:
        text = (f"AL {realised:.3f} against the {expected:.3f} the set rates give on these {steps} steps "
                f"(asked {asked:.3f}): z = {z:.1f}, beyond {SET_ACCEPTANCE_Z:g}")
        if per_pos:
            reached = [sum(n for d, n in by_drafts.items() if d > i) for i in range(len(rates))]
            zs = [((c - r * n) / (r * (1 - r) * n) ** 0.5 if 0 < r < 1 and n else 0.0, i, c, r, n)
                  for i, (c, r, n) in enumerate(zip(per_pos, rates, reached))]
            pz, i, c, r, n = max(zs, key=lambda t: abs(t[0]))
            if pz:
                text += f"; position {i + 1}: {c:.0f} of {n} ({c / n:.3f} for {r:.3f}, z = {pz:.1f})"
        if var > 0 and sequences and sequences[0] < sequences[1]:
            text += (f"; {sequences[1]} requests drew only {sequences[0]} distinct acceptance sequences: their "
                     "draws are shared, so the steps are not independent")
        out["set_acceptance_gap"] = text
    return out
