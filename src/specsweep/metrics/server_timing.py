"""A request's timing as the server measured it, from a record's `server_timing` (docs/timing.md): server TPOT,
server ITL, whether a bursty stream was the server's burst (`burst_attribution`) and how the client's streamed
TPOT agrees with the server's (`tpot_agreement`)."""
from __future__ import annotations

import numpy as np

from specsweep.metrics.client_timing import (
    BURST_SHARE,
    MAX_BURSTY_SHARE,
    is_bursty,
    per_token_itl,
    request_tpot,
    streamed_invalid,
    token_chunks,
)
from specsweep.metrics.distributions import dist

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
