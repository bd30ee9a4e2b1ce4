"""The echo backend's session: every turn is answered with its own words, one token a word."""
from __future__ import annotations

from contextlib import contextmanager

from specsweep import metrics
from specsweep.bench_cell import Measurement

from . import VERSION


class EchoSession:
    log_path = None

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
                             "chunk_t_s": [0.01 * t for t in range(1, n + 1)], "chunk_tokens": [1] * n})
        figures = metrics.request_figures(rows, 0.01 * len(rows))
        figures.update(spec_decode=None, backend="echo", echo_version=VERSION)
        return Measurement(rows, figures)


@contextmanager
def open_session(grid, sid: str, progress: bool = True, how=None):
    yield EchoSession()
