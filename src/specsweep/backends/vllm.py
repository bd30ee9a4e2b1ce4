"""vLLM: one `vllm serve` per server cell; acceptance from the deltas of its Prometheus counters."""
from __future__ import annotations

import asyncio
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from .. import client, metrics, promstats, vllm_cmd
from ..bench_cell import Measurement
from ..cells import Grid
from ..server import Server


def server_for(grid: Grid, sid: str, log_dir: Path | None = None) -> Server:
    """The `vllm serve` process of a server cell, not started yet."""
    cell = grid.servers[sid]
    command = vllm_cmd.server_command(cell.run)
    python = vllm_cmd.interpreter_of(command)
    version = (vllm_cmd.probe_python(python).get("vllm") if python else None) or "unknown"
    name = cell.served_name
    return Server(lambda port: vllm_cmd.build_argv(command, cell.spec, cell.run["host"], port, name), cell.run,
                  log_dir or grid.server_dir(sid) / "logs", env=cell.spec["server"]["env"], gpus_needed=cell.gpus,
                  served_name=name, kind="vLLM", record={"python": python, "vllm_version": version})


async def measure(url: str, prompts: list[list[str]], settings: client.ChatSettings, concurrency: int,
                  warmup: int, progress: bool = True, desc: str = "requests") -> tuple[list[dict], dict]:
    """Warm up, scrape /metrics, send every prompt, scrape again: request records and cell figures."""
    if warmup:
        await client.run_requests(url, prompts[:warmup], settings, concurrency, progress=False)
    before = promstats.parse_counters(await client.scrape(url), settings.model)
    records, wall = await client.run_requests(url, prompts, settings, concurrency, progress=progress, desc=desc)
    rows = [r.as_dict() for r in records]
    figures = metrics.request_figures(rows, wall)
    try:
        after = promstats.parse_counters(await client.scrape(url), settings.model)
    except httpx.HTTPError as e:
        figures["scrape_error"] = f"{type(e).__name__}: {e}"
        return rows, figures
    delta = after - before
    figures["spec_decode"] = promstats.acceptance(delta) if delta.drafts else None
    figures["spec_counters_delta"] = promstats.counters_dict(delta)
    return rows, figures


class VllmSession:
    def __init__(self, srv: Server, run: dict):
        self.srv, self.run = srv, run
        self.log_path = srv.log_path

    def alive(self) -> bool:
        return self.srv.alive()

    def log_tail(self) -> str:
        return self.srv.log_tail()

    def measure(self, prompts: list[list[str]], bench: dict, progress: bool, desc: str) -> Measurement:
        settings = client.ChatSettings(model=self.srv.served_name, max_tokens=bench["max_tokens"],
                                       temperature=bench["temperature"], seed=bench["seed"],
                                       thinking=bench["thinking"], timeout_s=self.run["request_timeout_s"])
        try:
            rows, figures = asyncio.run(measure(self.srv.url, prompts, settings, bench["concurrency"],
                                                bench["warmup"], progress, desc))
        except httpx.HTTPError as e:           # /metrics did not answer before the requests started
            rows, figures = [], {"scrape_error": f"{type(e).__name__}: {e}"}
        failure = "server died during the cell" if not self.srv.alive() else \
            f"/metrics failed: {figures['scrape_error']}" if "scrape_error" in figures else None
        figures.update(backend="vllm", vllm_version=self.srv.info.get("vllm_version"),
                       server_python=self.srv.info.get("python"))
        return Measurement(rows, figures, failure)


@contextmanager
def open_session(grid: Grid, sid: str, progress: bool = True) -> Iterator[VllmSession]:
    t0 = time.monotonic()
    with server_for(grid, sid) as srv:
        print(f"[specsweep] {sid}: vLLM ready on {srv.url} in {time.monotonic() - t0:.0f} s "
              f"(vLLM {srv.info['vllm_version']}, {srv.info['python']})", flush=True)
        yield VllmSession(srv, grid.servers[sid].run)
