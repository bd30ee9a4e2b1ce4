"""Pure metric functions over request records and counter deltas; no I/O.

Each timing figure is defined here once, and every reader (metrics.json, the summary, stats, tune, compare,
the pages, the plots and MLflow) takes it from here under one name (docs/reference.md lists them):
- `streamed_tpot` (`request_tpot`): a request's streamed time per output token after its first chunk;
- per-token ITL (`per_token_itl`): a chunk's gap spread over its tokens;
- `e2e_ms_per_output_token`: a repeat's summed end-to-end time over its summed output tokens (TTFT included);
- `e2e_s`: a request's end-to-end latency, which the paired verdict uses.
The streamed ones are undefined for bursty streams (`is_bursty`) and a whole cell's are void beyond
MAX_BURSTY_SHARE of them (`streamed_figures_invalid`).
Measured by the server, from a record's `server_timing` (docs/timing.md):
- `server_tpot` (`request_server_tpot`): the server's first-to-last-token time over the tokens after the first;
- `server_itl`: per-token gaps between the server's own step times, where it gives them (the local engine);
- `burst_attribution`: whether a bursty stream was produced in a burst by the server or delayed after it;
- `tpot_agreement`: the client's streamed TPOT against the server's on the same non-bursty requests.
Of the answers and the streams (quality_figures):
- `repetition`: the share of an answer covered by an n-gram it repeats; a cell with too many degenerate answers
  gets no verdict (`answers_degenerate`, stats.paired_speedup);
- `decode_tok_s` (`request_decode_tok_s`): a request's decode rate, its spread over a cell and its starved streams;
- `steady_output_tok_s`: output tokens over the time every stream is decoding, beside the whole run's.
"""
from __future__ import annotations

import math
import re
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


# ---- measured by the server: a record's `server_timing` ------------------------------------------------------
# A record's `server_timing`, in the neutral shape each backend's session writes (seconds; None where unknown):
# clock (who timed it), queue_s, prefill_s (scheduled to first token), decode_s (first to last token), span_s
# (the server's whole time for the request), mean_itl_s (as the server reported it), step_t_s (the server's own
# time of each step that committed tokens, since the first token, where it gives them; else None).
TPOT_AGREEMENT = 0.3      # where both exist and streams are smooth, client / server TPOT within 1 / 1.3 .. 1.3 (docs/timing.md)
SPAN_SLACK_S = 0.005      # the server's decode may exceed the client's e2e by this much (two clocks' rounding)


def server_bursty(record: dict) -> bool | None:
    """Whether the server itself produced the request's tokens in a burst: more than one token, and its first to
    last token within BURST_SHARE of its own span (is_bursty's rule, on the server's clock); None without timing."""
    t = record.get("server_timing") if record.get("ok") else None
    if not t or t.get("decode_s") is None or not t.get("span_s"):
        return None
    return (record.get("completion_tokens") or 0) > 1 and t["decode_s"] <= BURST_SHARE * t["span_s"]


def request_server_tpot(record: dict) -> float | None:
    """A finished request's TPOT in seconds as the server timed it: decode_s / (completion_tokens - 1). None
    without server timing, with fewer than two tokens, for a burst in the server (server_bursty), or where the
    server's decode is longer than the client's whole request (SPAN_SLACK_S: a timing that cannot be right)."""
    t = record.get("server_timing") if record.get("ok") else None
    tokens = record.get("completion_tokens") or 0
    if not t or t.get("decode_s") is None or tokens < 2 or server_bursty(record):
        return None
    if record.get("e2e_s") is not None and t["decode_s"] > record["e2e_s"] + SPAN_SLACK_S:
        return None
    return t["decode_s"] / (tokens - 1)


def server_itl(record: dict) -> list[float]:
    """Per-token ITL from the server's own step times (step_t_s, with the tokens each step committed as the
    record's chunk_tokens), spread as per_token_itl; [] where the server gives only first and last token times."""
    t = record.get("server_timing") or {}
    steps, tokens = t.get("step_t_s"), record.get("chunk_tokens")
    if not steps or not tokens or len(steps) != len(tokens) or request_server_tpot(record) is None:
        return []
    return per_token_itl([(s, n) for s, n in zip(steps, tokens) if n > 0])


def server_figures(records: list[dict]) -> dict:
    """The server-timed TPOT (per request) and ITL (per token, where the server gives step times) over the finished
    requests with server timing; `server_figures_invalid` says why a cell has none: no request carries timing, a
    timing that cannot be right (decode longer than the client's e2e), or more than MAX_BURSTY_SHARE of the
    timed requests bursting in the server."""
    timed = [r for r in records if r["ok"] and (r.get("server_timing") or {}).get("decode_s") is not None
             and (r.get("completion_tokens") or 0) > 1]
    bursty = sum(bool(server_bursty(r)) for r in timed)
    impossible = sum(r.get("e2e_s") is not None and r["server_timing"]["decode_s"] > r["e2e_s"] + SPAN_SLACK_S
                     for r in timed)
    tpot = [t for t in map(request_server_tpot, timed) if t is not None]
    itl = [x for r in timed for x in server_itl(r)]
    reason = None
    if not timed:
        reason = "no finished request of more than one token carries the server's timing"
    elif impossible:
        reason = f"{impossible} of {len(timed)} requests have a server decode time longer than their client e2e"
    elif bursty > MAX_BURSTY_SHARE * len(timed):
        reason = (f"{bursty} of {len(timed)} requests were produced in a burst by the server (first to last token "
                  f"within {BURST_SHARE:.0%} of its span), above the {MAX_BURSTY_SHARE:.0%} a cell may have")
    if reason:
        tpot, itl = [], []
    clocks = sorted({r["server_timing"].get("clock") for r in timed} - {None})
    return {"server_tpot_ms": dist([t * 1e3 for t in tpot]), "server_itl_ms": dist([x * 1e3 for x in itl]),
            "server_timed_requests": len(timed), "server_bursty_streams": bursty,
            "server_timing_clock": "; ".join(clocks) or None, "server_figures_invalid": reason,
            "server_itl_na": None if reason or itl else
            "the server reports only its first and last token times, not each step's"}


def server_invalid(records: list[dict]) -> str | None:
    """Why these requests (one repeat of one cell) have no server-timed figures, or None where they have them."""
    return server_figures(records)["server_figures_invalid"]


def burst_attribution(records: list[dict]) -> dict:
    """For each bursty stream (is_bursty, on the client's clock), where the burst arose: `in_server` where the
    server produced the tokens in a burst too (server_bursty), `after_server` where the server produced them
    smoothly and they were held back on the way (the server's HTTP front end, the client, or the shared box),
    `unattributed` where the request carries no server timing."""
    counts = {"bursts_in_server": 0, "bursts_after_server": 0, "bursts_unattributed": 0}
    for r in records:
        chunks = token_chunks(r) if r["ok"] else None
        if not chunks or not is_bursty(chunks, r["e2e_s"]):
            continue
        where = server_bursty(r)
        counts["bursts_unattributed" if where is None else "bursts_in_server" if where else "bursts_after_server"] += 1
    return counts


def tpot_agreement(records: list[dict]) -> dict:
    """The client's streamed TPOT against the server's on the requests that have both (so only smooth client
    streams): the median per-request ratio client / server, and a flag where it lies outside 1 / (1 +
    TPOT_AGREEMENT) .. 1 + TPOT_AGREEMENT. None where no request has both."""
    pairs = [(c, s) for r in records if (c := request_tpot(r)) and (s := request_server_tpot(r))]
    if not pairs:
        return {"tpot_client_over_server": None, "tpot_compared_requests": 0, "tpot_sources_disagree": None}
    ratio = float(np.median([c / s for c, s in pairs]))
    bad = not 1 / (1 + TPOT_AGREEMENT) <= ratio <= 1 + TPOT_AGREEMENT
    return {"tpot_client_over_server": ratio, "tpot_compared_requests": len(pairs),
            "tpot_sources_disagree": (f"the client's streamed TPOT is {ratio:.3g}x the server's (median over "
                                      f"{len(pairs)} smooth requests), outside the {TPOT_AGREEMENT:.0%} tolerance")
            if bad else None}


def timing_figures(records: list[dict]) -> dict:
    """Every server-timed figure of one bench cell (server_figures, burst_attribution, tpot_agreement), and
    `tpot_source`: which TPOT the cell has, `server` where the server's holds, else `client stream` where the
    streamed one holds, else None."""
    out = {**server_figures(records), **burst_attribution(records), **tpot_agreement(records)}
    streamed_ok = streamed_invalid(records) is None
    out["tpot_source"] = "server" if out["server_figures_invalid"] is None else \
        "client stream" if streamed_ok else None
    return out


# ---- degenerate answers, starved streams, steady state (issue #30; docs/timing.md#answers-and-streams) --------
REPEAT_NGRAM = 16          # characters: the n-gram whose repeats the repetition figure counts
REPEAT_MIN_CHARS = 2 * REPEAT_NGRAM   # a shorter answer cannot hold an n-gram twice without it covering most of it
DEGENERATE_REPETITION = 0.5   # an answer is degenerate when at least this share of it repeats an earlier n-gram
DEGENERATE_SHARE = 0.1     # above this share of degenerate answers, a cell's (and its pair's) verdict is withheld


def repetition(text: str | None) -> float | None:
    """The share of an answer's characters (runs of spaces and tabs collapsed to one space, so that indented code is
    not a repeat of its indentation; newlines kept, so that an answer of newlines alone still counts) covered by a
    REPEAT_NGRAM-character n-gram that occurred earlier in the same answer: 0 for an answer that never repeats
    itself, near 1 for one that loops ("and and and ..."). Characters, not tokens: every backend keeps the answer's
    text, a loop with no space in it (a sub-word repeated) counts too, and one definition holds across tokenizers.
    None for an answer shorter than REPEAT_MIN_CHARS."""
    s = re.sub(r"[ \t]+", " ", text or "")
    if len(s) < REPEAT_MIN_CHARS:
        return None
    seen, covered, end = set(), 0, 0
    for i in range(len(s) - REPEAT_NGRAM + 1):
        gram = s[i:i + REPEAT_NGRAM]
        if gram in seen:
            covered += i + REPEAT_NGRAM - max(i, end)
            end = i + REPEAT_NGRAM
        else:
            seen.add(gram)
    return covered / len(s)


def answer_figures(records: list[dict]) -> dict:
    """The finished answers' repetition (each answer's `repetition`: its median and p90 over the cell), how many
    were judged (long enough) and how many are degenerate (repetition >= DEGENERATE_REPETITION), their share of
    the judged ones, and `answers_degenerate`: why the cell's verdict is withheld, where more than DEGENERATE_SHARE
    of its judged answers are degenerate (a speedup on text that loops says nothing of the drafter: a loop is easy
    to draft, for the baseline's target as for the cell's), else None. A record whose `answer_not_judged` says why
    its text is no model's answer (random weights, a set acceptance: cells.answers_not_judged) is not judged,
    and `answers_na` says so."""
    reps = [x for r in records if r.get("ok") and not r.get("answer_not_judged")
            and (x := repetition(r.get("text"))) is not None]
    unjudged = next((r["answer_not_judged"] for r in records if r.get("ok") and r.get("answer_not_judged")), None)
    bad = sum(x >= DEGENERATE_REPETITION for x in reps)
    share = bad / len(reps) if reps else None
    reason = (f"{bad} of {len(reps)} answers degenerate (at least {DEGENERATE_REPETITION:.0%} of the answer repeats "
              f"an earlier {REPEAT_NGRAM}-character n-gram), above the {DEGENERATE_SHARE:.0%} a cell may have"
              ) if share is not None and share > DEGENERATE_SHARE else None
    q = quantiles(reps)
    return {"repetition": {"median": q["p50"], "p90": q["p90"], "max": max(reps) if reps else None},
            "answers_judged": len(reps), "degenerate_answers": bad, "degenerate_share": share,
            "answers_degenerate": reason, "answers_na": f"not judged: {unjudged}" if unjudged and not reps else None}


def degenerate_reason(records: list[dict]) -> str | None:
    """Why these requests' (one repeat of one cell) speedup gets no verdict, or None (answer_figures)."""
    return answer_figures(records)["answers_degenerate"]


STARVED_SHARE = 0.25       # a stream below this share of the cell's median decode rate (per step) starves


def request_decode_tok_s(record: dict, source: str) -> float | None:
    """A finished request's decode rate, tokens per second after its first token, by one clock: `server` (1 /
    request_server_tpot) or `client stream` (1 / request_tpot); None where that TPOT is undefined for it."""
    tpot = request_server_tpot(record) if source == "server" else request_tpot(record)
    return 1 / tpot if tpot else None


def request_acceptance_length(record: dict) -> float:
    """1 + accepted / steps from the request's own spec-decode figures (request_spec), 1 where it has none (a
    baseline: one token per step; a speculative request without its own figures: per token, said by the flag)."""
    spec = request_spec(record, 0)
    steps = (spec or {}).get("num_spec_steps") or 0
    return 1 + spec["num_accepted_draft_tokens"] / steps if steps else 1.0


def stream_figures(records: list[dict], concurrency: int) -> dict:
    """At concurrency above 1, the spread of the finished requests' decode rates (request_decode_tok_s, by the
    cell's TPOT source: the server's where its figures hold, else the client's stream): p10, p50, p90 and
    min / max; `starved_streams`, the streams whose rate per verify step (decode tok/s over the request's own
    acceptance length, so a prompt that accepts less is not taken for a starved one) is below STARVED_SHARE of
    the cell's median, or, where one stream is above 1 / STARVED_SHARE of the median (one served, the rest
    starved by it), below STARVED_SHARE of that stream's; `stream_starvation` says so in a line. Blank, with
    `stream_spread_na`, at concurrency 1, with fewer than two rates, or where neither TPOT holds."""
    blank = {"decode_tok_s": dict.fromkeys(("p10", "p50", "p90", "min", "max", "min_over_max")),
             "decode_tok_s_source": None, "starved_streams": None, "stream_starvation": None}
    source = "server" if server_invalid(records) is None else "client stream" if streamed_invalid(records) is None         else None
    if concurrency <= 1:
        return {**blank, "stream_spread_na": "concurrency 1: one stream at a time, nothing to share"}
    if source is None:
        return {**blank, "stream_spread_na": f"no TPOT holds: the server's: {server_invalid(records)}; the "
                                             f"client's: {streamed_invalid(records)}"}
    rated = [(x, x / request_acceptance_length(r)) for r in records if r.get("ok")
             and (x := request_decode_tok_s(r, source)) is not None]
    if len(rated) < 2:
        return {**blank, "stream_spread_na": f"{len(rated)} finished request(s) with a decode rate: no spread"}
    rates, steps = [x for x, _ in rated], [s for _, s in rated]
    median, top = float(np.median(steps)), max(steps)
    floor = STARVED_SHARE * (top if top > median / STARVED_SHARE else median)
    starved = sum(s < floor for s in steps)
    per = "verify step" if any(request_spec(r, 0) for r in records if r.get("ok")) else "token"
    flag = None
    if starved and top > median / STARVED_SHARE:
        flag = (f"one stream decoded at {top / median:.1f}x the median rate per {per}, and {starved} of {len(steps)} "
                f"streams at under {STARVED_SHARE:.0%} of its rate: starved by it")
    elif starved:
        flag = (f"{starved} of {len(steps)} streams decoded at under {STARVED_SHARE:.0%} of the median rate per "
                f"{per} (the slowest at {min(steps) / median:.2f}x)")
    q = quantiles(rates)
    return {"decode_tok_s": {**q, "min": min(rates), "max": max(rates), "min_over_max": min(rates) / max(rates)},
            "decode_tok_s_source": source, "starved_streams": starved, "stream_starvation": flag,
            "stream_spread_na": None}


STEADY_MIN_CHUNKS = 5      # per stream in the window, or the steady-state figure is blank (too short to count)


def _decoding_spans(records: list[dict]) -> list[tuple[float, float, list[tuple[float, int]]]] | str:
    """Each finished request's (first token, last token, its chunks) on the cell's clock (start_s + chunk times),
    or why they cannot be placed."""
    ok = [r for r in records if r.get("ok")]
    if any(r.get("start_s") is None for r in ok):
        return "a request carries no start time, so the streams cannot be placed against each other"
    spans = []
    for r in ok:
        chunks = token_chunks(r)
        if chunks is None:
            return "a request carries no per-chunk token counts"
        if chunks:
            shifted = [(r["start_s"] + t, n) for t, n in chunks]
            spans.append((shifted[0][0], shifted[-1][0], shifted))
    return spans


def steady_figures(records: list[dict], concurrency: int) -> dict:
    """Throughput at full load, beside the whole run's: output tokens over the time in which every stream the cell
    runs at once (its concurrency, or its requests where fewer) is decoding, each between its first and its last
    token on the client's clock (chunk arrival; for the local engine, its own step times). With as many requests as
    streams that is one window, from the last first token to the first finish; with more, the union of such
    stretches (a finished stream's slot is refilled, and the newcomer's prefill leaves the window until its first
    token). A token counts where its chunk arrived inside the window (left end open: the chunk that opens it was
    made by a prefill). `steady_window_s` is the window's length. Blank, with `steady_na`, at concurrency 1, where
    the streams are bursty beyond the cell's share (chunk times then do not say when tokens were made), where a
    record cannot be placed, where the window is empty, or shorter than STEADY_MIN_CHUNKS chunks per stream."""
    blank = {"steady_output_tok_s": None, "steady_window_s": None, "steady_tokens": None}
    if concurrency <= 1:
        return {**blank, "steady_clock": None, "steady_na": "concurrency 1: the whole run is one stream"}
    clock = "local engine (its own step times)" if any((r.get("server_timing") or {}).get("step_t_s")
                                                        for r in records) else "client (chunk arrival)"
    spans = _decoding_spans(records)
    if isinstance(spans, str):
        return {**blank, "steady_clock": clock, "steady_na": spans}
    bursts = streamed_invalid(records)
    if bursts:
        return {**blank, "steady_clock": clock, "steady_na": f"the client's chunk times do not say when tokens "
                                                             f"were made: {bursts}"}
    width = min(concurrency, len(spans))
    events = sorted([(a, 1) for a, _, _ in spans] + [(b, -1) for _, b, _ in spans], key=lambda e: (e[0], -e[1]))
    windows, live = [], 0
    for t, step in events:
        if live >= width and windows and windows[-1][1] is None:
            windows[-1][1] = t
        live += step
        if live >= width and (not windows or windows[-1][1] is not None):
            windows.append([t, None])
    windows = [(a, b) for a, b in windows if b is not None and b > a]
    length = sum(b - a for a, b in windows)
    chunks = [(t, n) for _, _, cs in spans for t, n in cs if any(a < t <= b for a, b in windows)]
    tokens = sum(n for _, n in chunks)
    if width < 2 or not length:
        return {**blank, "steady_clock": clock, "steady_na": f"no moment at which all {width} streams were decoding "
                                                             "at once"}
    if len(chunks) < STEADY_MIN_CHUNKS * width:
        return {**blank, "steady_clock": clock,
                "steady_na": f"the window ({length * 1e3:.3g} ms) holds {len(chunks)} chunks, fewer than "
                             f"{STEADY_MIN_CHUNKS} per stream for {width} streams: too short to count"}
    return {"steady_output_tok_s": tokens / length, "steady_window_s": length, "steady_tokens": tokens,
            "steady_clock": clock, "steady_na": None}


def quality_figures(records: list[dict], concurrency: int) -> dict:
    """A bench cell's answers and streams (answer_figures, stream_figures, steady_figures): run_bench_cell adds
    them to every backend's metrics.json, since they need the cell's concurrency."""
    return {**answer_figures(records), **stream_figures(records, concurrency), **steady_figures(records, concurrency)}


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
        **timing_figures(records),
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


# ---- issue #30 item 8: a set acceptance, asked against realised (docs/methods.md#a-set-acceptance-asked-and-realised)
# A set-acceptance cell (sweep.set_acceptance) accepts each verify step's drafts by a set schedule: P(step keeps at
# least i drafts) = r_i, unconditional, whatever the drafts are. Its acceptance length is then a sum of independent
# draws, one per step, with a known mean and variance given how many drafts each step offered (a step cut short at the
# budget edge, as the local engine cuts its last one, offers fewer than K and keeps at most those). The cell is
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
