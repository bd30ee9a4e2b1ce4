# Frozen: a one-off experiment, not maintained (bench/README.md). It ran as bench/set_acceptance_gap.py up to 58d1a74; run it from there.
"""Why a set-acceptance cell realises a length below the one it was set to (issue 30, item 8).

Three parts, each printed and written into --out as set_acceptance_gap.json:

1. `archive`: the kept H200 studies' vLLM 0.26 set-acceptance cells (bench/archive/h200/vllm/*/*-al*): their
   counters (drafts, accepted, per position, draft tokens against drafts x K: did the last step offer fewer?), the
   realised against the expected length (metrics.set_acceptance_check), and the requests' own step sequences. At
   concurrency 1 a stream's chunks are its steps (every chunk but the first and the last, which max_tokens cuts), so
   the script counts how many distinct acceptance sequences the 32 requests drew, and by what they are grouped.
2. `keyed`: a simulation of how vLLM's V2 model runner draws a synthetic accept (rejection_sampler_utils.py:
   u = tl_rand32(seed, pos), a function of the request's seed and the token's position alone; with no seed in the
   request the runner draws one at random per request). specsweep's client sent the bench seed (0) in every
   request, so every request read one random field: requests of the same prompt length drew identical sequences,
   and others the same field shifted. The simulation runs a cell (K, length, max_tokens, the archive's prompt
   lengths) many times with one seed for all requests and with one seed per request, and gives the spread of the
   cell's AL in each case, and how often it falls as far below the set length as the H200 run did.
3. `local`: the in-process engine (the tiny pair, CPU) at set rates, with max_tokens small and large, at
   concurrency 1 and 8: the engine cuts the last step at the budget edge (it offers only the drafts the request can
   still commit), which lowers the realised length; the expected length from the steps' own drafted counts accounts
   for it, and the cut's cost at concurrency 1 is also computed exactly (a recursion over the tokens left).

    PYTHONPATH=src .venv/bin/python bench/set_acceptance_gap.py --pair results/models/tiny --out /tmp/setgap
        [--parts archive keyed local] [--trials 4000]
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

from specsweep import metrics
from specsweep.dflash.sampling import conditional_rates

ARCHIVE = Path(__file__).resolve().parent / "archive" / "h200" / "vllm"


# ---- 1. the archive -------------------------------------------------------------------------------------------
def archive_cells(root: Path = ARCHIVE) -> list[dict]:
    out = []
    for cell in sorted(root.glob("*/*-al*")):
        for bench in sorted(p for p in cell.iterdir() if p.is_dir()):
            m = json.loads((bench / "metrics.json").read_text())
            import yaml

            cfg = yaml.safe_load((bench / "config.yaml").read_text())
            spec = cfg["server_spec"]
            k, value = spec["num_speculative_tokens"], spec["set_acceptance"]
            c = m["spec_counters_delta"]
            per_pos = [c["per_pos"][str(i)] for i in range(k)]
            rows = [json.loads(line) for line in gzip.open(bench / "requests.jsonl.gz")]
            # at concurrency 1 each chunk is one step's tokens: the first chunk is prefill's token, the last is cut
            groups = collections.defaultdict(list)
            for r in rows:
                groups[tuple(r["chunk_tokens"][1:-1])].append(r["prompt_tokens"])
            check = metrics.set_acceptance_check(value, k, c["drafts"], c["accepted"], per_pos)
            steps_per_request = c["drafts"] / len(rows)
            # the same test with the independent draws one request's steps hold (every request reads one field)
            rates = metrics.set_acceptance_rates(value, k)
            _, var1 = metrics.set_step_moments(rates, k)
            z_one_path = (check["acceptance_gap"] * steps_per_request) / (var1 * steps_per_request) ** 0.5 \
                if var1 else None
            out.append({"cell": f"{cell.parent.name}/{cell.name}/{bench.name}", "K": k, "set_acceptance": value,
                        "concurrency": cfg["bench_spec"]["concurrency"], "max_tokens": cfg["bench_spec"]["max_tokens"],
                        "requests": len(rows), "drafts": c["drafts"], "accepted": c["accepted"],
                        "every_step_offered_K": c["draft_tokens"] == c["drafts"] * k,
                        "finish_reasons": sorted({r.get("finish_reason") for r in rows}),
                        "per_position_accepted": per_pos, **check,
                        "z_if_one_request_of_draws": z_one_path,
                        "distinct_step_sequences": len(groups) if cfg["bench_spec"]["concurrency"] == 1 else None,
                        "prompt_tokens_by_sequence": [sorted(set(v)) for v in groups.values()]
                        if cfg["bench_spec"]["concurrency"] == 1 else None})
    return out


# ---- 2. vLLM's keyed draws --------------------------------------------------------------------------------------
def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a stand-in for Philox, a uniform that depends on (seed, position) alone."""
    x = (x + np.uint64(0x9E3779B97F4A7C15))
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def keyed_uniform(seed: int, pos: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed) * np.uint64(0x100000001B3) + pos.astype(np.uint64))
    return (key >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def keyed_request(seed: int, prompt_tokens: int, rates: list[float], max_tokens: int) -> tuple[int, int]:
    """One request as vLLM V2 draws it: (steps, accepted drafts). A step's draft slot i reads the uniform at its
    own position; a step that keeps a drafts commits a + 1 tokens, and the next step starts at the bonus token."""
    cond = np.asarray(conditional_rates(rates))
    k, pos, tokens, steps, accepted = len(rates), prompt_tokens, 1, 0, 0
    while tokens < max_tokens:                          # vLLM 0.26 offers all K at the last step (the counters say so)
        u = keyed_uniform(seed, pos + np.arange(k))
        a = int(np.cumprod(u < cond).sum())
        steps, accepted, pos, tokens = steps + 1, accepted + a, pos + a + 1, tokens + a + 1
    return steps, accepted


def tiny_rates(root: Path = ARCHIVE) -> list[float]:
    """The tiny pair's K=7 CPU rates, as the kept H200 replay on the 8B-shaped pair was given them."""
    import yaml

    cell = next(root.glob("qwen3-8b-shaped/*-k7-al4.867-rates-*/synthetic-t0-c1-*"))
    return yaml.safe_load((cell / "config.yaml").read_text())["server_spec"]["set_acceptance"]


def archive_prompt_tokens(root: Path = ARCHIVE) -> list[int]:
    """The 32 synthetic prompts' token counts on the 8B-shaped pair, from its kept set-acceptance cell."""
    cell = next(root.glob("qwen3-8b-shaped/*-al6.54-*/synthetic-t0-c1-*"))
    return [json.loads(line)["prompt_tokens"] for line in gzip.open(cell / "requests.jsonl.gz")]


def keyed(value, k: int, max_tokens: int, prompt_tokens: list[int], trials: int, realised: float | None) -> dict:
    rates = metrics.set_acceptance_rates(value, k)
    asked = 1 + sum(rates)
    out = {}
    for how in ("one seed for every request", "a seed per request"):
        als = []
        for t in range(trials):
            seeds = [t] * len(prompt_tokens) if how.startswith("one") else \
                [t * 1_000_003 + i for i in range(len(prompt_tokens))]
            s = [keyed_request(sd, p, rates, max_tokens) for sd, p in zip(seeds, prompt_tokens)]
            als.append(1 + sum(a for _, a in s) / sum(n for n, _ in s))
        als = np.asarray(als)
        out[how] = {"mean_al": float(als.mean()), "sd_al": float(als.std(ddof=1)),
                    "share_at_or_below_realised": float((als <= realised + 1e-12).mean()) if realised else None}
    return {"K": k, "set_acceptance": value, "asked": asked, "max_tokens": max_tokens, "requests": len(prompt_tokens),
            "trials": trials, "realised_on_h200": realised, **out}


# ---- 3. the local engine -----------------------------------------------------------------------------------------
def cut_expectation(rates: list[float], max_tokens: int) -> float:
    """The pooled AL a request of exactly max_tokens tokens gives at concurrency 1 on the local engine, which offers
    min(K, tokens left) drafts per step: E[accepted] / E[steps] + 1, by recursion over the tokens left."""
    k = len(rates)
    dist = {}
    for d in range(1, k + 1):
        head = [1.0, *rates[:d], 0.0]
        dist[d] = [head[x] - head[x + 1] for x in range(d + 1)]     # P(keep exactly x of d)

    @lru_cache(maxsize=None)
    def go(left: int) -> tuple[float, float]:
        if left <= 0:
            return 0.0, 0.0
        d = min(k, left)
        acc, steps = 0.0, 1.0
        for x, p in enumerate(dist[d]):
            if p:
                a, s = go(left - x - 1)
                acc, steps = acc + p * (x + a), steps + p * s
        return acc, steps

    sys.setrecursionlimit(max(1000, 4 * max_tokens))
    acc, steps = go(max_tokens - 1)                    # the first token comes from prefill
    return 1 + acc / steps


def local(pair: Path, prompts: int, settings: list[tuple]) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specsweep.datasets import synthetic_rows
    from specsweep.dflash.engine import generate
    from specsweep.dflash.model import DFlashDrafter

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(pair / "tokenizer")
    target = AutoModelForCausalLM.from_pretrained(pair / "target", dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(pair / "drafter").eval()
    block = drafter.block_size
    ids = [tok(tok.apply_chat_template([{"role": "user", "content": r["turns"][0]}], add_generation_prompt=True,
                                       tokenize=False, enable_thinking=False), add_special_tokens=False).input_ids
           for r in synthetic_rows(prompts, 0)]
    out = []
    for value, max_tokens, conc in settings:
        key = "synthetic_acceptance_rates" if isinstance(value, list) else "synthetic_acceptance_length"
        steps, accepted, per_pos, by_drafts = 0, 0, [0] * (block - 1), collections.Counter()
        t0 = time.perf_counter()
        for start in range(0, len(ids), conc):          # as the local session batches and seeds (seed + start)
            o = generate(target, drafter, ids[start:start + conc], block, max_tokens, set(), 0.0, tok.pad_token_id or 0,
                         seed=start, method="synthetic", **{key: value})
            for s in o.steps:
                for r in s.live:
                    steps, accepted = steps + 1, accepted + s.accepted[r]
                    by_drafts[len(s.drafted[r])] += 1
                    for i in range(s.accepted[r]):
                        per_pos[i] += 1
        check = metrics.set_acceptance_check(value, block - 1, steps, accepted, per_pos, dict(by_drafts))
        full = metrics.set_acceptance_check(value, block - 1, steps, accepted, per_pos)    # as if every step offered K
        out.append({"set_acceptance": value, "max_tokens": max_tokens, "concurrency": conc, "requests": len(ids),
                    "steps": steps, "accepted": accepted, "realised": 1 + accepted / steps,
                    "asked": check["set_acceptance_length"], "expected_from_steps": check["expected_acceptance_length"],
                    "z_from_steps": check["acceptance_gap_z"], "z_against_asked": full["acceptance_gap_z"],
                    "cut_expectation_c1": cut_expectation(metrics.set_acceptance_rates(value, block - 1), max_tokens),
                    "short_steps": sum(n for d, n in by_drafts.items() if d < block - 1), "wall_s": time.perf_counter() - t0})
        print(json.dumps(out[-1]), flush=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", type=Path, default=Path("results/models/tiny"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--parts", nargs="+", default=["archive", "keyed", "local"], choices=["archive", "keyed", "local"])
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--prompts", type=int, default=16)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "argv": sys.argv}
    if "archive" in args.parts:
        result["archive"] = archive_cells()
        for c in result["archive"]:
            print(json.dumps({k: c[k] for k in ("cell", "drafts", "accepted", "every_step_offered_K",
                                                "set_acceptance_length", "expected_acceptance_length",
                                                "acceptance_gap", "acceptance_gap_z", "z_if_one_request_of_draws",
                                                "distinct_step_sequences", "prompt_tokens_by_sequence")}))
    if "keyed" in args.parts:
        prompts = archive_prompt_tokens()
        result["keyed"] = [
            keyed(6.54, 15, 256, prompts, args.trials, 1 + 6996 / 1280),     # the 2026-12-02 H200 cell
            keyed(6.54, 15, 128, prompts, args.trials, 1 + 3529 / 640),      # the 2026-12-01 one (kept)
            keyed(tiny_rates(), 7, 128, prompts, args.trials, 1 + 3277 / 896)]  # the tiny pair's rates (kept)
        for k in result["keyed"]:
            print(json.dumps(k))
    if "local" in args.parts:
        result["local"] = local(args.pair, args.prompts,
                                [(v, n, c) for v in (tiny_rates(), 4.5) for n in (16, 128) for c in (1, 8)])
    (args.out / "set_acceptance_gap.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {args.out / 'set_acceptance_gap.json'}")


if __name__ == "__main__":
    main()
