"""The `local` backend's session: bench cells decoded in-process by the DFlash engine instead of a server.

A server cell is one block size (K + 1; the baseline is block 1, through the same code). The pair is
loaded once per server cell and every unfinished bench cell (dataset x thinking x concurrency) runs on
it; a bench cell's concurrency is its decode batch. Its figures add the acceptance-length histogram and
the engine's own per-position acceptance.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator

from specsweep import metrics
from specsweep.core.claims import take_gpus
from specsweep.core.errors import ServerError
from specsweep.grid.cells import Grid
from specsweep.metrics.phases import think_end_position, think_token_id
from specsweep.plan.residency import Launch
from specsweep.run.bench_cell import Measurement


class LocalPair:
    """Tokenizer, target and (for speculative cells) drafter, on the configured device and kernels."""

    def __init__(self, spec: dict):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from specsweep.models.dflash.model import DFlashDrafter

        server, kernel = spec["server"], spec["kernel"]
        self.device = server["device"]
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ServerError("server.device=cuda but torch sees no CUDA device: use server=local (cpu)")
        if server.get("threads"):
            torch.set_num_threads(int(server["threads"]))
        dtype = getattr(torch, server["dtype"])
        self.block_size = spec["num_speculative_tokens"] + 1 if spec["method"] == "dflash" else 1
        self.tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
        self.target = AutoModelForCausalLM.from_pretrained(
            spec["target"], dtype=dtype, attn_implementation=kernel.get("attn_implementation") or "sdpa",
        ).to(self.device).eval()
        self.drafter = None
        if self.block_size > 1:
            # its own config's mask token, tapped layers and block, as vLLM and SGLang read them: preflight refuses
            # a pair.mask_token_id or pair.block_size that says otherwise (checks.check_drafter)
            self.drafter = DFlashDrafter.from_pretrained(spec["drafter"]).to(self.device, dtype).eval()
        # kernel.cuda_graphs / compilation_level pick the static-cache step (dflash/static.py), built per
        # (batch, length) on first use; otherwise the HF-cache engine, which also samples
        level = kernel["compilation_level"] or 0
        self.static = bool(kernel["cuda_graphs"]) or level > 0
        self.static_kernel = {"cuda_graph": bool(kernel["cuda_graphs"]),
                              "compile": None if level == 0 else "max-autotune-no-cudagraphs" if level >= 3 else "default"}
        self._static: dict[tuple[int, int], object] = {}
        eos = self.target.generation_config.eos_token_id
        self.stop_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self.stop_ids.add(self.tokenizer.eos_token_id)
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.think_id = think_token_id(self.tokenizer)       # acceptance by phase (phases.py); None: no such token
        self.sampler = server.get("sampler", "vllm")
        # vLLM's rejection_sample_method: the cell's sweep.verification (standard | block, at temperature > 0);
        # a set acceptance (sweep.set_acceptance: a length or K rates) makes it synthetic, as vLLM's config does
        self.method = spec.get("verification", "standard")
        acceptance = spec.get("set_acceptance") if self.block_size > 1 else None
        self.synthetic = {} if acceptance is None else {
            "method": "synthetic", ("synthetic_acceptance_rates" if isinstance(acceptance, list)
                                    else "synthetic_acceptance_length"): acceptance}

    def decode(self, prompts: list[list[int]], bench: dict, seed: int):
        from specsweep.models.dflash.engine import generate

        stop_ids = set() if bench["ignore_eos"] else self.stop_ids     # ignore_eos: exactly max_tokens, as vLLM's
        if not self.static or bench["temperature"] > 0 or self.synthetic:    # the static step: greedy only
            return generate(self.target, self.drafter, prompts, self.block_size, bench["max_tokens"], stop_ids,
                            bench["temperature"], self.pad_id, seed=seed, sampler=self.sampler,
                            **(self.synthetic or {"method": self.method}))
        from specsweep.models.dflash.static import StaticPair

        batch = bench["concurrency"]
        padded = prompts + [prompts[-1]] * (batch - len(prompts))      # a short last batch: fixed shapes
        need = max(map(len, padded)) + bench["max_tokens"] + self.block_size
        key = (batch, -(-need // 256) * 256)
        if key not in self._static:
            self._static[key] = StaticPair(self.target, self.drafter, batch, key[1], self.block_size,
                                           **self.static_kernel)
        out = self._static[key].generate(padded, bench["max_tokens"], stop_ids)
        out.sequences = out.sequences[:len(prompts)]
        return out

    def chat_ids(self, messages: list[dict], thinking: bool) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=thinking,
                                                  tokenize=False)
        return self.tokenizer(text, add_special_tokens=False).input_ids


def phase_fields(out, row: int, tokens: list[int], think_id: int | None) -> dict:
    """A row's per-step accepted and drafted counts, in order, and where its `</think>` falls (phases.py)."""
    steps = [s for s in out.steps if row in s.live]
    return {"per_step_accepted": [s.accepted[row] for s in steps],
            "per_step_drafted": [len(s.drafted[row]) for s in steps],
            "think_end": think_end_position(tokens, think_id)}


def step_chunks(out, row: int) -> dict:
    """A row's tokens as the engine committed them, in the shape of a stream's chunks: the first token at
    first_token_s, then each step's committed tokens at the step's time (cut where the row stopped)."""
    times, tokens, left = [round(out.first_token_s, 6)], [1], len(out.sequences[row]) - 1
    for step in out.steps:
        if row in step.live and left > 0:
            times.append(round(step.t_s, 6))
            tokens.append(min(step.committed[row], left))
            left -= tokens[-1]
    return {"chunk_t_s": times, "chunk_tokens": tokens}


def decode_rows(pair: LocalPair, prompts: list[list[str]], bench: dict, progress: bool = True,
                t0: float | None = None) -> list[dict]:
    """Every turn of every prompt, `concurrency` conversations per batch; one record per (prompt, turn), with
    `start_s`, its batch's start in seconds since t0 (default: this call's start), as the HTTP client's records."""
    from specsweep.core.progress import progress_bar

    t0 = time.perf_counter() if t0 is None else t0
    history: list[list[dict]] = [[] for _ in prompts]
    records = []
    n_turns = max(len(p) for p in prompts)
    bar = progress_bar(total=sum(len(p) for p in prompts), desc=f"block {pair.block_size}", unit="req",
                       disable=not progress)
    for turn in range(n_turns):
        rows = [i for i, p in enumerate(prompts) if turn < len(p)]
        for start in range(0, len(rows), bench["concurrency"]):
            batch = rows[start:start + bench["concurrency"]]
            for i in batch:
                history[i].append({"role": "user", "content": prompts[i][turn]})
            ids = [pair.chat_ids(history[i], bench["thinking"]) for i in batch]
            started = time.perf_counter() - t0
            out = pair.decode(ids, bench, seed=bench["seed"] + start + 1000 * turn)
            for j, i in enumerate(batch):
                tokens = out.sequences[j]
                text = pair.tokenizer.decode(tokens, skip_special_tokens=True)
                history[i].append({"role": "assistant", "content": text})
                records.append({
                    "index": i, "turn": turn, "ok": True, "error": None, "text": text, "prompt_tokens": len(ids[j]),
                    "completion_tokens": len(tokens), "ttft_s": out.first_token_s, "e2e_s": out.finish_s[j],
                    "itl_s": [], "start_s": round(started, 6), **step_chunks(out, j),
                    "acceptance_lengths": [s.accepted[j] + 1 for s in out.steps if j in s.live],
                    **phase_fields(out, j, tokens, pair.think_id),
                })
            bar.update(len(batch))
    bar.close()
    return records


ENGINE_CLOCK = "local engine (its own step times)"


def engine_timing(row: dict) -> dict:
    """A row's timing by the engine's own clock, in the neutral shape (metrics.server_tpot): the engine is its own
    server, so its step times are both the row's chunks and the server's steps; no queue (a batch starts at once)."""
    times = row["chunk_t_s"]
    decode = times[-1] - times[0] if times else None
    tokens = row["completion_tokens"]
    return {"clock": ENGINE_CLOCK, "queue_s": None, "prefill_s": row["ttft_s"], "decode_s": decode,
            "span_s": row["e2e_s"], "mean_itl_s": decode / (tokens - 1) if decode is not None and tokens > 1 else None,
            "step_t_s": list(times)}


class LocalSession:
    log_path = None              # in-process: no server log

    def __init__(self, pair: LocalPair):
        self.pair = pair

    def alive(self) -> bool:
        return True

    def log_tail(self) -> str:
        return ""

    def measure(self, prompts: list[list[str]], bench: dict, progress: bool, desc: str) -> Measurement:
        pair = self.pair
        if bench["warmup"]:
            decode_rows(pair, prompts[:bench["warmup"]], bench, progress=False)   # same batch shape: warms its graph
        t0 = time.perf_counter()
        rows = [{**r, "server_timing": engine_timing(r)} for r in decode_rows(pair, prompts, bench, progress, t0)]
        figures = metrics.request_figures(rows, time.perf_counter() - t0)
        lengths = [a for r in rows for a in r["acceptance_lengths"]]
        figures["spec_decode"] = metrics.acceptance_from_lengths(lengths, pair.block_size) \
            if pair.block_size > 1 else None
        figures.update(backend="local", block_size=pair.block_size)
        return Measurement(rows, figures)


@contextmanager
def open_session(grid: Grid, sid: str, progress: bool = True, how: Launch | None = None) -> Iterator[LocalSession]:
    """Take a cuda cell's GPU (claimed, or SLURM's; or its group's, `how`) before CUDA starts, so it becomes cuda:0;
    load the pair once. Co-resident members are pairs loaded side by side in the job's process."""
    cell = grid.servers[sid]
    if how is not None and how.gpu_ids:
        gpu_ids, claims = list(how.gpu_ids), []
    else:
        gpu_ids, claims = take_gpus(cell.gpus) if cell.gpus else ([], [])
    if gpu_ids:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
    try:
        t0 = time.monotonic()
        pair = LocalPair(cell.spec)
        where = f"{pair.device} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})" \
            if pair.device == "cuda" else pair.device
        print(f"[specsweep] {sid}: local engine, block {pair.block_size} on {where}, "
              f"loaded in {time.monotonic() - t0:.1f} s", flush=True)
        yield LocalSession(pair)
    finally:
        for claim in claims:
            claim.release()
