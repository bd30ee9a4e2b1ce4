"""`specsweep doctor`: every preflight check on a composed config and this machine; for `sweep.repeats: auto`, each
comparison's forecast repeats and seconds from the block spreads this host recorded (read.spreads)."""
from __future__ import annotations

from specsweep.core import layout, registry
from specsweep.grid.config import compose_jobs


def add(sub) -> None:
    d = sub.add_parser("doctor", help="run every preflight check on a composed config and this machine")
    d.add_argument("--base-url", help="also check an already running server")
    d.add_argument("--model", help="the served model name expected at --base-url")
    d.add_argument("overrides", nargs="*")
    d.set_defaults(fn=main)


def main(args) -> int:
    """Every preflight check on the composed config and this machine; env.json is written either way."""
    from specsweep.core.results import atomic_write_json
    from specsweep.plan import preflight
    from specsweep.plan.checks import check_base_url

    jobs = compose_jobs(args.overrides)
    extra = (check_base_url(args.base_url, args.model or "model"),) if args.base_url else ()
    env, checks = preflight.assess(jobs, extra)
    out = layout.study_files(jobs[0]["results_dir"], jobs[0]["study"]).env
    atomic_write_json(out, env)
    gpus = ", ".join(f"{g['index']}:{g.get('name', '?')} sm_{str(g.get('compute_capability', '?')).replace('.', '')} "
                     f"{g.get('memory_free_mib', '?')} MiB free" for g in env["gpus"])
    print(f"python {env['python']}  torch {env['torch']}  cuda {env['cuda']}  transformers {env['transformers']}  "
          f"flash-attn {env['flash_attn']}")
    print(registry.get(jobs[0]["server"]["backend"]).describe(env))
    print(f"GPUs: {gpus or 'none'}  CUDA_VISIBLE_DEVICES={env['cuda_visible_devices']}")
    from specsweep.grid.cells import expand
    from specsweep.read import spreads

    for line in spreads.forecast_lines(expand(jobs)):      # sweep.repeats=auto: time to answer, before it runs
        print(f"forecast: {line}")
    print(f"wrote {out}")
    return 1 if any(c.status == "fail" for c in checks) else 0
