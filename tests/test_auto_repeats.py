"""sweep.repeats=auto through the one loop (runner.run_group) on fake sessions whose timings the test sets: the group
stops once its comparisons are answered and records the repeats it did not need (not as failures), a rerun with a
larger budget goes on where it stopped, the summary reads each comparison in the one vocabulary with its looks and
why it stopped, and an A/A cell (sweep.aa) is compared with its baseline like any other."""
import hashlib
import types
from contextlib import contextmanager

import pytest

from specsweep import metrics
from specsweep.core import layout
from specsweep.core.errors import ConfigError
from specsweep.core.results import atomic_write_json, read_json
from specsweep.diagnose import acceptance_checkpoint
from specsweep.grid import repeats, schedule
from specsweep.grid.cells import AA, expand
from specsweep.grid.config import compose_jobs
from specsweep.grid.datasets import materialise
from specsweep.read import summary
from specsweep.read.study import Study
from specsweep.run import looks, runner
from specsweep.run.bench_cell import Measurement
from specsweep.verdicts import spending

GIB = 1024 ** 3


def timed_backend(monkeypatch, events, factor, noise):
    """Sessions whose request e2e is 0.1 s x factor(server cell) x (1 + noise x a fixed draw in [-1, 1] per cell,
    repeat and prompt), a load factor per repeat common to every member (it cancels in the pairs); `noise` may be
    a function of the bench spec (a setting's own noise)."""
    class Session:
        log_path = None

        def __init__(self, sid, k):
            self.sid, self.k = sid, k

        def alive(self):
            return True

        def log_tail(self):
            return ""

        def pause(self):
            pass

        def resume(self):
            pass

        def measure(self, prompts, bench, progress, desc):
            rep = bench["repeat"]
            events.append(("measure", self.sid, rep, bench["concurrency"]))
            rows, spread = [], noise(bench) if callable(noise) else noise
            for i in range(len(prompts)):
                key = f"{self.sid}/{rep}/{i}" + (f"/c{bench['concurrency']}" if callable(noise) else "")
                draw = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 2 ** 31 - 1
                e2e = 0.1 * factor(self.sid) * (1 + 0.3 * (rep % 3)) * (1 + spread * draw)
                rows.append({"index": i, "turn": 0, "ok": True, "error": None, "text": f"answer {i} of {rep}",
                             "prompt_tokens": 4, "completion_tokens": 8, "ttft_s": 0.01, "e2e_s": e2e, "itl_s": [],
                             "chunk_t_s": [e2e * t / 8 for t in range(1, 9)], "chunk_tokens": [1] * 8,
                             **({"acceptance_lengths": [2] * 4} if self.k else {})})
            figures = metrics.request_figures(rows, 1.0)
            figures.update(spec_decode=metrics.acceptance_from_lengths([2] * 4 * len(rows), self.k + 1) if self.k
                           else None, backend="fake")
            return Measurement(rows, figures, None, counted=False)

    @contextmanager
    def open_session(grid, sid, progress=True, how=None):
        events.append(("start", sid))
        yield Session(sid, grid.servers[sid].spec["num_speculative_tokens"])
    monkeypatch.setattr(runner.parts, "session", lambda name: types.SimpleNamespace(open_session=open_session))
    monkeypatch.setattr(runner.residency.psutil, "virtual_memory", lambda: types.SimpleNamespace(available=20 * GIB))


def auto_group(tmp_path, *extra):
    """The default group (a baseline, K=3, K=7) of an auto study on 6 prompts."""
    g = expand(compose_jobs([f"results_dir={tmp_path}", "study=v", "sweep.repeats=auto", "dataset.num_prompts=6",
                             "pair.target=/nonexistent/target", "pair.drafter=/nonexistent/drafter",
                             "pair.built_by_workflow=false", *extra]))
    bench = next(iter(next(iter(g.benches.values())).values())).spec
    materialise(bench["dataset"], g.dataset_file(bench["dataset"]))
    lead = schedule.leads(g)[0]
    return g, lead, schedule.group(g, lead)


def k_factor(g, speeds):
    """factor(sid) from {K: factor}; an A/A cell by speeds['aa'] (default: the baseline's)."""
    def factor(sid):
        spec = g.servers[sid].spec
        return speeds.get("aa", speeds[0]) if spec.get("aa") else speeds[spec["num_speculative_tokens"]]
    return factor


def measured(events) -> list[int]:
    return sorted({e[2] for e in events if e[0] == "measure"})


def test_a_group_stops_once_answered_and_records_the_rest_as_not_needed(tmp_path, monkeypatch):
    g, lead, members = auto_group(tmp_path, "sweep.max_repeats=8", "sweep.looks=every")
    events = []
    timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.7, 7: 0.5}), noise=0.02)
    runner.run_group(g, lead, tmp_path / "marker.done", progress=False)     # no CellError: nothing is missing
    done = measured(events)
    assert done == list(range(len(done))) and 2 <= len(done) < 8             # stopped early, at a repeat boundary
    record = read_json(g.server_dir(lead) / layout.LOOKS)
    assert record["stopped"] == looks.ANSWERED and record["why"] == f"answered at repeat {len(done)}"
    assert {r["verdict"] for r in record["comparisons"].values()} == {"faster"}
    assert len(record["comparisons"]) == 3                                   # K=3, K=7 vs base; K=7 vs K=3
    from specsweep.verdicts import sequential
    for r in record["comparisons"].values():         # issue 54 item 6: the blocks are kept, so a replay reads them
        assert r["block_repeats"] == list(range(len(done))) and len(r["block_values"]) == r["blocks"]
        again = sequential.comparison(r["block_values"], 8, repeats=r["repeats"])
        assert (again["ci_low"], again["ci_high"], again["verdict"]) == (r["ci_low"], r["ci_high"], r["verdict"])
    for sid in members:
        for bid, cell in g.benches[sid].items():
            skipped = cell.spec["repeat"] >= len(done)
            assert g.metrics_path(sid, bid).exists() is not skipped
            if skipped:
                note = repeats.not_needed(g, sid, bid)
                assert note["why"] == record["why"] and note["budget"]["max_repeats"] == 8
                assert repeats.done_path(g, sid, bid).name == layout.NOT_NEEDED
    assert schedule.group_pending(g, lead) == [] and (tmp_path / "marker.done").exists()
    acceptance_checkpoint.record_acceptance(g, members)     # what the group's job does next: finished cells only
    assert all(g.acceptance_path(s).exists() for s in members if g.diagnosed(s))
    # the summary: the one vocabulary, with the looks and why each stopped
    f = g.study_files("v")
    summary.write_summary(Study.load(f.dir, g), f.summary, f.k_comparison, f.by_category)
    from specsweep.core import table
    rows = [r for r in table.read(f.summary) if r["method"] != "none"]
    assert {r["verdict"] for r in rows} == {"faster"} and {r["repeats"] for r in rows} == {len(done)}
    assert all(r["looks"] == len(done) and r["stopped"].startswith("answered at repeat") for r in rows)
    assert all(r["speedup_e2e_ci_low"] > 1 for r in rows) and rows[0]["aa_check"] is None
    [k] = table.read(f.k_comparison)
    assert k["statement"].endswith(f"K=7 faster, answered at {k['answered_s']:.0f} s, repeat {k['answered_repeat']}")
    assert k["resolved"] and k["looks"] == len(done) and k["answered_repeat"] <= len(done)
    # compare reads each side against its own baseline as the summary does: the sequence's interval and looks
    from specsweep.read import compare
    for srow in rows:
        crow = next(r for r in compare.compare(f.dir, f.dir) if r["method"] != "none"
                    and r["num_speculative_tokens"] == srow["num_speculative_tokens"])
        assert (crow["a_verdict"], crow["a_looks"], crow["b_stopped"]) == (srow["verdict"], len(done), srow["stopped"])
        assert crow["a_speedup_e2e_ci_low"] == pytest.approx(srow["speedup_e2e_ci_low"])


def test_a_rerun_with_a_larger_budget_goes_on_where_it_stopped(tmp_path, monkeypatch):
    speeds = {0: 1.0, 3: 0.99, 7: 1.01}        # differences under the margin, blocks too noisy for it at 3
    g, lead, members = auto_group(tmp_path, "sweep.max_repeats=3", "sweep.looks=every")
    events = []
    timed_backend(monkeypatch, events, k_factor(g, speeds), noise=0.3)
    runner.run_group(g, lead, tmp_path / "m1.done", progress=False)
    assert measured(events) == [0, 1, 2]
    record = read_json(g.server_dir(lead) / layout.LOOKS)
    assert record["stopped"] == looks.BUDGET and "unresolved" in {r["verdict"] for r in record["comparisons"].values()}
    # the budget grows: the same ids for repeats 0-2, three more to run; the group goes on from repeat 3
    g2, _, _ = auto_group(tmp_path, "sweep.max_repeats=6", "sweep.looks=every")
    assert all(set(g.benches[s]) < set(g2.benches[s]) for s in members)
    events.clear()
    timed_backend(monkeypatch, events, k_factor(g2, speeds), noise=0.3)
    runner.run_group(g2, lead, tmp_path / "m2.done", progress=False)
    assert measured(events)[0] == 3


def test_not_needed_records_are_keyed_on_the_budget(tmp_path, monkeypatch):
    g, lead, members = auto_group(tmp_path, "sweep.max_repeats=6", "sweep.looks=every")
    events = []
    timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.7, 7: 0.5}), noise=0.02)
    runner.run_group(g, lead, tmp_path / "m1.done", progress=False)
    stop = len(measured(events))
    # a larger budget makes them pending again; the group's first look, before any server starts, stops it
    g2, _, _ = auto_group(tmp_path, "sweep.max_repeats=9", "sweep.looks=every")
    assert {b for s, b in schedule.group_pending(g2, lead)} == \
        {b for s in members for b, c in g2.benches[s].items() if c.spec["repeat"] >= stop}
    events.clear()
    runner.run_group(g2, lead, tmp_path / "m2.done", progress=False)
    assert events == [] and schedule.group_pending(g2, lead) == []
    assert read_json(g2.server_dir(lead) / layout.LOOKS)["budget"]["max_repeats"] == 9
    # a fixed study of the same grid point: the records say nothing to it, its repeats are to run
    g3 = expand(compose_jobs([f"results_dir={tmp_path}", "study=v", "sweep.repeats=6", "dataset.num_prompts=6",
                              "pair.target=/nonexistent/target", "pair.drafter=/nonexistent/drafter",
                              "pair.built_by_workflow=false"]))
    assert len(schedule.group_pending(g3, lead)) == 3 * (6 - stop)


def test_planned_looks_stop_at_a_planned_repeat_and_refuse_a_larger_budget(tmp_path, monkeypatch):
    """sweep.looks=planned (the default): the group looks at 3, 5, 7, 10 and stops at the first planned look
    where every comparison is answered; each record says its rule, looks and nominal level; a rerun under
    another plan is refused in one line, the same budget's rerun starts nothing."""
    g, lead, members = auto_group(tmp_path, "sweep.max_repeats=10")
    events = []
    timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.7, 7: 0.5}), noise=0.02)
    runner.run_group(g, lead, tmp_path / "m1.done", progress=False)
    done = len(measured(events))
    record = read_json(g.server_dir(lead) / layout.LOOKS)
    assert done in (3, 5, 7) and record["stopped"] == looks.ANSWERED and record["budget"]["looks"] == "planned"
    rec = next(iter(record["comparisons"].values()))
    assert (rec["method"], rec["plan"], rec["looks"]) == ("planned", [3, 5, 7, 10], [3, 5, 7, 10].index(done) + 1)
    assert {r["verdict"] for r in record["comparisons"].values()} == {"faster"} and 0 < rec["nominal"] < 0.05
    assert read_json(g.server_dir(lead) / layout.LOOK_PLAN)["plan"] == [3, 5, 7, 10]
    f = g.study_files("v")
    summary.write_summary(Study.load(f.dir, g), f.summary, f.k_comparison, f.by_category)
    from specsweep.core import table
    rows = [r for r in table.read(f.summary) if r["method"] != "none"]
    assert {r["verdict"] for r in rows} == {"faster"} and {r["looks"] for r in rows} == {rec["looks"]}
    events.clear()
    runner.run_group(g, lead, tmp_path / "m2.done", progress=False)         # the same budget: nothing to run
    assert events == []
    # issue 54: the plan record says which boundaries it used; one written before (no `boundaries`) keeps issue
    # 46's on a rerun and in the summary, and the new default budget (20) is refused for it in one line
    path = g.server_dir(lead) / layout.LOOK_PLAN
    assert read_json(path)["boundaries"] == rec["boundaries"] == spending.CALIBRATED
    old = {k: v for k, v in read_json(path).items() if k != "boundaries"}
    atomic_write_json(path, old)
    assert looks.calibration(g, lead) == {"calibration": spending.NOMINAL_T, "spending": spending.OBF,
                                          "looks": (3, 5, 7, 10)}
    # a plan of this budget recorded by another design (its looks and spending function) is kept, not refused
    atomic_write_json(path, {**old, "boundaries": spending.CALIBRATED, "plan": [4, 10], "spending": spending.POCOCK})
    looks.check_plan(g, lead)
    assert looks.calibration(g, lead) == {"calibration": spending.CALIBRATED, "spending": spending.POCOCK,
                                          "looks": (4, 10)}
    atomic_write_json(path, old)
    runner.run_group(g, lead, tmp_path / "m2b.done", progress=False)
    summary.write_summary(Study.load(f.dir, g), f.summary, f.k_comparison, f.by_category)
    assert events == [] and {r["verdict"] for r in table.read(f.summary) if r["method"] != "none"} == {"faster"}
    g20, _, _ = auto_group(tmp_path)
    assert repeats.budget(g20.configs[lead]["sweep"])["max_repeats"] == 20
    with pytest.raises(ConfigError, match=r"sweep.max_repeats=10"):
        runner.run_group(g20, lead, tmp_path / "m20.done", progress=False)
    g2, _, _ = auto_group(tmp_path, "sweep.max_repeats=12")
    with pytest.raises(ConfigError, match=r"plan \[3, 5, 7, 10\].*new results_dir") as e:
        runner.run_group(g2, lead, tmp_path / "m3.done", progress=False)
    assert "\n" not in str(e.value) and events == []
    g3, _, _ = auto_group(tmp_path, "sweep.max_repeats=12", "sweep.looks=every")    # nor by switching the rule
    with pytest.raises(ConfigError, match="keep sweep.looks=planned"):
        runner.run_group(g3, lead, tmp_path / "m4.done", progress=False)


def test_an_aa_cell_is_a_second_baseline_compared_like_any_other(tmp_path, monkeypatch):
    g, lead, members = auto_group(tmp_path, "sweep.max_repeats=6", "sweep.aa=true")
    [aa] = [s for s in members if g.servers[s].spec.get("aa")]
    assert aa.startswith("base-aa-") and g.baseline_of[aa] == lead and g.servers[aa].pair["name"] == AA
    assert set(g.benches[aa]) == set(g.benches[lead])                        # the baseline's bench cells
    plain, _, _ = auto_group(tmp_path / "plain", "sweep.max_repeats=6")
    assert [s for s in plain.servers] == [s for s in g.servers if s != aa]   # no other id moves
    events = []
    timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.7, 7: 0.5}), noise=0.01)
    runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    comparisons = read_json(g.server_dir(lead) / layout.LOOKS)["comparisons"]
    assert next(r for name, r in comparisons.items() if name.startswith(aa))["verdict"] == "equivalent"
    f = g.study_files("v")
    summary.write_summary(Study.load(f.dir, g), f.summary, f.k_comparison, f.by_category)
    from specsweep.core import table
    [row] = [r for r in table.read(f.summary) if r["pair"] == AA]
    assert row["verdict"] == "equivalent within ±5%" and row["aa_check"] is None


def test_an_aa_cell_that_differs_warns_that_no_verdict_can_be_trusted(tmp_path, monkeypatch, capsys):
    g, lead, members = auto_group(tmp_path, "sweep.max_repeats=6", "sweep.aa=true")
    events = []
    timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.7, 7: 0.5, "aa": 0.8}), noise=0.01)
    runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    f = g.study_files("v")
    summary.write_summary(Study.load(f.dir, g), f.summary, f.k_comparison, f.by_category)
    from specsweep.core import table
    rows = table.read(f.summary)
    assert all(r["aa_check"].startswith("the A/A check failed") and "faster" in r["aa_check"] for r in rows)
    assert "WARNING: the A/A check failed" in capsys.readouterr().out


@pytest.mark.parametrize("extra, words", [
    (("sweep.rounds=2",), "sweep.rounds must be 1"), (("sweep.residency=relaunch",), "relaunch"),
    (("sweep.aa=true", "sweep.baseline=false"), "sweep.aa=true")])
def test_what_auto_and_aa_refuse_is_one_line(tmp_path, extra, words):
    with pytest.raises(ConfigError, match=words) as e:
        compose_jobs([f"results_dir={tmp_path}", "sweep.repeats=auto", *extra])
    assert "\n" not in str(e.value)


def test_the_aa_check_holds_no_group(tmp_path, monkeypatch):
    g, lead, members = auto_group(tmp_path, "sweep.max_repeats=10", "sweep.aa=true")
    events = []
    timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.6, 7: 0.36}), noise=0.25)
    runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    record = read_json(g.server_dir(lead) / layout.LOOKS)
    [check] = [r for name, r in record["comparisons"].items() if name.startswith("base-aa-")]
    assert record["stopped"] == looks.ANSWERED and record["repeats"] < 10          # the others are answered
    assert check["verdict"] == "unresolved" and check["stopped"] == looks.GROUP    # read where they stopped
    f = g.study_files("v")
    summary.write_summary(Study.load(f.dir, g), f.summary, f.k_comparison, f.by_category)
    from specsweep.core import table
    [row] = [r for r in table.read(f.summary) if r["pair"] == AA]
    assert row["verdict"] == "unresolved" and row["stopped"] == f"{looks.GROUP} at repeat {record['repeats']}"
    assert row["aa_check"] is None


def test_a_time_budget_stops_the_group_and_reads_the_rest_unresolved(tmp_path, monkeypatch):
    g, lead, members = auto_group(tmp_path, "sweep.max_repeats=8", "sweep.max_minutes=3")
    clock = iter(range(0, 10_000, 100))       # each call 100 s later: the third look is past 3 minutes
    monkeypatch.setattr(looks, "time", types.SimpleNamespace(monotonic=lambda: next(clock), time=lambda: 0.0))
    events = []
    timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.99, 7: 1.01}), noise=0.3)
    runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    record = read_json(g.server_dir(lead) / layout.LOOKS)
    assert record["stopped"] == looks.TIME and measured(events) == list(range(record["repeats"])) and \
        record["repeats"] < 8
    assert record["why"] == f"the time budget of 3 min was spent at repeat {record['repeats']}"
    assert {r["verdict"] for r in record["comparisons"].values()} == {"unresolved"}
    assert schedule.group_pending(g, lead) == []                   # the rest are not needed, not failed
    f = g.study_files("v")
    summary.write_summary(Study.load(f.dir, g), f.summary, f.k_comparison, f.by_category)
    from specsweep.core import table
    rows = [r for r in table.read(f.summary) if r["method"] != "none"]
    assert {(r["verdict"], r["stopped"]) for r in rows} == {("unresolved", looks.TIME)}


def test_each_setting_stops_apart_and_a_member_no_comparison_needs_stops_taking_turns(tmp_path, monkeypatch):
    """Issue 54 item 1: two settings (c=1 quiet, c=4 noisy); K=3 and K=7 as fast as each other. At c=1 every
    comparison is answered within a few repeats and the setting stops: its cells left are not needed. At c=4 both
    Ks against the baseline are answered early, K=7 vs K=3 is not: the baseline stops taking turns there, the Ks
    go on to the budget, taking turns in a rotating order between the two of them. Each comparison's record says
    when and why it stopped, and when it was answered; a rerun runs nothing."""
    g, lead, members = auto_group(tmp_path, "sweep.max_repeats=8", "sweep.looks=every", "sweep.concurrency=[1,4]")
    events = []
    timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.6, 7: 0.6}),
                  noise=lambda bench: 0.02 if bench["concurrency"] == 1 else 0.3)
    runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    record = read_json(g.server_dir(lead) / layout.LOOKS)
    by_c = {c: {n: r for n, r in record["comparisons"].items() if f" c={c} " in n} for c in (1, 4)}
    assert len(by_c[1]) == len(by_c[4]) == 3
    quiet = {r["stopped_at"] for r in by_c[1].values()}
    assert len(quiet) == 1 and (stop1 := quiet.pop()) < 8
    assert all(r["stopped"] == looks.ANSWERED and r["answered_s"] is not None and r["answered_at"] <= stop1
               for r in by_c[1].values())
    base = {r["stopped_at"] for n, r in by_c[4].items() if n.endswith(tuple(by_c[4])) and f" vs {lead} " in n}
    [kk] = [r for n, r in by_c[4].items() if f" vs {lead} " not in n]
    assert (kk["stopped"], kk["verdict"], kk["stopped_at"]) == (looks.BUDGET, "unresolved", 8)
    [stop4] = base
    assert stop4 < 8 and all(r["stopped"] == looks.ANSWERED for n, r in by_c[4].items() if f" vs {lead} " in n)
    ran = {(sid, rep, c) for _, sid, rep, c in [e for e in events if e[0] == "measure"]}
    for sid in members:
        assert {rep for s, rep, c in ran if s == sid and c == 1} == set(range(stop1))
        assert {rep for s, rep, c in ran if s == sid and c == 4} == set(range(stop4 if sid == lead else 8))
    for sid in members:
        for bid, cell in g.benches[sid].items():
            c, rep = cell.spec["concurrency"], cell.spec["repeat"]
            skipped = rep >= (stop1 if c == 1 else stop4 if sid == lead else 8)
            assert g.metrics_path(sid, bid).exists() is not skipped
            if skipped:
                why = repeats.not_needed(g, sid, bid)["why"]
                assert why == (f"answered at repeat {stop1}" if c == 1 else f"not needed after repeat {stop4}: "
                               f"no open comparison at {by_c[4][next(iter(by_c[4]))]['setting']} needs it")
    # the turns left rotate among the members still needed: the two Ks alternate who goes first
    firsts = [next(e[1] for e in events if e[0] == "measure" and e[2] == rep) for rep in range(max(stop1, stop4), 8)]
    assert lead not in firsts and all(a != b for a, b in zip(firsts, firsts[1:]))
    assert record["stopped"] == looks.BUDGET and schedule.group_pending(g, lead) == []
    f = g.study_files("v")
    summary.write_summary(Study.load(f.dir, g), f.summary, f.k_comparison, f.by_category)
    from specsweep.core import table
    rows = {(r["num_speculative_tokens"], r["concurrency"]): r for r in table.read(f.summary) if r["method"] != "none"}
    assert {rows[k, 1]["stopped"] for k in (3, 7)} <= {f"answered at repeat {r}" for r in range(1, stop1 + 1)}
    assert {rows[k, 4]["verdict"] for k in (3, 7)} == {"faster"}
    ks = {k["concurrency"]: k for k in table.read(f.k_comparison)}
    assert ks[4]["stopped"] == looks.BUDGET and ks[4]["verdict"] == "unresolved"
    # time to answer (issue 54 item 3): the repeat and seconds of the look that answered each, from looks.json
    [k1] = [r for n, r in by_c[1].items() if f" vs {lead} " not in n]
    assert (ks[1]["answered_repeat"], ks[1]["answered_s"]) == (k1["answered_at"], k1["answered_s"])
    assert ks[1]["statement"].endswith(f"equivalent within ±5%, answered at {k1['answered_s']:.0f} s, repeat "
                                       f"{k1['answered_at']}")
    assert ks[4]["answered_repeat"] is None and ks[4]["answered_s"] is None and "answered" not in ks[4]["statement"]
    for (k, c), row in rows.items():
        [rec] = [r for n, r in by_c[c].items() if n.startswith(row["server_cell"]) and f" vs {lead} " in n]
        assert (row["answered_repeat"], row["answered_s"]) == (rec["answered_at"], rec["answered_s"])
        assert 0 < row["answered_s"] <= record["seconds"]
    events.clear()
    runner.run_group(g, lead, tmp_path / "m2.done", progress=False)         # the same budget: nothing to run
    assert events == []
    # a larger budget: the looks of the repeats done are replayed, so the quiet setting and the baseline stop where
    # they stopped, and only the two Ks go on at c=4
    g2, _, _ = auto_group(tmp_path, "sweep.max_repeats=10", "sweep.looks=every", "sweep.concurrency=[1,4]")
    timed_backend(monkeypatch, events, k_factor(g2, {0: 1.0, 3: 0.6, 7: 0.6}),
                  noise=lambda bench: 0.02 if bench["concurrency"] == 1 else 0.3)
    runner.run_group(g2, lead, tmp_path / "m3.done", progress=False)
    assert {e[1:] for e in events if e[0] == "measure"} == {(s, r, 4) for s in members[1:] for r in (8, 9)}
    again = read_json(g2.server_dir(lead) / layout.LOOKS)["comparisons"]
    assert {n: r["answered_s"] for n, r in again.items()} == {n: r["answered_s"] for n, r in record["comparisons"].items()}


def test_a_precision_keeps_a_decided_comparison_open_until_its_interval_is_that_narrow(tmp_path, monkeypatch):
    """sweep.precision=0.02: a comparison whose verdict is decided is answered only once its interval's hi / lo is
    at most 1.02; the budget records it (not-needed records and looks.json are keyed on it)."""
    g, lead, members = auto_group(tmp_path, "sweep.max_repeats=8", "sweep.looks=every")
    events = []
    timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.7, 7: 0.5}), noise=0.02)
    runner.run_group(g, lead, tmp_path / "m1.done", progress=False)
    loose = read_json(g.server_dir(lead) / layout.LOOKS)["repeats"]
    p, _, _ = auto_group(tmp_path / "p", "sweep.max_repeats=8", "sweep.looks=every", "sweep.precision=0.02")
    events.clear()
    timed_backend(monkeypatch, events, k_factor(p, {0: 1.0, 3: 0.7, 7: 0.5}), noise=0.02)
    runner.run_group(p, lead, tmp_path / "m2.done", progress=False)
    record = read_json(p.server_dir(lead) / layout.LOOKS)
    assert record["budget"]["precision"] == 0.02 and record["repeats"] > loose
    for r in record["comparisons"].values():
        assert r["verdict"] == "faster" and r["precision"] == 0.02
        assert r["stopped"] == looks.BUDGET or r["ci_high"] / r["ci_low"] <= 1.02


def test_doctor_forecasts_each_comparison_from_the_spreads_this_host_recorded(tmp_path, monkeypatch):
    """Issue 54 item 4: after an auto study, the next one's forecast reads the recorded blocks of the same
    comparison and setting (looks.json keeps them): the repeat at which a typical study answers it and about how
    long that takes, or that the budget will not."""
    from specsweep.read import spreads
    from specsweep.verdicts import forecast
    g, lead, members = auto_group(tmp_path, "sweep.max_repeats=8", "sweep.looks=every")
    events = []
    timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.7, 7: 0.5}), noise=0.02)
    runner.run_group(g, lead, tmp_path / "m.done", progress=False)
    entries = spreads.recorded(tmp_path)
    assert {e["label"] for e in entries} == {"K=3 vs baseline", "K=7 vs baseline", "K=7 vs K=3"}
    lines = spreads.forecast_lines(auto_group(tmp_path, "sweep.max_repeats=20")[0])
    assert len(lines) == 3 and all("answered at about repeat 6, about " in line for line in lines), lines
    tight = spreads.forecast_lines(auto_group(tmp_path, "sweep.max_repeats=4", "sweep.precision=0.001")[0])
    assert all("unlikely to answer" in line for line in tight), tight
    assert spreads.forecast_lines(g, host="another-host")[0].endswith("no blocks recorded on this host: no forecast")
    loop = spreads.forecast_lines(auto_group(tmp_path, "sweep.waves=null", "sweep.warmup_turns=every")[0])
    assert all(line.endswith("c=4 out=64: no blocks recorded on this host: no forecast")
               for line in loop), loop             # blocks in waves (the default) never forecast a closed loop
    # the rule's own arithmetic: at a spread of 1.4% a 1.16x difference is decided at the first planned look of
    # 20 (6), 2% wide at the last (20); a budget of 10 cannot make it 2% wide; every repeat: 33 blocks
    assert forecast.repeats_to_answer(0.014, 0.15, 20) == 6
    assert forecast.repeats_to_answer(0.014, 0.15, 20, precision=0.02) == 20
    assert forecast.repeats_to_answer(0.014, 0.15, 10, precision=0.02) is None
    assert forecast.repeats_to_answer(0.014, 0.15, 40, looks="every", precision=0.02) == 33
    # a carried launch SD (sweep.launch_sd) of 1%: +-1.96% from it alone, so 2% wide is never met
    assert forecast.repeats_to_answer(0.014, 0.15, 20, launch_sd=0.01) == 6
    assert forecast.repeats_to_answer(0.014, 0.15, 40, precision=0.02, launch_sd=0.01) is None
    given = spreads.forecast_lines(auto_group(tmp_path, "sweep.max_repeats=20", "sweep.launch_sd=0.2")[0])
    assert all("carrying a launch SD of 20.00% (sweep.launch_sd))" in line for line in given), given
    assert given[0].startswith("K=3 vs baseline") and given[0].endswith("the launch SD alone leaves it +-39.2%")


def test_an_answered_cell_says_when_it_was_answered_once():
    """An auto study's verdict line: `stopped: answered at 16 s, repeat 6`, not its `stopped` column and then its
    time to answer again."""
    from specsweep.core import table

    r = {c: None for c in table.names(table.SUMMARY)}
    r.update(server_cell="k7", method="dflash", pair="tiny", dataset="synthetic", thinking=False, concurrency=4,
             speedup_e2e_geomean=1.75, speedup_e2e_ci_low=1.66, speedup_e2e_ci_high=1.84, verdict="faster",
             paired_prompts=16, valid_repeats=10, looks=2, stopped="answered at repeat 6", answered_repeat=6,
             answered_s=16.2, speedup_output_tok_s=1.8)
    [line] = summary.verdict_lines([r], [])
    assert "(16 prompts, 10 repeat(s), 2 look(s), stopped: answered at 16 s, repeat 6); " in line, line
    assert line.count("answered") == 1, line
    r.update(answered_s=None)                  # a record without its seconds
    assert "stopped: answered at repeat 6); " in summary.verdict_lines([r], [])[0]
