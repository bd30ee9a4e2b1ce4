"""Where a greedy member's text leaves its baseline's, and whether the target nearly tied there (`sweep.divergence`).

At temperature 0 a speculative member must decode the target's own text, yet two servers compute the target through
different shapes (a verify of K+1 tokens, a decode of one; other kernels, other batch sizes), so their floats differ
in the last bits, and where the target's two best tokens nearly tie the argmax may differ: from that token on, the
texts part, though neither server is wrong. A real fault (a state the verify corrupted, a KV slot overwritten) parts
them where the target had a clear choice. What tells the two apart is the target's own margin at the first
divergence: the log-probability of the baseline's token minus that of the member's, from a fresh prefill of the
prompt and the shared prefix (one untimed completion after the cell, on the member's own server: a prefill, so the
target's alone).

`located` finds each differing request's first differing token from the token ids both servers returned;
`explained` reads the probes into the cell's figures. Pure: the probe itself is the backend's (`next_token_logprobs`).
"""
from __future__ import annotations

MAX_PROBES = 32         # first divergences probed per cell: each is one short request after the cell's timing
TOP = 20                # log-probabilities asked for per probe (vLLM's default --max-logprobs)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token sequences differ (one ending before the other counts), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def located(rows: list[dict], base_rows: list[dict], limit: int = MAX_PROBES) -> tuple[list[dict], str | None]:
    """Each request whose text differs from the baseline's, at its first differing token (the first `limit`, in
    prompt order): index, turn, position, the two tokens there, and `prefix` (the prompt's token ids and the shared
    output); and why some differing requests are not among them, or None."""
    base = {(r["index"], r["turn"]): r for r in base_rows if r["ok"]}
    out, unlocated, over = [], 0, 0
    for r in sorted((r for r in rows if r["ok"]), key=lambda r: (r["index"], r["turn"])):
        b = base.get((r["index"], r["turn"]))
        if b is None or r["text"] == b["text"]:
            continue
        ids, base_ids, prompt = r.get("token_ids"), b.get("token_ids"), b.get("prompt_token_ids")
        pos = first_difference(ids, base_ids) if ids is not None and base_ids is not None else None
        if pos is None or not prompt or pos >= min(len(ids), len(base_ids)):
            unlocated += 1      # no ids; the same ids, their texts parted in detokenizing; or one only ended sooner
        elif len(out) == limit:
            over += 1
        else:
            out.append({"index": r["index"], "turn": r["turn"], "position": pos, "baseline_token": base_ids[pos],
                        "cell_token": ids[pos], "prefix": [*prompt, *base_ids[:pos]]})
    why = [f"{unlocated} differing request(s) have no differing token to probe (no token ids from the server, the "
           "same ids detokenized apart, or one output only ended sooner)" if unlocated else "",
           f"{over} more differing request(s) not probed (the first {limit} are)" if over else ""]
    return out, "; ".join(filter(None, why)) or None


def explained(probes: list[dict], why: str | None) -> dict:
    """The cell's divergence figures from its probes (each a `located` entry with the probe's `logprobs`, token id ->
    log-probability, or its `error`): `greedy_divergences`, each with its margin (the baseline's token's
    log-probability minus the cell's, in nats; where one token fell outside the top TOP, `margin_at_least`, its
    bound), and `greedy_divergence_margin`, the largest |margin| (or bound) probed: small at every divergence (near
    ties) is the numerics of two shapes; a large one is a fault."""
    kept, margins, errors = [], [], []
    for p in probes:
        entry = {k: p[k] for k in ("index", "turn", "position", "baseline_token", "cell_token")}
        if p.get("error"):
            errors.append(p["error"])
            kept.append({**entry, "error": p["error"]})
            continue
        lps = p["logprobs"]
        base_lp, cell_lp = lps.get(p["baseline_token"]), lps.get(p["cell_token"])
        entry.update(baseline_logprob=base_lp, cell_logprob=cell_lp, probe_top_token=max(lps, key=lps.get, default=None),
                     margin=base_lp - cell_lp if base_lp is not None and cell_lp is not None else None)
        if entry["margin"] is not None:
            margins.append(abs(entry["margin"]))
        elif base_lp is not None or cell_lp is not None:      # the other is below every logprob returned
            entry["margin_at_least"] = abs((base_lp if base_lp is not None else cell_lp) - min(lps.values()))
            margins.append(entry["margin_at_least"])
        kept.append(entry)
    if errors:
        why = "; ".join(filter(None, [why, f"{len(errors)} probe(s) failed: {errors[0]}"]))
    return {"greedy_divergences": kept, "greedy_divergence_margin": max(margins) if margins else None,
            "greedy_divergence_na": why}
