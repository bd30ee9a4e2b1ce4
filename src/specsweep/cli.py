"""`specsweep`: sweep (Hydra multirun into the Snakemake DAG), bench, cells, compare, tune, doctor, ingest."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from . import backends, layout
from .config import REPO, ConfigError, compose_jobs
from .errors import SpecsweepError


def expand_multirun(overrides: list[str]) -> list[list[str]]:
    """Hydra's own multirun expansion: `a=1,2 b=x,y` -> four override lists."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        raise ConfigError(f"config: {' '.join(str(e).split())[:300]}") from None
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [list(job) for batch in batches for job in batch]


def override_runs(args) -> list[list[str]]:
    """The override lists of `sweep` and `cells`: the main ones, and each --also group on top of them (a grid
    that is no product of axes, e.g. K=3,7,15 plus K=15 with set acceptance), each expanded by -m."""
    groups = [args.overrides] + [args.overrides + shlex.split(more) for more in args.also]
    return [run for ov in groups for run in (expand_multirun(ov) if args.multirun else [ov])]


def cmd_sweep(args) -> int:
    runs = override_runs(args)
    jobs = [job for ov in runs for job in compose_jobs(ov)]

    return run_jobs(jobs, args.cores, (["-n"] if args.dry_run else []) + args.snakemake_args,
                    f"{len(runs)} Hydra job(s)")


def run_jobs(jobs: list[dict], cores: int, snakemake_args: list[str], what: str) -> int:
    """Resolved study configs through the Snakemake DAG, by way of a jobs file."""
    from .cells import expand, stable_hash
    from .results import atomic_write_yaml

    grid = expand(jobs)   # validates the whole grid before Snakemake starts
    jobs_file = layout.jobs_file(grid.results_dir, stable_hash(jobs)[:12])
    atomic_write_yaml(jobs_file, jobs)
    snakemake = Path(sys.executable).parent / "snakemake"
    # this Python's own Snakemake: its script, or the module where it was installed without one (--target)
    argv = [str(snakemake)] if snakemake.exists() else [sys.executable, "-m", "snakemake"]
    argv += ["--cores", str(cores),
             "--config", f"jobs_file={jobs_file.resolve()}"] + snakemake_args
    print(f"specsweep: {what}, {len(grid.servers)} server cells, "
          f"{sum(len(b) for b in grid.benches.values())} bench cells -> {' '.join(argv)}", flush=True)
    return subprocess.call(argv, cwd=REPO)


def cmd_cells(args) -> int:
    from .cells import expand

    grid = expand([job for ov in override_runs(args) for job in compose_jobs(ov)])
    for sid, cell in grid.servers.items():
        base = grid.baseline_of.get(sid)
        print(f"{cell.study}/{sid}  gpus={cell.gpus}" + (f"  baseline={base}" if base else ""))
        for bid in grid.benches[sid]:
            state = "done" if grid.metrics_path(sid, bid).exists() else "todo"
            print(f"    {state}  {bid}")
    return 0


def cmd_ingest(args) -> int:
    """Log finished studies into MLflow that ran elsewhere (a GPU host with tracking=off), copied here whole:
    each bench cell's config.yaml holds the composed job it came from, so Study.load rebuilds the grid from them."""
    from .study import Study
    from .tracking import ingest

    for study_dir in map(Path, args.study_dirs):
        results = Study.load(study_dir)
        grid, study, sf = results.grid, results.name, results.files
        grid.tracking[study] = {"enabled": True, "uri": args.uri, "experiment": args.experiment}
        missing = results.unfinished()
        files = [sf.summary, sf.k_comparison, sf.by_category, sf.plots, sf.env]
        if missing or not all(f.exists() for f in files):
            raise ConfigError(f"{study_dir} is not a finished study ({', '.join(missing) or 'no summary'}): finish it "
                              "with snakemake where it ran, then copy the whole results/<study> folder")
        prompts = sorted({grid.dataset_file(b.spec["dataset"])
                          for cells in grid.benches.values() for b in cells.values()})
        absent = [p for p in prompts if not Path(p).exists()]
        if absent:     # MLflow's dataset input is the prompts file's digest
            raise ConfigError(f"{absent[0]} is missing: copy {Path(absent[0]).parent.name} (results/"
                              f"{Path(absent[0]).parent.name}/) beside results/<study> too")
        out = ingest(results, *files, grid.mlflow_marker(study))
        print(f"specsweep: {study}: {json.dumps(out)}")
    return 0


def cmd_bench(args) -> int:
    """Benchmark a server the user already runs; writes requests.jsonl and metrics.json to --out."""
    from .backends import parts
    from .client import ChatSettings
    from .datasets import jsonl_rows, synthetic_rows
    from .results import atomic_write_json, atomic_write_jsonl

    if args.dataset == "synthetic":
        prompts = [r["turns"] for r in synthetic_rows(args.num_prompts, 0)]
    else:
        rows, _ = jsonl_rows(args.dataset, "skip")
        prompts = [r["turns"] for r in rows[: args.num_prompts]]
    if not prompts:
        raise ConfigError(f"bench: {args.dataset} has no usable prompts: give a JSONL with 'prompt' or 'turns'")
    from .checks import check_base_url

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


def cmd_compare(args) -> int:
    """Two studies or two bench cells side by side, paired by prompt and turn; refuses pairs that differ."""
    from .compare import write_comparison

    write_comparison(args.a, args.b, args.out, args.predicted_out)
    return 0


TUNE_COLUMNS = {"dataset": "dataset", "thinking": "think", "concurrency": "c", "k": "K",
                "predicted_al": "AL pred", "predicted_al_ci_low": "AL lo", "predicted_al_ci_high": "AL hi",
                "predicted_al_calibrated": "AL cal", "measured_al": "AL meas", "ms_per_token_figure": "ms/token figure",
                "predicted_ms_per_token": "ms/token pred", "measured_ms_per_token": "ms/token meas",
                "predicted_speedup": "speedup pred", "measured_speedup": "speedup meas", "recommended": "best"}
VERIFY_COLUMNS = {"dataset": "dataset", "thinking": "think", "concurrency": "c", "k": "K", "recommended": "best",
                  "in_study_before": "measured before", "predicted_al": "AL pred",
                  "predicted_al_calibrated": "AL cal", "measured_al": "AL meas", "al_error": "AL err",
                  "al_calibrated_error": "AL cal err", "predicted_speedup": "speedup pred", "measured_speedup": "speedup meas",
                  "speedup_error": "speedup err"}


def _print_table(rows: list[dict], columns: dict[str, str]) -> None:
    import pandas as pd

    frame = pd.DataFrame(rows, columns=list(columns)).rename(columns=columns)
    for name in frame.columns:       # a figure column with gaps (None) prints as '-', like NaN
        if frame[name].dtype == object and all(v is None or isinstance(v, float) for v in frame[name]):
            frame[name] = pd.to_numeric(frame[name])
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-"))


def cmd_tune(args) -> int:
    """Predict AL, TPOT and speedup for every K up to a study's largest, recommend K per concurrency, verify."""
    import pandas as pd

    from . import tune
    from .results import atomic_write_text

    study = Path(args.study)
    files = layout.StudyFiles(study)
    rows, mapping, notes = tune.write_tune(study)
    _print_table(rows, TUNE_COLUMNS)
    for note in notes:
        print(f"note: {note}")
    print(f"wrote {files.tune_table} and {files.tune_mapping}")
    if mapping:
        print(f"recommended: {tune.override(mapping)}")
        print(f"as vLLM's dynamic K (one cell beside the fixed Ks): {tune.schedule_override(mapping)}")
    if not args.verify:
        return 0
    if not mapping:
        raise ConfigError(f"tune: --verify needs a recommendation, and {study} has no step-cost model: run the baseline "
                          "and at least two K at each concurrency (e.g. sweep.num_speculative_tokens=[3,7])")
    check = tune.k_by_concurrency(rows, neighbours=True)
    # --forcerun summarize: the study's summary.csv exists, and Snakemake does not always rebuild it for a
    # missing input behind a checkpoint (it did not here without the first run's .snakemake metadata);
    # forcing it makes Snakemake run the new cells it needs, and the summary then holds them too
    rc = run_jobs(tune.verify_jobs(study, check), args.cores, ["--forcerun", "summarize"],
                  f"tune --verify {tune.override(check)}")
    if rc != 0:
        return rc
    checked = tune.verify_rows(rows, study, check)
    missing = [f"K={r['k']} c={r['concurrency']}" for r in checked if r["measured_al"] is None]
    if missing:
        raise ConfigError(f"tune: --verify ran, but {', '.join(missing)} have no finished cells in {study}: "
                          "see the Snakemake output above, fix the cause and rerun")
    atomic_write_text(files.tune_verify, pd.DataFrame(checked).to_csv(index=False))
    _print_table(checked, VERIFY_COLUMNS)
    print(f"wrote {files.tune_verify}")
    return 0


def cmd_doctor(args) -> int:
    """Every preflight check on the composed config and this machine; env.json is written either way."""
    from . import preflight
    from .checks import check_base_url
    from .results import atomic_write_json

    jobs = compose_jobs(args.overrides)
    extra = (check_base_url(args.base_url, args.model or "model"),) if args.base_url else ()
    env, checks = preflight.assess(jobs, extra)
    out = layout.study_files(jobs[0]["results_dir"], jobs[0]["study"]).env
    atomic_write_json(out, env)
    gpus = ", ".join(f"{g['index']}:{g.get('name', '?')} sm_{str(g.get('compute_capability', '?')).replace('.', '')} "
                     f"{g.get('memory_free_mib', '?')} MiB free" for g in env["gpus"])
    print(f"python {env['python']}  torch {env['torch']}  cuda {env['cuda']}  transformers {env['transformers']}  "
          f"flash-attn {env['flash_attn']}")
    print(backends.get(jobs[0]["server"]["backend"]).describe(env))
    print(f"GPUs: {gpus or 'none'}  CUDA_VISIBLE_DEVICES={env['cuda_visible_devices']}")
    print(f"wrote {out}")
    return 1 if any(c.status == "fail" for c in checks) else 0


def cmd_drafter_inspect(args) -> int:
    """What a drafter checkpoint is: shapes, its config or the one they imply, and its fit to a target."""
    from . import checks, drafter_config, model_shape
    from .results import atomic_write_json

    path = Path(args.path)
    if not path.is_dir():
        raise ConfigError(f"drafter: {path} is not a directory: give a checkpoint directory")
    shapes = drafter_config.weight_shapes(path)
    if not shapes:
        raise ConfigError(f"drafter: {path} holds no *.safetensors weights")
    for name, shape in sorted(shapes.items()):
        if not name.startswith("layers.") or name.startswith("layers.0."):
            print(f"  {name:48s} {list(shape)}")
    n_layers = len({n.split(".")[1] for n in shapes if n.startswith("layers.")})
    print(f"  ... {n_layers} layer(s), {sum(_numel(s) for s in shapes.values()) / 1e6:.2f}M parameters")
    target = model_shape.read_config(args.target) if args.target else None
    existing = model_shape.read_config(path)
    if existing is not None:
        print("config.json:", json.dumps({k: existing.get(k) for k in (
            "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "block_size", "num_target_layers", "dflash_config")}, indent=1))
    else:
        inferred, assumed = drafter_config.infer_config(shapes, target)
        print("no config.json; the weights imply:", json.dumps(inferred, indent=1))
        for a in assumed:
            print(f"  assumed: {a}")
        if args.write:
            atomic_write_json(path / "config.json", inferred)
            print(f"wrote {path / 'config.json'}")
    if args.target:
        cfg = {"pair": {"method": "dflash", "drafter": str(path), "target": args.target, "tokenizer": None,
                        "mask_token_id": None}}
        check = checks.check_drafter(cfg, {})
        print(f"[{check.status:4}] matches {args.target}: {check.message}")
        return 1 if check.status == "fail" else 0
    return 0


def cmd_shape(args) -> int:
    from . import shaped
    out = shaped.write(args.name, args.dest)
    print(f"wrote {out}/target and {out}/drafter (config only: serve with --load-format dummy)")
    return 0


def cmd_trace(args) -> int:
    """For one prompt, every block: what the drafter proposed against what the target chose."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .dflash.engine import generate
    from .dflash.model import DFlashDrafter

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(args.target)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(args.drafter)
    text = tok.apply_chat_template([{"role": "user", "content": args.prompt}], add_generation_prompt=True,
                                   enable_thinking=args.thinking, tokenize=False)
    ids = tok(text, add_special_tokens=False).input_ids
    block = args.block_size or drafter.block_size
    out = generate(target, drafter, [list(ids)], block, args.max_new_tokens, stop_ids={tok.eos_token_id})
    show = lambda t: repr(tok.decode(t))  # noqa: E731
    for i, step in enumerate(out.steps):
        drafted, chosen, n = step.drafted[0], step.target[0], step.accepted[0]
        print(f"step {i:3d}  accepted {n}/{block - 1}")
        print(f"   drafted {show(drafted):40s} {drafted}")
        print(f"   target  {show(chosen[:-1]):40s} {chosen[:-1]}")
    lengths = out.acceptance_lengths()
    print(f"output: {show(out.sequences[0])}")
    print(f"mean acceptance length {sum(lengths) / len(lengths):.2f} over {len(lengths)} steps (block {block})")
    return 0


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specsweep", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("sweep", help="compose a grid with Hydra and run it through the Snakemake DAG")
    s.add_argument("-m", "--multirun", action="store_true", help="Hydra multirun: a=1,2 expands to two jobs")
    s.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    s.add_argument("-n", "--dry-run", action="store_true", help="list the cells still to run")
    s.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. sweep.num_speculative_tokens=3,7")
    s.add_argument("--also", action="append", default=[], metavar="OVERRIDES",
                   help="more cells: overrides on top of the main ones, whose jobs join the same grid")
    s.add_argument("--snakemake-args", nargs=argparse.REMAINDER, default=[], help="passed on to snakemake")
    s.set_defaults(fn=cmd_sweep)

    c = sub.add_parser("cells", help="list the grid's server and bench cells, and which are done")
    c.add_argument("-m", "--multirun", action="store_true")
    c.add_argument("overrides", nargs="*")
    c.add_argument("--also", action="append", default=[], metavar="OVERRIDES")
    c.set_defaults(fn=cmd_cells)

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
    b.add_argument("--backend", default="vllm", choices=backends.names(), help="the server's backend, which says how to read its "
                   "spec-decode figures (its /metrics, its responses): one whose session has bench_server (vllm)")
    b.set_defaults(fn=cmd_bench)

    ig = sub.add_parser("ingest", help="log finished studies copied from another host (tracking=off there) into MLflow")
    ig.add_argument("study_dirs", nargs="+", help="results/<study> folders, copied whole")
    ig.add_argument("--uri", default=None, help=f"an MLflow tracking URI (default: sqlite:///<results>/{layout.MLFLOW_DB})")
    ig.add_argument("--experiment", default="specsweep")
    ig.set_defaults(fn=cmd_ingest)

    cm = sub.add_parser("compare", help="two studies or two bench cells side by side, with paired CIs and verdicts; "
                                        "predicted (replayed rates) against measured wherever both exist")
    cm.add_argument("a", help="results/<study>, or a bench cell directory")
    cm.add_argument("b", nargs="?", default=None,
                    help="the same kind as A; ratios B vs A above 1 mean B is faster. Without it: A's predicted "
                         "against measured alone")
    cm.add_argument("--out", default="compare.csv", help="the CSV to write")
    cm.add_argument("--predicted-out", default="predicted.csv",
                    help="the CSV of predicted against measured (written where there is one)")
    cm.set_defaults(fn=cmd_compare)

    tu = sub.add_parser("tune", help="predict AL, TPOT and speedup for every K up to a study's largest; "
                                     "recommend K per concurrency")
    tu.add_argument("study", help="results/<study>: its largest K at each concurrency, and for a recommendation "
                                  "the baseline and at least two K")
    tu.add_argument("--verify", action="store_true",
                    help="run the recommended K and one each side through the DAG; report predicted vs measured")
    tu.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    tu.set_defaults(fn=cmd_tune)

    d = sub.add_parser("doctor", help="run every preflight check on a composed config and this machine")
    d.add_argument("--base-url", help="also check an already running server")
    d.add_argument("--model", help="the served model name expected at --base-url")
    d.add_argument("overrides", nargs="*")
    d.set_defaults(fn=cmd_doctor)

    t = sub.add_parser("trace", help="one prompt, block by block: drafted tokens against the target's")
    t.add_argument("--target", default=str(layout.tiny_pair("results").target))
    t.add_argument("--drafter", default=str(layout.tiny_pair("results").drafter))
    t.add_argument("--prompt", default="Ada has 12 apples. Ada gets 3 more. How many apples does Ada have now?")
    t.add_argument("--block-size", type=int, default=None, help="default: the drafter's")
    t.add_argument("--max-new-tokens", type=int, default=48)
    t.add_argument("--thinking", action="store_true")
    t.set_defaults(fn=cmd_trace)

    sh = sub.add_parser("shape", help="write a config-only replica of a published pair (random weights: "
                        "--load-format dummy)")
    sh.add_argument("name", help="qwen3-8b, qwen3.5-27b or qwen3.6-27b")
    sh.add_argument("dest", help="folder to write target/ and drafter/ into")
    sh.set_defaults(fn=cmd_shape)

    dr = sub.add_parser("drafter", help="drafter checkpoint tooling").add_subparsers(dest="drafter_cmd", required=True)
    di = dr.add_parser("inspect", help="shapes, config (given or inferred from the weights), fit to a target")
    di.add_argument("path")
    di.add_argument("--target", help="target checkpoint directory to check the drafter against")
    di.add_argument("--write", action="store_true", help="write the inferred config.json when there is none")
    di.set_defaults(fn=cmd_drafter_inspect)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except SpecsweepError as e:
        print(f"specsweep: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
