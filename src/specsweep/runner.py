"""One server cell: start vLLM once, run each of its unfinished bench cells, stop vLLM (or, for the
`local` backend, load the in-process engine once).

A bench cell is finished when its metrics.json exists; that file is written last, atomically, so a
crash never leaves a cell that a rerun would trust. Finished cells are never touched again.
"""
from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx

from . import client, metrics, promstats
from .cells import Grid
from .datasets import load_prompts
from .results import atomic_write_json, atomic_write_jsonl, atomic_write_yaml, read_json, read_jsonl
from .errors import CellError, ServerError
from .server import Server


def served_name(spec: dict) -> str:
    return Path(spec["target"].rstrip("/")).name


def cell_config(grid: Grid, sid: str, bid: str) -> dict:
    """The resolved config saved with every bench cell: the job config plus both cell specs and ids."""
    cell = grid.servers[sid]
    return {"study": cell.study, "server_cell": sid, "bench_cell": bid,
            "baseline_cell": grid.baseline_of.get(sid), "pair": cell.pair,
            "server_spec": cell.spec, "bench_spec": grid.benches[sid][bid].spec,
            "job_config": grid.configs[sid]}


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


def run_bench_cell(grid: Grid, sid: str, bid: str, srv: Server, progress: bool = True) -> dict:
    bench = grid.benches[sid][bid].spec
    cell = grid.servers[sid]
    out = grid.bench_dir(sid, bid)
    out.mkdir(parents=True, exist_ok=True)
    prompts, skipped = load_prompts(grid.dataset_file(bench["dataset"]), bench["dataset"])
    settings = client.ChatSettings(model=srv.served_name, max_tokens=bench["max_tokens"],
                                   temperature=bench["temperature"], seed=bench["seed"],
                                   thinking=bench["thinking"], timeout_s=cell.run["request_timeout_s"])
    atomic_write_yaml(out / "config.yaml", cell_config(grid, sid, bid))
    try:
        rows, figures = asyncio.run(measure(srv.url, prompts, settings, bench["concurrency"], bench["warmup"],
                                            progress, desc=f"{sid}/{bid}"))
    except httpx.HTTPError as e:           # /metrics did not answer before the requests started
        rows, figures = [], {"scrape_error": f"{type(e).__name__}: {e}"}
    atomic_write_jsonl(out / "requests.jsonl", rows)
    if not srv.alive() or "scrape_error" in figures:
        reason = "server died during the cell" if not srv.alive() else f"/metrics failed: {figures['scrape_error']}"
        atomic_write_json(out / "failed.json", {"reason": reason, "requests_kept": len(rows),
                                                "server_log": str(srv.log_path)})
        raise CellError(f"bench cell {sid}/{bid}: {reason} ({sum(r['ok'] for r in rows)} of {len(rows)} requests "
                        f"finished and are kept in {out / 'requests.jsonl'}); log {srv.log_path}, last lines:\n"
                        f"{srv.log_tail()}")
    figures["dataset_lines_skipped"] = skipped
    figures["valid"] = figures["error_rate"] <= bench["max_error_rate"]
    figures.update(compare_with_baseline(grid, sid, bid, figures, rows))
    figures.update(server_cell=sid, bench_cell=bid, vllm_version=srv.info.get("vllm_version"),
                   server_python=srv.info.get("python"), server_log=str(srv.log_path))
    link = out / "server.log"
    link.unlink(missing_ok=True)
    link.symlink_to(os.path.relpath(srv.log_path, out))
    (out / "failed.json").unlink(missing_ok=True)
    atomic_write_json(out / "metrics.json", figures)
    return figures


def compare_with_baseline(grid: Grid, sid: str, bid: str, figures: dict, rows: list[dict]) -> dict:
    if grid.servers[sid].is_baseline:
        return {"speedup_output_tok_s": 1.0, "speedup_tpot": 1.0, "greedy_agreement": 1.0, "baseline_cell": sid}
    base = grid.baseline_of.get(sid)
    if base is None or not grid.metrics_path(base, bid).exists():
        return {"speedup_output_tok_s": None, "speedup_tpot": None, "greedy_agreement": None, "baseline_cell": None}
    base_fig = read_json(grid.metrics_path(base, bid))
    out = metrics.speedup(figures, base_fig)
    greedy = grid.benches[sid][bid].spec["temperature"] == 0
    out["greedy_agreement"] = metrics.greedy_agreement(rows, read_jsonl(grid.bench_dir(base, bid) / "requests.jsonl")) \
        if greedy else None
    out["baseline_cell"] = base
    return out


def run_server_cell(grid: Grid, sid: str, marker: str | Path, progress: bool = True) -> None:
    """Run every unfinished bench cell of one server cell, then write the job's marker."""
    cell = grid.servers[sid]
    pending = grid.pending(sid)
    failures: list[str] = []
    if pending and cell.spec["server"]["backend"] == "local":
        from .local import run_local_server_cell

        failures = run_local_server_cell(grid, sid, pending, progress)
    elif pending:
        t0 = time.monotonic()
        srv = Server(cell.spec, cell.run, grid.server_dir(sid) / "logs", gpus_needed=cell.gpus,
                     served_name=served_name(cell.spec))
        try:
            with srv:
                print(f"[specsweep] {sid}: vLLM ready on {srv.url} in {time.monotonic() - t0:.0f} s "
                      f"(vLLM {srv.info['vllm_version']}, {srv.info['python']})", flush=True)
                for bid in pending:
                    try:
                        run_bench_cell(grid, sid, bid, srv, progress)
                        print(f"[specsweep] {sid}/{bid}: done", flush=True)
                    except (CellError, OSError) as e:
                        failures.append(str(e))
                        print(f"[specsweep] {sid}/{bid}: FAILED: {e}", flush=True)
                    if not srv.alive():
                        break
        except ServerError as e:
            raise CellError(f"server cell {sid}: {e}") from None
    missing = grid.pending(sid)
    if missing:
        first = failures[0].splitlines()[0] if failures else "the server stopped before they ran"
        raise CellError(f"server cell {sid}: {len(missing)} bench cell(s) not finished ({', '.join(missing)}); "
                        f"first: {first}\n" + "\n".join(failures))
    Path(marker).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(marker, {"server_cell": sid, "finished_at": time.time()})
