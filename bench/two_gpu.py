"""Two server cells on two GPUs side by side against the same two cells one after the other, in one run.

The whole DAG (Snakemake + Hydra, `server=local_cuda`) runs each study twice, in two studies whose cells
are identical but for their names: `--resources gpu=2` lets Snakemake run two GPU cells at once, each
claiming one GPU through `claims.claim_gpus` over the real `nvidia-smi` inventory; `--resources gpu=1`
runs them one after the other. A study's baseline cell runs first, untimed (its speculative cells compare
with it); the timed part is one Snakemake run of the two speculative cells. While it runs, `nvidia-smi`
is sampled, so the file shows whether both GPUs were busy at once.

    python -m bench run two_gpu -- --out OUT --pair tiny=PATH/models/tiny [--pair qwen3-8b-random=make]
    python -m bench run two_gpu -- --smoke      # on any machine: compose each study and its Snakemake argv, start nothing

`make` builds random weights shaped like Qwen3-8B and its b16 drafter on this host (bench/gpu_step.py's
shapes), with the tiny tokenizer (random weights decode ids it lacks as nothing; timing is what counts).
Writes OUT/two_gpu.json, OUT/results.tar.gz (every study's results, for ingest on a CPU machine; not vLLM's
compile cache, results/.vllm-cache) and
OUT/logs.tar.gz (each Snakemake run's output and the nvidia-smi samples). RESULTS must not exist yet.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make_random_qwen3_8b(out: Path, tokenizer: Path) -> dict:
    import torch

    from bench.gpu_step import QWEN3_8B, build

    t0 = time.monotonic()
    target, drafter, _ = build(QWEN3_8B, 5, 16, "cuda", torch.bfloat16)
    target.generation_config.eos_token_id = None
    target.save_pretrained(out / "target", safe_serialization=True)
    drafter.save_pretrained(out / "drafter")
    for f in tokenizer.glob("*"):
        if f.name.startswith(("tokenizer", "chat_template", "special_tokens")):
            shutil.copy(f, out / "target" / f.name)
    del target, drafter
    torch.cuda.empty_cache()
    return {"built_s": round(time.monotonic() - t0, 1)}


def pair_overrides(name: str, path: Path) -> list[str]:
    base = ["pair=tiny"] if name == "tiny" else ["pair=qwen3-8b-dflash-b16", "pair.mask_token_id=null"]
    return base + [f"pair.target={path / 'target'}", f"pair.drafter={path / 'drafter'}", "pair.built_by_workflow=false"]


def grid_of(config: list[str]):
    from specsweep.grid.cells import expand
    from specsweep.grid.config import jobs_from_snakemake

    return expand(jobs_from_snakemake(dict(c.split("=", 1) for c in config)))


def snakemake_argv(config: list[str], gpus: int, targets: list[str]) -> list[str]:
    return [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(REPO), "--cores", "8",
            "--resources", f"gpu={gpus}", "--config", *config, "--", *targets]


def snakemake(config: list[str], gpus: int, targets: list[str], log: Path) -> float:
    argv = snakemake_argv(config, gpus, targets)
    t0 = time.monotonic()
    with open(log, "a") as f:
        f.write(f"$ {' '.join(argv)}\n")
        f.flush()
        rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"snakemake failed ({rc}): see {log}")
    return time.monotonic() - t0


def sample_gpus(path: Path) -> subprocess.Popen | None:
    if not shutil.which("nvidia-smi"):
        return None
    return subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,index,utilization.gpu,memory.used",
                             "--format=csv,noheader,nounits", "-lms", "500"], stdout=open(path, "w"),
                            start_new_session=True)


def overlap(samples: Path) -> dict:
    """Seconds during which both GPUs were busy at once, from nvidia-smi's samples."""
    by_time: dict[str, dict[str, int]] = {}
    for line in (samples.read_text() if samples.exists() else "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[2].isdigit():
            by_time.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    both = sum(1 for v in by_time.values() if len(v) == 2 and min(v.values()) > 0)
    busy = {g: sum(1 for v in by_time.values() if v.get(g, 0) > 0) for g in ("0", "1")}
    return {"samples": len(by_time), "both_busy_samples": both, "busy_samples_per_gpu": busy}


def study_cells(name: str, pair: str, path: Path, common: list[str], results: Path):
    """A study's --config, its grid, its speculative cells (the timed ones) and the baseline they compare with."""
    config = [f"study={name}", f"results_dir={results}",
              "overrides=" + " ".join(pair_overrides(pair, path) + common)]
    grid = grid_of(config)
    specs = sorted(grid.baseline_of)
    return config, grid, specs, grid.baseline_of[specs[0]]


def study(name: str, pair: str, path: Path, gpus: int, common: list[str], results: Path, out: Path) -> dict:
    config, grid, specs, base = study_cells(name, pair, path, common, results)
    log = out / f"{name}.log"
    snakemake(config, gpus, [str(grid.cells_done(base))], log)           # untimed: the baseline they compare with
    sampler = sample_gpus(out / f"{name}-nvidia-smi.csv")
    try:
        wall = snakemake(config, gpus, [str(grid.cells_done(s)) for s in specs], log)
    finally:
        if sampler:
            os.killpg(sampler.pid, 15)
            sampler.wait()
    snakemake(config, gpus, [], log)                                      # the summary and plots
    cells = {}
    for sid in specs:
        for bid in grid.benches[sid]:
            m = json.loads(grid.metrics_path(sid, bid).read_text())
            cells[f"{sid}/{bid}"] = {"wall_s": m["wall_s"], "output_tok_s": m["output_tok_s"],
                          "mean_acceptance_length": (m["spec_decode"] or {}).get("mean_acceptance_length"),
                          "speedup_output_tok_s": m["speedup_output_tok_s"], "verdict": m["verdict"]}
    return {"study": name, "gpus": gpus, "timed_cells": specs, "wall_s": round(wall, 1),
            "gpu_samples": overlap(out / f"{name}-nvidia-smi.csv"), "cells": cells}


def ks_of(pair: str) -> str:
    return "sweep.num_speculative_tokens=[3,7]" if pair == "tiny" else "sweep.num_speculative_tokens=[7,15]"


def smoke(common: list[str], results: Path) -> None:
    """The CPU check of a GPU-only benchmark: each pair's two studies compose against today's config and cells, and
    each timed run's Snakemake argv; nothing starts, nothing is written."""
    for pair, path in (("tiny", results.parent / "models" / "tiny"), ("qwen3-8b-random", results.parent / "pairs" / "qwen3-8b-random")):
        for name, gpus in ((f"{pair}-seq", 1), (f"{pair}-par", 2)):
            config, grid, specs, base = study_cells(name, pair, path, common + [ks_of(pair)], results)
            print(json.dumps({"study": name, "baseline": base, "timed_cells": specs,
                              "argv": snakemake_argv(config, gpus, [str(grid.cells_done(s)) for s in specs])}))
    print("smoke: nothing started, nothing written")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--pair", action="append", help="NAME=PATH, or qwen3-8b-random=make")
    ap.add_argument("--results", type=Path, default=REPO / "results")
    ap.add_argument("--tokenizer", type=Path, help="tokenizer for a made pair (default: the tiny pair's)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides shared by every study")
    ap.add_argument("--smoke", action="store_true", help="compose the studies and their argv only (any machine)")
    args = ap.parse_args()
    common = ["server=local_cuda", "kernel=local_graphs", "tracking=off", *args.overrides]
    if args.smoke:
        return smoke(common, args.results)
    if not (args.out and args.pair):
        ap.error("--out and --pair are required (but with --smoke)")
    if args.results.exists():
        raise SystemExit(f"{args.results} exists: give a fresh --results, so that every cell runs in this run")
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    report = {"overrides": common, "pairs": {}}
    pairs = dict(p.split("=", 1) for p in args.pair)
    for name, where in pairs.items():
        info = {}
        if where == "make":
            tokenizer = args.tokenizer or Path(pairs["tiny"]) / "tokenizer"
            path = args.results.parent / "pairs" / name
            info["make"] = make_random_qwen3_8b(path, tokenizer)
        else:
            path = Path(where)
        ks = ks_of(name)
        # one after the other first, so that side by side is never the one that found the page cache cold
        seq = study(f"{name}-seq", name, path, 1, common + [ks], args.results, logs)
        par = study(f"{name}-par", name, path, 2, common + [ks], args.results, logs)
        info.update(seq=seq, par=par, ratio_par_over_seq=round(par["wall_s"] / seq["wall_s"], 3))
        report["pairs"][name] = info
        print(json.dumps({name: {"seq_s": seq["wall_s"], "par_s": par["wall_s"],
                                 "ratio": info["ratio_par_over_seq"]}}), flush=True)
    (args.out / "two_gpu.json").write_text(json.dumps(report, indent=1))
    from specsweep.core.layout import VLLM_CACHE

    with tarfile.open(args.out / "results.tar.gz", "w:gz") as tar:
        for d in sorted(args.results.iterdir()):
            if d.name != VLLM_CACHE:      # vLLM's compile cache: only of use on the host that compiled it
                tar.add(d, arcname=d.name)
    with tarfile.open(args.out / "logs.tar.gz", "w:gz") as tar:
        tar.add(logs, arcname="logs")
    shutil.rmtree(logs)


if __name__ == "__main__":
    main()
