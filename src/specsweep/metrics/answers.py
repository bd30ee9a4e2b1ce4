"""Of a cell's answers and its streams (`quality_figures`): repetition and degenerate answers, per-request decode
rates and starved streams, and the steady-state output rate while every stream decodes."""
from __future__ import annotations

import re

import numpy as np

from specsweep.metrics.client_timing import request_tpot, streamed_invalid, token_chunks
from specsweep.metrics.distributions import quantiles
from specsweep.metrics.server_timing import request_server_tpot, server_invalid
from specsweep.metrics.spec_decode import request_spec

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
