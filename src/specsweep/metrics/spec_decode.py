"""Speculative decoding's acceptance: counters in one shape (`SpecCounters`), acceptance figures from counter
deltas or lengths, per-request acceptance and its checks against the counters, a cell against its baseline
(output length, greedy agreement, speedup), and a cell's text against its own first repeat's (repeat agreement)."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from specsweep.metrics.distributions import quantiles


@dataclass
class SpecCounters:
    """Spec-decode counts in one shape, whichever backend counted them: verify steps (drafts), draft tokens,
    accepted tokens, and accepted tokens per draft position (0-based)."""
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)

    def __sub__(self, before: "SpecCounters") -> "SpecCounters":
        positions = set(self.per_pos) | set(before.per_pos)
        return SpecCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                            self.accepted - before.accepted,
                            {p: self.per_pos.get(p, 0.0) - before.per_pos.get(p, 0.0) for p in sorted(positions)})


def acceptance(delta: SpecCounters) -> dict:
    """Token-weighted figures over every step in the delta (vLLM's convention, not a mean of prompt means)."""
    d = delta.drafts
    return {
        "num_drafts": d,
        "num_draft_tokens": delta.draft_tokens,
        "num_accepted_tokens": delta.accepted,
        "mean_acceptance_length": (1.0 + delta.accepted / d) if d else None,
        "acceptance_rate": (delta.accepted / delta.draft_tokens) if delta.draft_tokens else None,
        "per_position_acceptance": [delta.per_pos[p] / d for p in sorted(delta.per_pos)] if d else [],
    }


def counters_dict(c: SpecCounters) -> dict:
    return asdict(c)


def acceptance_from_lengths(lengths: list[int], block_size: int) -> dict:
    """vLLM's acceptance figures from per-step acceptance lengths (accepted drafts + 1, in 1..block_size),
    plus the histogram of lengths (index i counts steps of length i + 1)."""
    drafts, per_step = len(lengths), block_size - 1
    accepted = sum(n - 1 for n in lengths)
    return {
        "num_drafts": drafts,
        "num_draft_tokens": drafts * per_step,
        "num_accepted_tokens": accepted,
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts else None,
        "acceptance_rate": accepted / (drafts * per_step) if drafts and per_step else None,
        "per_position_acceptance": [sum(n > p for n in lengths) / drafts for p in range(1, block_size)] if drafts else [],
        "acceptance_length_histogram": [sum(n == i for n in lengths) for i in range(1, block_size + 1)],
    }


def request_spec(record: dict, num_spec_tokens: int) -> dict | None:
    """One request's own spec-decode figures in the neutral shape, vLLM's names: num_spec_steps,
    num_draft_tokens, num_accepted_draft_tokens and acceptance_histogram (index j: steps that accepted j
    drafts). A server's come as the record's `spec`, already in this shape (each backend's session translates its
    server's names); the local engine's come from its per-step acceptance lengths. None when the request
    carries neither."""
    spec = record.get("spec")
    if spec is not None:
        return spec
    lengths = record.get("acceptance_lengths")
    if lengths is None:
        return None
    histogram = [0] * max(num_spec_tokens + 1, max(lengths, default=1))
    for n in lengths:
        histogram[n - 1] += 1
    return {"num_spec_steps": len(lengths), "num_draft_tokens": len(lengths) * num_spec_tokens,
            "num_accepted_draft_tokens": sum(n - 1 for n in lengths), "acceptance_histogram": histogram}


def per_request_acceptance(records: list[dict], num_spec_tokens: int) -> dict | None:
    """Acceptance from the finished requests' own figures: their sums, the per-prompt mean acceptance length
    (the DFlash authors' convention: the mean over requests of 1 + accepted / steps, which weighs a short
    answer as much as a long one) with its p10/p50/p90, and the acceptance-length histogram (index i: steps
    of length i + 1, as acceptance_from_lengths). None when no finished request carries figures."""
    ok = [r for r in records if r["ok"]]
    specs = [s for s in (request_spec(r, num_spec_tokens) for r in ok) if s is not None]
    if not specs:
        return None
    steps = sum(s["num_spec_steps"] for s in specs)
    accepted = sum(s["num_accepted_draft_tokens"] for s in specs)
    per_prompt = [1.0 + s["num_accepted_draft_tokens"] / s["num_spec_steps"] for s in specs if s["num_spec_steps"]]
    width = max(len(s["acceptance_histogram"]) for s in specs)
    return {
        "requests_without_figures": len(ok) - len(specs),
        "requests_without_drafts": len(specs) - len(per_prompt),    # left out of the per-prompt figures
        "num_drafts": steps,
        "num_draft_tokens": sum(s["num_draft_tokens"] for s in specs),
        "num_accepted_tokens": accepted,
        "mean_acceptance_length": 1.0 + accepted / steps if steps else None,
        "mean_acceptance_length_per_prompt": sum(per_prompt) / len(per_prompt) if per_prompt else None,
        "acceptance_length_per_prompt": quantiles(per_prompt),
        "acceptance_length_histogram": [sum(s["acceptance_histogram"][i] for s in specs
                                            if i < len(s["acceptance_histogram"])) for i in range(width)],
    }


def never_drafted(spec_decode: dict | None, records: list[dict], num_spec_tokens: int) -> str | None:
    """Why a speculative cell's speculation never engaged, or None: its finished requests decoded past their first
    token, yet neither the cell's counts (spec_decode: counters, or the engine's steps) nor any request's own
    figures hold a single draft token (SGLang's DFlash harness fails such a run too)."""
    finished = [r for r in records if r.get("ok")]
    if not any((r.get("completion_tokens") or 0) > 1 for r in finished):
        return None                                   # no decode step that could have drafted
    counted = (spec_decode or {}).get("num_draft_tokens") or 0
    own = sum((request_spec(r, num_spec_tokens) or {}).get("num_draft_tokens") or 0 for r in finished)
    if counted or own:
        return None
    return (f"speculation never engaged: 0 draft tokens, counted and in each of {len(finished)} finished requests' "
            "own figures; likely the method was not applied (no speculative config reached the server) or the "
            "drafter did not load (see the server log)")


def spec_mismatch(per_request: dict, counted: dict | None) -> str | None:
    """How the requests' own sums differ from the cell's aggregate counts (vLLM's counter deltas), or None.
    Both count the same verify steps of the same requests, so anything but exact equality is a bug."""
    counted = counted or {}
    diffs = [f"{what}: {per_request[key]} summed over requests, {counted.get(key) or 0:g} counted"
             for key, what in (("num_drafts", "drafts"), ("num_draft_tokens", "draft tokens"),
                               ("num_accepted_tokens", "accepted tokens"))
             if per_request[key] != (counted.get(key) or 0)]
    return "per-request spec-decode figures disagree with the counters (" + "; ".join(diffs) + ")" if diffs else None


def length_mismatch(cell: dict, baseline: dict, tolerance: float = 0.05) -> str | None:
    """A warning when two cells' mean output lengths differ by more than `tolerance`: their tok/s then
    measure different work (set sweep.ignore_eos=true to decode exactly max_tokens)."""
    means = [m["completion_tokens"] / m["requests_completed"] if m.get("requests_completed") else None
             for m in (cell, baseline)]
    if not all(means) or abs(means[0] / means[1] - 1) <= tolerance:
        return None
    return (f"mean output length {means[0]:.1f} tokens vs the baseline's {means[1]:.1f} "
            f"({means[0] / means[1] - 1:+.1%}): throughput ratios compare different lengths; "
            "set sweep.ignore_eos=true to decode exactly max_tokens")


def length_shares(per_position: list[float]) -> list[float]:
    """Share of steps with acceptance length 1..K+1, from per-position acceptance rates r_1..r_K
    (r_p: share of steps whose draft p was accepted; a step accepts a prefix, so the r_p fall with p)."""
    rates = [1.0, *per_position, 0.0]
    return [rates[i] - rates[i + 1] for i in range(len(rates) - 1)]


def agreement_na(*runs: list[dict]) -> str | None:
    """Why equal texts would say nothing of these requests' tokens, or None: some decoded tokens but returned no text,
    tokens the detokenizer drops (special tokens, which random weights can emit throughout). Rows kept without their
    text say nothing either way."""
    blank = sum(1 for rows in runs for r in rows if r["ok"] and r.get("text") == "" and r.get("completion_tokens"))
    if blank:
        return (f"{blank} request(s) decoded tokens but returned no text (tokens the detokenizer drops, such as "
                "special tokens from random weights): equal texts say nothing of the tokens")
    return None


def greedy_agreement(records: list[dict], baseline: list[dict]) -> float | None:
    """Share of requests whose text equals the baseline's for the same prompt and turn."""
    base = {(r["index"], r["turn"]): r["text"] for r in baseline if r["ok"]}
    pairs = [(r["text"], base[(r["index"], r["turn"])]) for r in records if r["ok"] and (r["index"], r["turn"]) in base]
    if not pairs:
        return None
    return sum(a == b for a, b in pairs) / len(pairs)


def repeat_agreement(settings: list[list[list[dict]]]) -> float | None:
    """Share of the later repeats' requests whose text equals their setting's first repeat's for the same prompt and
    turn: one server's text across its repeats. `settings`: each bench setting's runs (request rows), in repeat order."""
    same = []
    for first, *later in filter(None, settings):
        text = {(r["index"], r["turn"]): r["text"] for r in first if r["ok"]}
        same += [r["text"] == text[r["index"], r["turn"]] for run in later for r in run
                 if r["ok"] and (r["index"], r["turn"]) in text]
    return sum(same) / len(same) if same else None


def speedup_output_tok_s(cell: float | None, baseline: float | None) -> float | None:
    """Output tok/s ratio cell / baseline: above 1 is faster. The one whole-cell speedup; latency speedups are
    paired per request (stats.paired_speedup), never a ratio of two cells' means."""
    return cell / baseline if cell and baseline else None


def median_mad(values: list[float]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    med = statistics.median(vals)
    return med, statistics.median(abs(v - med) for v in vals)


# ---- issue #30 item 8: a set acceptance, asked against realised (docs/methods.md#a-set-acceptance-asked-and-realised)
# A set-acceptance cell (sweep.set_acceptance) accepts each verify step's drafts by a set schedule: P(step keeps at
# least i drafts) = r_i, unconditional, whatever the drafts are. Its acceptance length is then a sum of independent
# draws, one per step, with a known mean and variance given how many drafts each step offered (a step cut short at the
# budget edge, as the local engine cuts its last one, offers fewer than K and keeps at most those). The cell is
