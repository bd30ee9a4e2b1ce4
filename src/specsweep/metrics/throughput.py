"""Throughput and latency over one bench cell's measured requests (`request_figures`), the client's and the
server's timing figures among them."""
from __future__ import annotations

from specsweep.metrics.client_timing import output_length, streamed_figures
from specsweep.metrics.distributions import dist
from specsweep.metrics.server_timing import timing_figures


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
