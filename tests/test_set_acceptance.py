"""sweep.set_acceptance: server cells whose drafts vLLM accepts at a set rate (rejection_sample_method=synthetic).
Their argv, ids and names, validation, forced ignore_eos, and greedy agreement reported as n/a. No server runs;
preflight's refusals are in test_preflight.py, vLLM's own parser reads the argv in test_vllm_argv.py."""
import json
import sys

import pytest
from helpers import run
from test_bench_cell import STEPS, FixedSession, counters, rows
from test_metrics import rec

from specsweep.backends.vllm import launch
from specsweep.core import labels
from specsweep.core.errors import ConfigError
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.grid.datasets import materialise
from specsweep.read import summary
from specsweep.read.study import Study
from specsweep.run.bench_cell import run_bench_cell

SETS = "sweep.set_acceptance=[null,3,[0.9,0.7,0.5]]"


def expanded(*overrides):
    return expand(compose_jobs(["results_dir=results", "sweep.num_speculative_tokens=[3]", "sweep.repeats=1",
                                *overrides]))


def by_acceptance(grid):
    return {json.dumps(c.spec.get("set_acceptance")): sid for sid, c in grid.servers.items() if not c.is_baseline}


def test_speculative_config_carries_a_length_or_rates():
    grid = expanded(SETS, "server=vllm_gpu", "pair=qwen3-8b-dflash-b16")
    configs = {}
    for acceptance, sid in by_acceptance(grid).items():
        cell = grid.servers[sid]
        argv = launch.build_argv(["vllm"], cell.spec, "127.0.0.1", 8000, cell.served_name)
        configs[acceptance] = json.loads(argv[argv.index("--speculative-config") + 1])
    plain = {"method": "dflash", "num_speculative_tokens": 3, "model": "z-lab/Qwen3-8B-DFlash-b16"}
    assert configs == {
        "null": plain,
        "3.0": {**plain, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.0},
        "[0.9, 0.7, 0.5]": {**plain, "rejection_sample_method": "synthetic",
                            "synthetic_acceptance_rates": [0.9, 0.7, 0.5]},
    }


def test_unset_keeps_every_id_and_set_gives_a_named_cell_of_its_own():
    plain = expanded()
    assert expanded("sweep.set_acceptance=null").servers.keys() == plain.servers.keys()
    grid = expanded(SETS)
    ids = by_acceptance(grid)
    assert ids["null"] in plain.servers                       # the real-acceptance cell is the cell it always was
    assert ids["3.0"].startswith("tiny-dflash-k3-al3-") and ids["3.0"] not in plain.servers
    assert ids["[0.9, 0.7, 0.5]"].startswith("tiny-dflash-k3-al3.1-rates-")
    assert by_acceptance(expanded("sweep.set_acceptance=3.0"))["3.0"] == ids["3.0"]    # 3 and 3.0: one cell
    assert len({sid.rsplit("-", 1)[1] for sid in ids.values()}) == 3


def test_set_acceptance_cells_and_their_baseline_decode_exactly_max_tokens():
    grid = expanded(SETS)
    ids = by_acceptance(grid)
    base = grid.baseline_of[ids["3.0"]]
    for sid, ignore_eos in ((ids["null"], False), (ids["3.0"], True), (ids["[0.9, 0.7, 0.5]"], True)):
        assert {b.spec["ignore_eos"] for b in grid.benches[sid].values()} == {ignore_eos}
        assert set(grid.benches[sid]) <= set(grid.benches[base])     # each has its matched baseline bench cell
    assert len(grid.benches[base]) == 2
    only_set = expanded("sweep.set_acceptance=[2.5]")
    [base] = [s for s, c in only_set.servers.items() if c.is_baseline]
    assert [b.spec["ignore_eos"] for b in only_set.benches[base].values()] == [True]


@pytest.mark.parametrize("value, message", [
    ("0.5", "config: sweep.set_acceptance length 0.5 is outside [1, 4] for K=3"),
    ("4.5", "config: sweep.set_acceptance length 4.5 is outside [1, 4] for K=3"),
    ("[[0.9,0.7]]", "config: sweep.set_acceptance rates [0.9, 0.7] have 2 entries but K=3"),
    ("[[0.9,0.7,0.5,0.3]]", "have 4 entries but K=3"),
    ("[[1.2,0.7,0.5]]", "rates [1.2, 0.7, 0.5] must each be in [0, 1]"),
    ("[[0.5,0.7,0.1]]", "rates [0.5, 0.7, 0.1] must not increase"),
    ("[true]", "config: sweep.set_acceptance"),
])
def test_bad_set_acceptance_is_one_line(value, message):
    with pytest.raises(ConfigError) as e:
        expanded(f"sweep.set_acceptance={value}")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_baseline_pair_cannot_set_acceptance_and_the_cli_says_so_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="has method none and drafts nothing: drop it"):
        expanded("pair.method=none", "sweep.set_acceptance=[2.0]")
    out = run([sys.executable, "-m", "specsweep.cli", "cells", f"results_dir={tmp_path}",
               "sweep.set_acceptance=[9.0]"])
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].endswith("sweep.set_acceptance length 9.0 is outside [1, 4] for "
                                                        "K=3: a mean acceptance length counts the bonus token, from "
                                                        "1 (no draft accepted) to K+1 (all)")


@pytest.mark.parametrize("key, value", [("rejection_sample_method", "synthetic"),
                                        ("synthetic_acceptance_length", 3.0),
                                        ("synthetic_acceptance_rates", "[0.9,0.5]")])
def test_speculative_extra_may_not_set_acceptance(key, value):
    with pytest.raises(ConfigError) as e:
        compose_jobs([f"+pair.speculative_extra.{key}={value}"])
    assert str(e.value) == (f"config: pair.speculative_extra.{key} sets vLLM's acceptance behind the cell's back: "
                            "drop it and use sweep.set_acceptance (a mean acceptance length, or a list of "
                            "per-position rates) or sweep.verification (standard or block), which the cell's id "
                            "and name record")


def test_greedy_agreement_is_na_with_its_reason_and_the_summary_takes_it(tmp_path):
    grid = expand(compose_jobs([f"results_dir={tmp_path}", "pair=tiny-ngram", "sweep.num_speculative_tokens=3",
                                "sweep.repeats=1", "dataset.num_prompts=2", "sweep.set_acceptance=[null,2.0]"]))
    bench = next(iter(next(iter(grid.benches.values())).values())).spec
    materialise(bench["dataset"], grid.dataset_file(bench["dataset"]))
    ids = by_acceptance(grid)
    base = grid.baseline_of[ids["2.0"]]
    for bid in grid.benches[base]:
        run_bench_cell(grid, base, bid, FixedSession([rec(0), rec(1)], level=None), progress=False)
    got = {}
    for acceptance, sid in ids.items():
        [bid] = grid.benches[sid]
        got[acceptance] = run_bench_cell(grid, sid, bid, FixedSession(rows(), counters(STEPS)), progress=False)
    assert (got["null"]["greedy_agreement"], got["null"]["greedy_agreement_na"]) == (1.0, None)
    assert got["2.0"]["greedy_agreement"] is None
    assert got["2.0"]["greedy_agreement_na"].startswith("set acceptance: drafts are accepted at a set rate")
    assert got["2.0"]["speedup_e2e_geomean"] is not None        # the speedup still compares with the baseline
    got_rows = summary.rows(Study.load(grid.results_dir / "default", grid))
    table = {r["server_cell"]: r for r in got_rows}
    assert table[ids["2.0"]]["greedy_agreement"] is None and table[ids["2.0"]]["set_acceptance"] == 2.0
    assert table[ids["null"]]["greedy_agreement"] == 1.0 and table[ids["null"]]["set_acceptance"] is None
    # the baseline ran both ignore_eos settings: a row of each, never one row pooling the two workloads
    base_rows = sorted((r for r in got_rows if r["server_cell"] == base), key=lambda r: r["ignore_eos"])
    assert [(r["ignore_eos"], r["repeats"]) for r in base_rows] == [(False, 1), (True, 1)]
    assert [labels.setting(r) for r in base_rows] == [["baseline"], ["baseline", "exact length"]]
    assert labels.both_eos(got_rows)
    assert [labels.config_id(r, eos=True) for r in base_rows] == [f"{base}/synthetic-t0-c4", f"{base}/synthetic-t0-c4-e"]
    assert labels.config_id(base_rows[1]) == f"{base}/synthetic-t0-c4"       # a study of one setting keeps its ids
    assert table[ids["2.0"]]["ignore_eos"] and not table[ids["null"]]["ignore_eos"]


def measured_cell(root, rates_by_repeat, valid=True):
    """A server cell's directory as a finished study leaves it: one metrics.json per bench cell."""
    for i, rates in enumerate(rates_by_repeat):
        bench = root / f"synthetic-t0-c4-r{i}-0000000{i}"
        bench.mkdir(parents=True)
        (bench / "metrics.json").write_text(json.dumps({"valid": valid, "spec_decode": {
            "per_position_acceptance": rates}}))
    return root


def test_rates_from_replays_a_measured_cells_median_rates_under_the_id_of_those_rates(tmp_path):
    source = measured_cell(tmp_path / "study" / "tiny-dflash-k3-abc", [[0.95, 0.71, 0.5], [0.91, 0.7, 0.4],
                                                                      [0.93333, 0.69, 0.45]])
    grid = expanded(f"sweep.set_acceptance=[{{rates_from:{source}}}]")
    (sid,) = by_acceptance(grid).values()
    assert grid.servers[sid].spec["set_acceptance"] == [0.9333, 0.7, 0.45]      # per position, rounded to 4
    assert sid == by_acceptance(expanded("sweep.set_acceptance=[[0.9333,0.7,0.45]]"))["[0.9333, 0.7, 0.45]"]
    assert str(source) not in json.dumps(grid.servers[sid].spec)                # the id holds rates, not a path


def test_rates_from_without_a_finished_cell_or_at_another_k_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        expanded(f"sweep.set_acceptance=[{{rates_from:{tmp_path / 'nothing'}}}]")
    assert str(e.value) == (f"config: sweep.set_acceptance rates_from {tmp_path / 'nothing'} has no valid bench cell "
                            "with per-position acceptance under it: point it at a finished speculative server cell's "
                            "directory (results/<study>/<server cell>), from a study that has run")
    invalid = measured_cell(tmp_path / "invalid", [[0.9, 0.5, 0.1]], valid=False)
    with pytest.raises(ConfigError, match="has no valid bench cell"):
        expanded(f"sweep.set_acceptance=[{{rates_from:{invalid}}}]")
    k7 = measured_cell(tmp_path / "k7", [[0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]])
    with pytest.raises(ConfigError) as e:
        expanded(f"sweep.set_acceptance=[{{rates_from:{k7}}}]")
    assert str(e.value).endswith("measured 7 positions but K=3: replay it at sweep.num_speculative_tokens=[7]")
