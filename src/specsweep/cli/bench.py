"""`specsweep bench`: benchmark a running OpenAI-compatible server."""
from __future__ import annotations

import json
from pathlib import Path

from specsweep.core import layout, registry
from specsweep.core.errors import ConfigError


def add(sub) -> None:
    b = sub.add_parser("bench", help="benchmark a running OpenAI-compatible server")
    b.add_argument("--base-url", required=True)
    b.add_argument("--model", required=True, help="the served model name")
    b.add_argument("--dataset", default="synthetic", help="'synthetic' or a JSONL file")
    b.add_argument("--num-prompts", type=int, default=16)
    b.add_argument("--concurrency", type=int, default=4)
    b.add_argument("--max-tokens", type=int, default=64)
    b.add_argument("--temperature", type=float, default=0.0)
    b.add_argument("--thinking", action="store_true")
    b.add_argument("--warmup", type=int, default=1)
    b.add_argument("--timeout", type=float, default=120.0)
    b.add_argument("--out", default="results/bench")
    b.add_argument("--backend", default="vllm", choices=registry.names(), help="the server's backend, which says how to read its "
                   "spec-decode figures (its /metrics, its responses): one whose session has bench_server (vllm)")
    b.set_defaults(fn=main)


def main(args) -> int:
    """Benchmark a server the user already runs; writes requests.jsonl and metrics.json to --out."""
    from specsweep.core import parts
    from specsweep.core.results import atomic_write_json, atomic_write_jsonl
    from specsweep.grid.datasets import jsonl_rows, synthetic_rows
    from specsweep.run.client import ChatSettings

    if args.dataset == "synthetic":
        prompts = [r["turns"] for r in synthetic_rows(args.num_prompts, 0)]
    else:
        rows, _ = jsonl_rows(args.dataset, "skip")
        prompts = [r["turns"] for r in rows[: args.num_prompts]]
    if not prompts:
        raise ConfigError(f"bench: {args.dataset} has no usable prompts: give a JSONL with 'prompt' or 'turns'")
    from specsweep.plan.checks import check_base_url

    session = parts.session(args.backend)
    if not hasattr(session, "bench_server"):
        raise ConfigError(f"bench: the {args.backend} backend cannot measure a server it did not start: use --backend vllm")
    reachable = check_base_url(args.base_url, args.model)
    if reachable.status == "fail":
        raise ConfigError(f"bench: {reachable.message}")
    settings = ChatSettings(model=args.model, max_tokens=args.max_tokens, temperature=args.temperature,
                            seed=0, thinking=args.thinking, timeout_s=args.timeout)
    rows, figures = session.bench_server(args.base_url.rstrip("/"), prompts, settings, args.concurrency,
                                         args.warmup, progress=True)
    out = Path(args.out)
    atomic_write_jsonl(out / layout.REQUESTS, rows)
    atomic_write_json(out / layout.METRICS, figures)
    print(json.dumps({k: figures[k] for k in ("requests_sent", "requests_completed", "output_tok_s",
                                              "streamed_tpot_ms", "streamed_figures_invalid",
                                              "e2e_ms_per_output_token", "spec_decode")}, indent=2))
    return 0
