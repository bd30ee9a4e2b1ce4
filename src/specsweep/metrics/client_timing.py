"""A request's timing as the client saw it: distributions, its streamed chunks, per-token ITL and streamed TPOT
(`request_tpot`), and whether its stream arrived in a burst (`is_bursty`).

The streamed figures are undefined for bursty streams and a whole cell's are void beyond MAX_BURSTY_SHARE of
them (`streamed_invalid`)."""
from __future__ import annotations

from specsweep.metrics.distributions import dist, quantiles


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


# ---- measured by the server: a record's `server_timing` ------------------------------------------------------
# A record's `server_timing`, in the neutral shape each backend's session writes (seconds; None where unknown):
# clock (who timed it), queue_s, prefill_s (scheduled to first token), decode_s (first to last token), span_s
# (the server's whole time for the request), mean_itl_s (as the server reported it), step_t_s (the server's own
