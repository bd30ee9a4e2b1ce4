"""Pure metric functions over request records and counter deltas; no I/O.

Each timing figure is defined here once, and every reader (metrics.json, the summary, stats, tune, compare,
the pages, the plots and MLflow) takes it from here under one name (docs/reference.md lists them):
- `streamed_tpot` (`request_tpot`): a request's streamed time per output token after its first chunk;
- per-token ITL (`per_token_itl`): a chunk's gap spread over its tokens;
- `e2e_ms_per_output_token`: a repeat's summed end-to-end time over its summed output tokens (TTFT included);
- `e2e_s`: a request's end-to-end latency, which the paired verdict uses.
The streamed ones are undefined for bursty streams (`is_bursty`) and a whole cell's are void beyond
MAX_BURSTY_SHARE of them (`streamed_figures_invalid`).
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

import numpy as np


def dist(values: list[float]) -> dict:
    """mean, median, p90 and p99, in the values' own unit."""
    if not values:
        return {"mean": None, "median": None, "p90": None, "p99": None}
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99))}


def quantiles(values: list[float]) -> dict:
    """p10, p50 and p90: the spread of a per-request figure."""
    if not values:
        return {"p10": None, "p50": None, "p90": None}
    p10, p50, p90 = np.percentile(np.asarray(values, dtype=float), [10, 50, 90])
    return {"p10": float(p10), "p50": float(p50), "p90": float(p90)}


def output_length(records: list[dict]) -> dict:
    """Completion tokens per finished request, so throughput is never compared across unknown lengths."""
    lengths = [r["completion_tokens"] for r in records if r["ok"]]
    if not lengths:
        return {"mean": None, "min": None, "max": None, **quantiles([])}
    return {"mean": sum(lengths) / len(lengths), "min": min(lengths), "max": max(lengths), **quantiles(lengths)}


BURST_SHARE = 0.1          # a stream whose chunks span at most this share of its e2e arrived in a burst
MAX_BURSTY_SHARE = 0.1     # above this share of bursty streams, a cell's streamed figures are not measurable


def token_chunks(record: dict) -> list[tuple[float, int]] | None:
    """(arrival time, tokens) of each chunk that carried tokens, from a record's `chunk_t_s` and `chunk_tokens`;
    None where the record has no per-chunk token counts (a server without them, or a record made before them)."""
    times, tokens = record.get("chunk_t_s"), record.get("chunk_tokens")
    if times is None or tokens is None:
        return None
    return [(t, n) for t, n in zip(times, tokens) if n > 0]


def per_token_itl(chunks: list[tuple[float, int]]) -> list[float]:
    """One inter-token latency per token after the first chunk: each chunk's gap since the previous chunk
    with tokens, spread evenly over its own tokens. They sum to the last chunk's time minus the first's."""
    return [(t1 - t0) / n for (t0, _), (t1, n) in zip(chunks, chunks[1:]) for _ in range(n)]


def streamed_tpot(chunks: list[tuple[float, int]]) -> float | None:
    """(last chunk time - first chunk time) / tokens after the first chunk; None with no token after it."""
    after = sum(n for _, n in chunks[1:])
    return (chunks[-1][0] - chunks[0][0]) / after if after else None


def is_bursty(chunks: list[tuple[float, int]], e2e_s: float) -> bool:
    """A stream of more than one token whose chunks arrived together: its first and last chunk lie within
    BURST_SHARE of the request's e2e (a stream that spent 90% or more of its time before its first chunk has
    at most 10% left for the rest). Counting chunks cannot tell: a burst is often many chunks at once."""
    return sum(n for _, n in chunks) > 1 and chunks[-1][0] - chunks[0][0] <= BURST_SHARE * e2e_s


def request_tpot(record: dict) -> float | None:
    """A finished request's streamed TPOT in seconds; None for a bursty stream, a request without per-chunk
    token counts (a record made before they were kept has none: the older (e2e - TTFT) / (tokens - 1) was
    another figure and is not substituted), or one without a token after its first chunk."""
    chunks = token_chunks(record) if record.get("ok") else None
    if not chunks or is_bursty(chunks, record["e2e_s"]):
        return None
    return streamed_tpot(chunks)


def streamed_invalid(records: list[dict]) -> str | None:
    """Why these requests (one repeat of one cell) have no streamed figures, or None where they have them."""
    return streamed_figures(records)["streamed_figures_invalid"]


def streamed_figures(records: list[dict]) -> dict:
    """Per-token streamed TPOT and ITL over the finished requests with per-chunk token counts, leaving out
    bursty streams (counted as `bursty_streams`); `streamed_figures_invalid` says why a cell has none."""
    timed = [(r, c) for r in records if r["ok"] and (c := token_chunks(r))]
    flags = [is_bursty(c, r["e2e_s"]) for r, c in timed]
    kept = [c for (_, c), burst in zip(timed, flags) if not burst]
    bursty = sum(flags)
    tpot = [t for t in map(streamed_tpot, kept) if t is not None]
    itl = [x for c in kept for x in per_token_itl(c)]
    reason = None
    if not timed:
        reason = "no finished request carries per-chunk token counts"
    elif bursty > MAX_BURSTY_SHARE * len(timed):
        reason = (f"{bursty} of {len(timed)} streams arrived in a burst (first to last chunk within "
                  f"{BURST_SHARE:.0%} of e2e), above the {MAX_BURSTY_SHARE:.0%} a cell may have")
    if reason:
        tpot, itl = [], []
    return {"streamed_tpot_ms": dist([t * 1e3 for t in tpot]), "streamed_itl_ms": dist([x * 1e3 for x in itl]),
            "bursty_streams": bursty, "streamed_figures_invalid": reason}


def e2e_ms_per_output_token(records: list[dict]) -> float | None:
    """End-to-end ms per output token over one repeat's finished requests: their summed e2e over their summed
    completion tokens. It includes TTFT (queueing, prefill), so it is never the streamed TPOT; it is defined
    for bursty streams too."""
    ok = [r for r in records if r.get("ok") and r.get("completion_tokens")]
    tokens = sum(r["completion_tokens"] for r in ok)
    return 1e3 * sum(r["e2e_s"] for r in ok) / tokens if tokens else None


def request_figures(records: list[dict], wall_s: float) -> dict:
    """Throughput and latency over one bench cell's measured (non-warm-up) requests."""
    ok = [r for r in records if r["ok"]]
    out_tokens = sum(r["completion_tokens"] for r in ok)
    return {
        "requests_sent": len(records),
        "requests_completed": len(ok),
        "requests_errored": len(records) - len(ok),
        "error_rate": (len(records) - len(ok)) / len(records) if records else 0.0,
        "wall_s": wall_s,
        "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in ok),
        "completion_tokens": out_tokens,
        "output_length": output_length(records),
        "output_tok_s": out_tokens / wall_s if wall_s > 0 else None,
        "request_throughput": len(ok) / wall_s if wall_s > 0 else None,
        "ttft_ms": dist([r["ttft_s"] * 1e3 for r in ok if r["ttft_s"] is not None]),
        **streamed_figures(records),
        "e2e_ms": dist([r["e2e_s"] * 1e3 for r in ok]),
        "e2e_ms_per_output_token": e2e_ms_per_output_token(records),
    }


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


def greedy_agreement(records: list[dict], baseline: list[dict]) -> float | None:
    """Share of requests whose text equals the baseline's for the same prompt and turn."""
    base = {(r["index"], r["turn"]): r["text"] for r in baseline if r["ok"]}
    pairs = [(r["text"], base[(r["index"], r["turn"])]) for r in records if r["ok"] and (r["index"], r["turn"]) in base]
    if not pairs:
        return None
    return sum(a == b for a, b in pairs) / len(pairs)


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
