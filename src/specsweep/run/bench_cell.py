"""One bench cell's bookkeeping, whatever the backend: its config, its files, its baseline comparison.

A bench cell is finished when its metrics.json exists; that file is written last, atomically, so a
crash never leaves a cell that a rerun would trust. A cell whose figures cannot be trusted gets
failed.json instead, and the requests that finished stay in requests.jsonl.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from specsweep import metrics
from specsweep.core import layout
from specsweep.core.errors import CellError, ServerError
from specsweep.core.results import atomic_write_json, atomic_write_jsonl, atomic_write_yaml, read_json, read_jsonl
from specsweep.grid.cells import Grid
from specsweep.grid.datasets import load_prompt_rows, prompts_digest
from specsweep.metrics import divergence, phases
from specsweep.verdicts import stats


@dataclass
class Measurement:
    """What a backend measured for one bench cell, in the neutral shape: each row's own spec-decode figures,
    where it has them, are its `spec` in metrics.request_spec's names (or the local engine's per-step
    `acceptance_lengths`)."""
    rows: list[dict]                 # one record per request (prompt x turn), as requests.jsonl keeps them
    figures: dict                    # the cell's figures: throughput, latency, spec_decode, backend facts
    failure: str | None = None       # why the figures cannot be trusted (the server died, /metrics failed)
    # Whether figures["spec_decode"] was counted apart from the rows (vLLM's counters, the engine's steps), so the
    # rows' own figures are checked against it; False: it is their sums already, and the backend says where
    # they came from in figures["spec_decode_source"].
    counted: bool = True
    # The per-request figures the server was asked for (vLLM's --per-request-spec-decode-metrics level), or
    # None: a cell whose finished requests then carry none fails.
    per_request_asked: str | None = None


class Session(Protocol):
    """A backend's open server session for one server cell (see backends/)."""
    log_path: Path | None            # the server's log for this launch, linked from each bench cell

    def alive(self) -> bool: ...

    def log_tail(self) -> str: ...

    def measure(self, prompts: list[list[str]], bench: dict, progress: bool, desc: str) -> Measurement: ...


def cell_config(grid: Grid, sid: str, bid: str) -> dict:
    """The resolved config saved with every bench cell: the job config plus both cell specs and ids."""
    cell = grid.servers[sid]
    out = {"study": cell.study, "server_cell": sid, "bench_cell": bid,
           "baseline_cell": grid.baseline_of.get(sid), "pair": cell.pair,
           "server_spec": cell.spec, "bench_spec": grid.benches[sid][bid].spec,
           "job_config": grid.configs[sid]}
    if cell.source:      # a replay's rates (sweep.set_acceptance {rates_from: DIR}): where they came from
        out["set_acceptance_source"] = cell.source
    return out


def greedy_agreement_na(grid: Grid, sid: str, bid: str) -> str | None:
    """Why a speculative cell's text need not equal its baseline's, or None where greedy agreement applies."""
    if grid.servers[sid].sets_acceptance:
        return "set acceptance: drafts are accepted at a set rate, not by the target, so the text is not the target's"
    if grid.benches[sid][bid].spec["temperature"] != 0:
        return "sampled (temperature > 0): the text differs from the baseline's by chance"
    return None


def compare_with_baseline(grid: Grid, sid: str, bid: str, figures: dict, rows: list[dict]) -> dict:
    """The cell against its matched baseline (the same bench id under the baseline server cell): the output
    tok/s ratio, greedy agreement, and the per-request paired speedups with their CIs and verdict (stats.py;
    the streamed-TPOT one only where both cells' streams pass their check)."""
    if grid.servers[sid].is_baseline:
        return {"speedup_output_tok_s": 1.0, "greedy_agreement": 1.0, "greedy_agreement_na": None,
                "baseline_cell": sid}
    base = grid.baseline_of.get(sid)
    if base is None or not grid.metrics_path(base, bid).exists():
        return {"speedup_output_tok_s": None, "greedy_agreement": None,
                "greedy_agreement_na": "no finished matched baseline", "baseline_cell": None,
                **stats.paired_speedup([], [])}
    base_fig = read_json(grid.metrics_path(base, bid))
    base_rows = read_jsonl(grid.bench_dir(base, bid) / layout.REQUESTS)
    out = {"speedup_output_tok_s": metrics.speedup_output_tok_s(figures["output_tok_s"], base_fig["output_tok_s"])}
    out["greedy_agreement_na"] = greedy_agreement_na(grid, sid, bid) or metrics.agreement_na(rows, base_rows)
    out["greedy_agreement"] = None if out["greedy_agreement_na"] else metrics.greedy_agreement(rows, base_rows)
    out.update(stats.paired_speedup([rows], [base_rows], sides=("this cell", "the baseline")))
    out["baseline_cell"] = base
    out["graph_asymmetry"] = graph_asymmetry(figures, base_fig, rows, base_rows)
    return out


def probe_divergences(grid: Grid, sid: str, bid: str, figures: dict, rows: list[dict], session: Session) -> dict:
    """Where this cell's greedy text leaves its baseline's (sweep.divergence; metrics/divergence.py): each first
    differing token, probed on this cell's own server after its timing (the session's next_token_logprobs, where its
    backend has one); nothing where the texts agree or greedy agreement does not apply."""
    if figures.get("greedy_agreement") in (None, 1.0):
        return {}
    found, why = divergence.located(rows, read_jsonl(grid.bench_dir(figures["baseline_cell"], bid) / layout.REQUESTS))
    probe = getattr(session, "next_token_logprobs", None)
    if probe is None:
        return divergence.explained([], "; ".join(filter(None, [why, f"{len(found)} divergence(s) not probed: this "
                                                                       "backend has no log-probability probe"])))
    for p in found:
        try:
            p["logprobs"] = probe(p["prefix"], divergence.TOP)
        except ServerError as e:
            p["error"] = str(e)
    return divergence.explained(found, why)


def graph_asymmetry(figures: dict, base_fig: dict, rows: list[dict], base_rows: list[dict]) -> str | None:
    """Why the cell's prefills ran in CUDA graphs where its baseline's ran outside any (each server's largest graph,
    `cuda_graph_max_tokens`, against the longest prompt both sent), or None: a baseline's graphs stop at
    2 x max_num_seqs tokens and a speculative member's at 2 x max_num_seqs x (1 + K) (backends/vllm/graphs.py), so at a
    small --max-num-seqs only the baseline's prefills run eagerly, and the e2e speedup measures that (the H100 MoE
    pair at --max-num-seqs 3: docs/campaigns/2026-12-06-h100-moe-and-waves.md)."""
    cell_max, base_max = figures.get("cuda_graph_max_tokens"), base_fig.get("cuda_graph_max_tokens")
    longest = max((r.get("prompt_tokens") or 0 for r in [*rows, *base_rows] if r.get("ok")), default=0)
    if not cell_max or base_max is None or longest <= base_max or longest > cell_max:
        return None
    return (f"its baseline's prefills ({longest} tokens at most) ran outside CUDA graphs, whose largest is "
            f"{base_max} tokens there, where this cell's ran inside (up to {cell_max}): the e2e speedup measures the "
            f"graphs; give both servers --max-num-seqs {-(-longest // 2)} or more, or shorter prompts")


def invalidate(figures: dict, reason: str | None) -> None:
    """Mark a cell invalid for `reason` too, beside any reason it has."""
    if reason:
        figures["valid"] = False
        figures["invalid_reason"] = "; ".join(filter(None, [figures.get("invalid_reason"), reason]))


PER_PROMPT_KEYS = ("mean_acceptance_length_per_prompt", "acceptance_length_per_prompt", "acceptance_length_histogram",
                   "requests_without_drafts")


def add_per_request_acceptance(figures: dict, m: Measurement, num_spec_tokens: int) -> str | None:
    """Add the per-prompt acceptance, from each request's own figures, to the token-weighted spec_decode
    figures, after checking that the requests' sums equal its counts (where it was counted apart from them);
    returns why the cell's acceptance cannot be trusted, or None. Without per-request figures the cell keeps
    the counters' figures alone."""
    per_request = metrics.per_request_acceptance(m.rows, num_spec_tokens)
    level = m.per_request_asked
    if m.counted:
        figures["spec_decode_source"] = "per_request" if per_request else "counters"
    if per_request is None:
        return None if level in (None, "none") or not figures["requests_completed"] else \
            f"the server was asked for per-request spec-decode metrics ({level}) but no response carried them"
    if per_request["requests_without_figures"]:
        return (f"{per_request['requests_without_figures']} of {figures['requests_completed']} finished requests "
                "carry no per-request spec-decode figures")
    problem = None
    if not figures["requests_errored"] and m.counted:   # an errored request's steps are counted, in no row
        problem = metrics.spec_mismatch(per_request, figures.get("spec_decode"))
        figures["spec_decode_exact"] = problem is None
    if figures.get("spec_decode"):
        figures["spec_decode"].update({k: per_request[k] for k in PER_PROMPT_KEYS})
    return problem


def lengthen_prompts(grid: Grid, sid: str, prompts: list[list[str]], length: int | None) -> dict | None:
    """The prompts set to `length` tokens of the target's tokenizer (datasets.lengthen), and their first turns'
    token counts re-encoded (min, max: the check that the cut text encodes to the length); None where unset."""
    if length is None:
        return None
    from transformers import AutoTokenizer

    from specsweep.grid.datasets import lengthen

    tok = AutoTokenizer.from_pretrained(grid.servers[sid].spec["tokenizer"])
    encode = lambda text: tok(text, add_special_tokens=False).input_ids  # noqa: E731
    out = lengthen(prompts, length, encode, tok.decode)
    counts = [len(encode(p[0])) for p in out]
    return {"prompts": out, "tokens": {"set": length, "min": min(counts), "max": max(counts)}}


def output_length_warning(grid: Grid, sid: str, bid: str, figures: dict) -> str | None:
    """A warning when this cell's mean output length is not its baseline's (see metrics.length_mismatch)."""
    base = grid.baseline_of.get(sid)
    if base is None or not grid.metrics_path(base, bid).exists():
        return None
    return metrics.length_mismatch(figures, read_json(grid.metrics_path(base, bid)))


def refresh_comparisons(grid: Grid, base: str, bid: str) -> None:
    """A baseline cell just finished: its speculative cells at the same bench id that finished before it (a group's
    turns rotate, so a K cell's repeat can run before its baseline's) get their comparison now, rewritten in place."""
    for sid, of in grid.baseline_of.items():
        if of != base or not grid.metrics_path(sid, bid).exists():
            continue
        figures = read_json(grid.metrics_path(sid, bid))
        if figures.get("baseline_cell"):
            continue
        rows = read_jsonl(grid.bench_dir(sid, bid) / layout.REQUESTS)
        figures.update(compare_with_baseline(grid, sid, bid, figures, rows))
        if grid.benches[sid][bid].spec.get("divergence") and figures.get("greedy_agreement") not in (None, 1.0):
            figures.update(divergence.explained([], "this cell ran before its baseline's, so its server was not "
                                                    "probed (divergence.located finds where its texts part)"))
        invalidate(figures, figures["graph_asymmetry"])
        figures["output_length_warning"] = output_length_warning(grid, sid, bid, figures)
        atomic_write_json(grid.metrics_path(sid, bid), figures)


def run_bench_cell(grid: Grid, sid: str, bid: str, session: Session, progress: bool = True,
                   context: dict | None = None, warm: bool = False) -> dict:
    """Measure one bench cell on an open session and write its files; metrics.json last. `context`: how its
    server was kept (residency.Launch.facts), recorded with its figures; `warm`: the server took a turn since its
    start and the cell asks `sweep.warmup_turns: first`, so it sends no warm-up requests."""
    bench = grid.benches[sid][bid].spec
    measured = {**bench, "warmup": 0} if warm and bench.get("warmup_turns") == "first" else bench
    out = grid.bench_dir(sid, bid)
    out.mkdir(parents=True, exist_ok=True)
    prompt_rows, skipped = load_prompt_rows(grid.dataset_file(bench["dataset"]), bench["dataset"])
    if bench.get("prompts_limit"):            # a counterfactual cell of a diagnosis: the dataset's first prompts
        prompt_rows = prompt_rows[: bench["prompts_limit"]]
    if isinstance(bench.get("waves"), int):   # sweep.waves=N: the dataset's first N x concurrency prompts (all: every one)
        want = bench["waves"] * bench["concurrency"]
        if len(prompt_rows) < want:
            raise CellError(f"bench cell {sid}/{bid}: sweep.waves={bench['waves']} at concurrency "
                            f"{bench['concurrency']} needs {want} prompts, but the dataset holds {len(prompt_rows)}: "
                            "give a larger dataset or fewer waves")
        prompt_rows = prompt_rows[:want]
    prompts = [p["turns"] for p in prompt_rows]
    lengthened = lengthen_prompts(grid, sid, prompts, bench.get("prompt_length"))   # sweep.prompt_length
    prompts = lengthened["prompts"] if lengthened else prompts
    atomic_write_yaml(out / layout.CONFIG, cell_config(grid, sid, bid))
    started_at = time.time()                  # wall clock: the cell's MLflow run spans these
    m = session.measure(prompts, measured, progress, f"{sid}/{bid}")
    finished_at = time.time()
    if any("category" in p for p in prompt_rows):      # per-category figures in the summary
        for r in m.rows:
            r["category"] = prompt_rows[r["index"]].get("category")
    if why := grid.servers[sid].answers_not_judged:
        for r in m.rows:
            r["answer_not_judged"] = why
    atomic_write_jsonl(out / layout.REQUESTS, m.rows)
    if m.failure:
        atomic_write_json(out / layout.FAILED, {"reason": m.failure, "requests_kept": len(m.rows),
                                                "server_log": str(session.log_path)})
        where = f"; log {session.log_path}, last lines:\n{session.log_tail()}" if session.log_path else ""
        raise CellError(f"bench cell {sid}/{bid}: {m.failure} ({sum(r['ok'] for r in m.rows)} of {len(m.rows)} "
                        f"requests finished and are kept in {out / layout.REQUESTS}){where}")
    figures = m.figures
    figures.update(metrics.quality_figures(m.rows, bench["concurrency"]))   # answers and streams, every backend
    figures["dataset_lines_skipped"] = skipped
    figures["warmup_requests"] = min(measured["warmup"], len(prompts))
    figures["prompts_sha256"] = prompts_digest(prompts)
    if lengthened:
        figures["prompt_length_tokens"] = lengthened["tokens"]
    cell = grid.servers[sid]
    reasons = [f"error rate {figures['error_rate']:.3f} is above sweep.max_error_rate {bench['max_error_rate']}"] \
        if figures["error_rate"] > bench["max_error_rate"] else []
    limit = figures.get("server_max_running_requests")     # a backend that knows its server's running limit
    if limit and bench["concurrency"] > limit:
        cap = figures.get("server_running_cap")
        reasons.append(f"the server ran at most {limit} request(s) at a time, so concurrency {bench['concurrency']} "
                       f"measured its queue" + (f" ({cap})" if cap else ""))
    figures.setdefault("spec_decode_source", None)
    figures.setdefault("spec_decode_exact", None)
    if not cell.is_baseline:
        reasons += filter(None, [add_per_request_acceptance(figures, m, cell.spec["num_speculative_tokens"])])
        if not reasons:          # a cell already failed for its requests or acceptance says that first
            reasons += filter(None, [metrics.never_drafted(figures.get("spec_decode"), m.rows,
                                                           cell.spec["num_speculative_tokens"])])
    if not cell.is_baseline:                  # acceptance by phase (phases.py), blank with its reason
        figures["phases"] = phases.pooled([phases.request_split(r, bool(bench["thinking"])) for r in m.rows if r["ok"]])
    figures["valid"] = not reasons
    figures["invalid_reason"] = "; ".join(reasons) or None
    figures.update(compare_with_baseline(grid, sid, bid, figures, m.rows))
    if bench.get("divergence"):
        figures.update(probe_divergences(grid, sid, bid, figures, m.rows, session))
    invalidate(figures, figures.get("graph_asymmetry"))
    figures["output_length_warning"] = output_length_warning(grid, sid, bid, figures)
    figures.update(server_cell=sid, bench_cell=bid, started_at=started_at, finished_at=finished_at, **(context or {}))
    if session.log_path:
        figures["server_log"] = str(session.log_path)
        link = out / layout.SERVER_LOG_LINK
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(session.log_path, out))
    (out / layout.FAILED).unlink(missing_ok=True)
    atomic_write_json(out / layout.METRICS, figures)
    if cell.is_baseline:
        refresh_comparisons(grid, sid, bid)
    return figures
