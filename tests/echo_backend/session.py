"""The echo backend's session: every turn is answered with its own words, one token a word."""
from __future__ import annotations

from contextlib import contextmanager

from specsweep import metrics
from specsweep.run.bench_cell import Measurement

from . import VERSION


class EchoSession:
    """A speculative cell's session drafts K tokens a step and accepts none (a step per token after the first), so
    its speculation engaged (metrics.never_drafted)."""
    log_path = None

    def __init__(self, k: int = 0):
        self.k = k

    def alive(self) -> bool:
        return True

    def log_tail(self) -> str:
        return ""

    def measure(self, prompts: list[list[str]], bench: dict, progress: bool, desc: str) -> Measurement:
        rows = []
        for i, turns in enumerate(prompts):
            for turn, text in enumerate(turns):
                n = max(2, len(text.split()))
                rows.append({"index": i, "turn": turn, "ok": True, "error": None, "text": text, "prompt_tokens": n,
                             "completion_tokens": n, "ttft_s": 0.01, "e2e_s": 0.01 * n, "itl_s": [],
                             "chunk_t_s": [0.01 * t for t in range(1, n + 1)], "chunk_tokens": [1] * n,
                             **({"acceptance_lengths": [1] * (n - 1)} if self.k else {})})
        figures = metrics.request_figures(rows, 0.01 * len(rows))
        lengths = [a for r in rows for a in r.get("acceptance_lengths", [])]
        figures.update(spec_decode=metrics.acceptance_from_lengths(lengths, self.k + 1) if self.k else None,
                       backend="echo", echo_version=VERSION)
        return Measurement(rows, figures)


@contextmanager
def open_session(grid, sid: str, progress: bool = True, how=None):
    spec = grid.servers[sid].spec
    yield EchoSession(spec["num_speculative_tokens"] if spec["method"] != "none" else 0)
