"""The one loop (runner.run_group) on fake sessions: a group's members start once, are paused between their turns and
resumed for them (sweep.pause_idle=true), a member that never comes up or dies fails only its own cells, and whatever
opened is stopped, also when the job is stopped while a member starts."""
import signal
import threading
import time
import types
from contextlib import contextmanager

import pytest
from helpers import DATA, MODELS_SERVER

from specsweep import metrics
from specsweep.backends.vllm import engine_death
from specsweep.core.errors import CellError, ServerError
from specsweep.core.results import read_json
from specsweep.grid import schedule
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.grid.datasets import materialise
from specsweep.run import runner
from specsweep.run.bench_cell import Measurement

GIB = 1024 ** 3


class FakeSession:
    log_path = None

    def __init__(self, sid, events, dies_after=None):
        self.sid, self.events, self.dies_after, self.cells = sid, events, dies_after, 0

    def alive(self):
        return self.dies_after is None or self.cells < self.dies_after

    def log_tail(self):
        return ""

    def pause(self):
        self.events.append(("pause", self.sid))

    def resume(self):
        self.events.append(("resume", self.sid))

    def measure(self, prompts, bench, progress, desc):
        self.cells += 1
        self.events.append(("measure", self.sid, bench["repeat"]))
        rows = [{"index": i, "turn": 0, "ok": True, "error": None, "text": f"answer {i}", "prompt_tokens": 4,
                 "completion_tokens": 8, "ttft_s": 0.01, "e2e_s": 0.08, "itl_s": [], "chunk_t_s": [0.01 * t for t in
                 range(1, 9)], "chunk_tokens": [1] * 8} for i in range(len(prompts))]
        failure = None if self.alive() else "server died during the cell"
        figures = metrics.request_figures(rows, 0.1)
        figures.update(spec_decode=None, backend="fake")
        return Measurement(rows, figures, failure, counted=False)


def fake_backend(monkeypatch, events, broken=(), dies=None, slow=None, session=None,
                 why="exited with code 1 before it was ready"):
    """parts.session() answers with a backend whose sessions are FakeSessions: `broken` never come up (`why`), `dies`
    (sid, n) dies during its n-th cell, `slow` (sid, s) takes s seconds to come up; `session`: another FakeSession
    class."""
    @contextmanager
    def open_session(grid, sid, progress=True, how=None):
        if slow and sid == slow[0]:
            events.append(("starting", sid))
            deadline = time.monotonic() + slow[1]
            while time.monotonic() < deadline:
                time.sleep(0.05)
        if sid in broken:
            raise ServerError(why)
        events.append(("start", sid, how.residency))
        try:
            yield (session or FakeSession)(sid, events, dies[1] if dies and dies[0] == sid else None)
        finally:
            events.append(("stop", sid))
    monkeypatch.setattr(runner.parts, "session", lambda name: types.SimpleNamespace(open_session=open_session))
    monkeypatch.setattr(runner.residency.psutil, "virtual_memory", lambda: types.SimpleNamespace(available=20 * GIB))


def make_group(tmp_path, start_at_once=1):
    """The default group (a baseline, K=3, K=7), its members started `start_at_once` at a time."""
    g = expand(compose_jobs([f"results_dir={tmp_path}", "sweep.repeats=2", "dataset.num_prompts=3",
                             "sweep.pause_idle=true", f"sweep.start_at_once={start_at_once}"]))
    bench = next(iter(next(iter(g.benches.values())).values())).spec
    materialise(bench["dataset"], g.dataset_file(bench["dataset"]))
    lead = schedule.leads(g)[0]
    return g, lead, schedule.group(g, lead)


@pytest.fixture
def group(tmp_path):
    return make_group(tmp_path)


def test_members_start_once_and_are_paused_between_their_turns(group, monkeypatch, tmp_path):
    g, lead, (base, k3, k7) = group
    events = []
    fake_backend(monkeypatch, events)
    runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    assert sorted(e for e in events if e[0] == "start") == sorted(("start", s, "coresident") for s in (base, k3, k7))
    assert [e[1:] for e in events if e[0] == "measure"] == [(base, 0), (k3, 0), (k7, 0), (k3, 1), (k7, 1), (base, 1)]
    for sid in (base, k3, k7):          # every turn between a resume and a pause; paused from start-up to its turn
        mine = [e[0] for e in events if e[1] == sid]
        assert mine == ["start", "pause"] + ["resume", "measure", "pause"] * 2 + ["stop"]
    assert (tmp_path / "marker.done").exists()
    for sid in (base, k3, k7):
        for bid in g.benches[sid]:
            m = read_json(g.metrics_path(sid, bid))
            assert m["residency"] == "coresident" and m["baseline_cell"] == base and m["round"] == 0


def test_a_member_that_never_comes_up_fails_only_its_cells(group, monkeypatch, tmp_path):
    g, lead, (base, k3, k7) = group
    events = []
    fake_backend(monkeypatch, events, broken=(k3,))
    with pytest.raises(CellError) as e:
        runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    first = str(e.value).splitlines()[0]
    assert first.startswith(f"group {base}: 2 bench cell(s) not finished") and k3 in first and k7 not in first
    assert f"first: server cell {k3}: exited with code 1" in first
    assert all(g.metrics_path(s, b).exists() for s in (base, k7) for b in g.benches[s])
    assert not (tmp_path / "marker.done").exists()
    # a rerun starts only what is missing: K=3 alone
    events.clear()
    fake_backend(monkeypatch, events)
    runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    assert [e[1] for e in events if e[0] == "start"] == [k3]


def test_a_member_that_dies_takes_no_more_turns_and_the_others_finish(group, monkeypatch, tmp_path):
    g, lead, (base, k3, k7) = group
    events = []
    fake_backend(monkeypatch, events, dies=(k7, 1))
    with pytest.raises(CellError, match=f"group {base}: 2 bench cell"):
        runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    assert [e[1:] for e in events if e[0] == "measure" and e[1] == k7] == [(k7, 0)]     # its second turn never ran
    assert all(g.metrics_path(s, b).exists() for s in (base, k3) for b in g.benches[s])
    assert {e[1] for e in events if e[0] == "stop"} == {base, k3, k7}


def test_a_member_whose_engine_died_says_so_with_its_root_cause(group, monkeypatch, tmp_path, capsys):
    """A vLLM session says what killed its engine (VllmSession.death, engine_death's rule); the member's later cells
    fail with that line, not a bare "its server died"."""
    class Dying(FakeSession):
        def death(self, lead):
            return None if self.alive() else f"{lead}: ModuleNotFoundError: No module named 'flashinfer' (log x.log)"

    g, lead, (base, k3, k7) = group
    fake_backend(monkeypatch, [], dies=(k7, 1), session=Dying)
    with pytest.raises(CellError) as e:
        runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    assert (f"server cell {k7}: its server died during bench cell" in str(e.value)
            and "ModuleNotFoundError: No module named 'flashinfer'" in str(e.value))
    assert "No module named 'flashinfer'" in capsys.readouterr().out     # each failed cell's own FAILED line


def test_a_member_whose_engine_refused_to_start_or_died_mid_cell_quotes_the_engines_error_and_fix(
        group, monkeypatch, tmp_path, capsys):
    """Issue 52: at start-up (VllmSession's start, engine_death.start_failure) and mid-cell (VllmSession.death), the
    job's lines quote the engine core's own ValueError and its fix, read from a captured vLLM 0.26 log (reconstructed
    from the issue's messages, tests/data), never vLLM's "Engine core initialization failed. See root cause above"."""
    g, lead, (base, k3, k7) = group
    mamba, no_kv = tmp_path / "mamba.log", tmp_path / "no_kv.log"
    mamba.write_text((DATA / "vllm026_moe_hybrid_mamba_blocks_log.txt").read_text())
    no_kv.write_text((DATA / "vllm026_moe_hybrid_no_kv_memory_log.txt").read_text())
    wrapper = (f"vLLM exited with code 1 before it was ready; log {mamba}, last lines:\n"
               "RuntimeError: Engine core initialization failed. See root cause above.")

    class Dying(FakeSession):
        def death(self, lead):
            return engine_death.death_line(no_kv, self.alive(), lead)

    fake_backend(monkeypatch, [], broken=(k3,), dies=(k7, 1), session=Dying,
                 why=engine_death.start_failure(wrapper, mamba))
    with pytest.raises(CellError) as e:
        runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    first = str(e.value).splitlines()[0]
    assert f"first: server cell {k3}: vLLM exited with code 1 before it was ready: ValueError: max_num_seqs (64) " \
        "exceeds available Mamba cache blocks (44)" in first
    assert "(fix: give --max-num-seqs at most 44 in server.extra_args" in first
    assert (f"server cell {k7}: its server died during bench cell" in str(e.value)
            and "ValueError: No available memory for the cache blocks" in str(e.value)
            and "(fix: the weights leave no room for a KV cache" in str(e.value))
    failed = [line for line in capsys.readouterr().out.splitlines() if "FAILED" in line]
    assert failed and all("See root cause above" not in line for line in failed)
    assert any(k3 in line and "Mamba cache blocks (44)" in line for line in failed)


def test_relaunch_starts_a_member_for_each_turn(tmp_path, monkeypatch):
    g = expand(compose_jobs([f"results_dir={tmp_path}", "sweep.repeats=2", "sweep.rounds=2", "dataset.num_prompts=3",
                             "sweep.residency=relaunch"]))
    bench = next(iter(next(iter(g.benches.values())).values())).spec
    materialise(bench["dataset"], g.dataset_file(bench["dataset"]))
    events = []
    fake_backend(monkeypatch, events)
    lead = schedule.leads(g)[0]
    runner.run_group(g, lead, tmp_path / "m.done", progress=False)
    base, k3, k7 = schedule.group(g, lead)
    assert [(e[0], e[1]) for e in events if e[0] in ("start", "stop")] == [
        (a, s) for s in (base, k3, k7, k3, k7, base) for a in ("start", "stop")]
    assert not [e for e in events if e[0] in ("pause", "resume")]


class Stop(BaseException):
    """What a job's SIGTERM raises (snakejob.Terminated), here from SIGUSR1."""


@contextmanager
def signal_after(seconds):
    """SIGUSR1 raised from another thread after `seconds`, as a signal from outside may reach any thread; its
    handler raises Stop in the main thread."""
    def stop(signum, frame):
        raise Stop()
    old = signal.signal(signal.SIGUSR1, stop)
    timer = threading.Timer(seconds, lambda: signal.raise_signal(signal.SIGUSR1))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, old)


def test_a_sigterm_while_a_member_starts_stops_every_one_already_up(group, monkeypatch, tmp_path):
    g, lead, (base, k3, k7) = group
    events = []
    fake_backend(monkeypatch, events, slow=(k3, 30))

    with pytest.raises(Stop), signal_after(0.5):
        runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    assert ("starting", k3) in events and not [e for e in events if e[1] == k7]       # K=7 never started
    assert [e[0] for e in events if e[1] == base] == ["start", "pause", "stop"]        # the baseline was stopped


class LowAcceptanceSession(FakeSession):
    """A speculative member whose drafts are almost never accepted (AL 1.125 at K=3), so its diagnosis is asked for."""

    def measure(self, prompts, bench, progress, desc):
        self.events.append(("bench", self.sid, bench["thinking"], len(prompts)))
        m = super().measure(prompts, bench, progress, desc)
        if not self.sid.startswith("base-"):
            m.figures["spec_decode"] = metrics.acceptance(metrics.SpecCounters(16, 48, 2, {0: 2}))
            m.figures["spec_decode_source"] = "fake"
        return m


def test_a_thinking_cell_s_counterfactual_without_thinking_runs_on_its_own_server(tmp_path, monkeypatch):
    """Thinking off is a bench setting: a low thinking-on cell's `nothink` counterfactual is served by the cell's own
    server before the group's servers stop, and the diagnose job then finds it done and launches nothing for it."""
    from specsweep.diagnose import counterfactuals

    g = expand(compose_jobs([f"results_dir={tmp_path}", "sweep.repeats=1", "dataset.num_prompts=6",
                             "sweep.thinking=true", "sweep.num_speculative_tokens=[3]", "sweep.diagnose.prompts=2"]))
    bench = next(iter(next(iter(g.benches.values())).values())).spec
    materialise(bench["dataset"], g.dataset_file(bench["dataset"]))
    lead = schedule.leads(g)[0]
    base, k3 = schedule.group(g, lead)
    events = []
    fake_backend(monkeypatch, events, session=LowAcceptanceSession)
    runner.run_group(g, lead, tmp_path / "marker.done", progress=False, also=counterfactuals.on_own_server)
    assert [e for e in events if e[0] in ("bench", "stop")][-4:] == \
        [("bench", k3, True, 6), ("bench", k3, False, 2), ("stop", k3), ("stop", base)]
    assert [e for e in events if e[0] == "start"] == [("start", base, "coresident"), ("start", k3, "coresident")]
    [cf] = [s for s in g.servers if g.servers[s].counterfactual == "nothink"]
    [bid] = g.benches[cf]
    done = read_json(g.metrics_path(cf, bid))
    assert done["served_by"] == k3 and g.benches[cf][bid].spec["thinking"] is False
    assert counterfactuals.on_own_server(g, k3) == []          # done: nothing more to run on it
    events.clear()
    runner.run_server_cell(g, cf, tmp_path / "cf.done", progress=False)    # what the diagnose job's measure calls
    assert events == [] and (tmp_path / "cf.done").exists()


def test_a_thinking_off_cell_s_group_serves_no_counterfactual(group, monkeypatch, tmp_path):
    from specsweep.diagnose import counterfactuals

    g, lead, (base, k3, k7) = group
    events = []
    fake_backend(monkeypatch, events, session=LowAcceptanceSession)
    runner.run_group(g, lead, tmp_path / "marker.done", progress=False, also=counterfactuals.on_own_server)
    assert all(e[2] is False for e in events if e[0] == "bench")
    assert len([e for e in events if e[0] == "bench"]) == 6 and not any(g.servers[s].counterfactual for s in g.servers)


def process_backend(monkeypatch, tmp_path, events, startup_s):
    """Sessions whose servers are real processes (helpers.MODELS_SERVER, ready after `startup_s`, through
    specsweep.run.server.Server), so that starting them side by side runs the real launch, readiness and stop."""
    import sys

    from specsweep.run.server import Server, ServerSession, group_alive

    script = tmp_path / "models_server.py"
    script.write_text(MODELS_SERVER)
    run = {"host": "127.0.0.1", "port": None, "port_range": [18400, 18499], "ready_timeout_s": 120, "stop_grace_s": 5}
    groups = []

    class ProcessSession(FakeSession, ServerSession):
        def __init__(self, srv, sid):
            ServerSession.__init__(self, srv, run)
            FakeSession.__init__(self, sid, events)

        def alive(self):
            return self.srv.alive()

    @contextmanager
    def open_session(grid, sid, progress=True, how=None):
        events.append(("starting", sid, time.monotonic()))
        srv = Server(lambda p: [sys.executable, str(script), str(p), str(startup_s)], run, tmp_path / "logs" / sid,
                     served_name="m", kind="test")
        with srv:
            groups.append(srv.info["pgid"])
            events.append(("start", sid, time.monotonic()))
            yield ProcessSession(srv, sid)
        events.append(("stop", sid))
    monkeypatch.setattr(runner.parts, "session", lambda name: types.SimpleNamespace(open_session=open_session))
    monkeypatch.setattr(runner.residency.psutil, "virtual_memory", lambda: types.SimpleNamespace(available=20 * GIB))
    return lambda: [g for g in groups if group_alive(g)]


def test_start_at_once_starts_members_side_by_side_and_records_it(monkeypatch, tmp_path):
    g, lead, (base, k3, k7) = make_group(tmp_path, start_at_once=2)
    events = []
    alive = process_backend(monkeypatch, tmp_path, events, startup_s=2.0)
    runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    at = {(e[0], e[1]): e[2] for e in events if e[0] in ("starting", "start")}
    # two at a time: K=3 starts before the baseline is up, K=7 only once one of them is
    assert at["starting", k3] < at["start", base] and at["starting", k7] >= min(at["start", base], at["start", k3])
    assert [e[1:] for e in events if e[0] == "measure"] == [(base, 0), (k3, 0), (k7, 0), (k3, 1), (k7, 1), (base, 1)]
    assert {e[1] for e in events if e[0] == "stop"} == {base, k3, k7} and alive() == []
    assert all(read_json(g.metrics_path(s, b))["start_at_once"] == 2 for s in (base, k3, k7) for b in g.benches[s])


def test_a_sigterm_while_members_start_side_by_side_stops_every_one(monkeypatch, tmp_path):
    """Signals reach only the job's main thread: the members still starting in other threads give up at once and
    stop their own servers, rather than wait for a readiness that never comes (server.SideBySide)."""
    g, lead, (base, k3, k7) = make_group(tmp_path, start_at_once=3)
    events = []
    alive = process_backend(monkeypatch, tmp_path, events, startup_s=-1)     # never ready

    t0 = time.monotonic()
    with pytest.raises(Stop), signal_after(1.0):
        runner.run_group(g, lead, tmp_path / "marker.done", progress=False)
    assert time.monotonic() - t0 < 30                   # not the 120 s readiness timeout
    assert {e[1] for e in events if e[0] == "starting"} == {base, k3, k7} and not [e for e in events if e[0] == "start"]
    assert alive() == [] and not [t for t in threading.enumerate() if t.name.startswith("start")]


def test_a_gpu_group_of_vllm_members_starts_at_once_each_with_its_kv_fixed(monkeypatch, tmp_path, lock_dir):
    """On an injected H200 (SPECSWEEP_GPUS) and a 16-core host, the 8B-shaped group's three vLLM members start at
    once, each launched with its fixed KV size, and every bench cell records both; a group whose members' KV cache
    vLLM would profile (sleep: too little GPU) starts them one after another."""
    import json

    from test_residency import shaped

    target, drafter = shaped(tmp_path, "target"), shaped(tmp_path, "drafter", layers=1)
    monkeypatch.setattr(runner.residency.os, "sched_getaffinity", lambda _: set(range(16)))
    for memory_mib, started_together in ((143771, 3), (40 * 1024, 1)):
        monkeypatch.setenv("SPECSWEEP_GPUS", json.dumps([{"index": 0, "memory_total_mib": memory_mib}]))
        results = tmp_path / f"r{memory_mib}"
        g = expand(compose_jobs([f"results_dir={results}", "server=vllm_gpu", f"pair.target={target}",
                                 f"pair.drafter={drafter}", "pair.built_by_workflow=false", "sweep.concurrency=[8]",
                                 "server.max_model_len=4096", "+server.extra_args=[--load-format,dummy]",
                                 "dataset.num_prompts=3", "tracking=off"]))
        bench = next(iter(next(iter(g.benches.values())).values())).spec
        materialise(bench["dataset"], g.dataset_file(bench["dataset"]))
        lead = schedule.leads(g)[0]
        starting, up, given = [], [], {}

        class Asleep(FakeSession):
            def sleep(self):
                pass

            def wake(self):
                pass

        @contextmanager
        def open_session(grid, sid, progress=True, how=None):
            starting.append(sid)
            given[sid] = how.kv_cache_mib
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                time.sleep(0.05)
            up.append((sid, len(starting) - len(up)))        # how many were starting when this one came up
            yield Asleep(sid, [])
        monkeypatch.setattr(runner.parts, "session", lambda name: types.SimpleNamespace(open_session=open_session))
        monkeypatch.setattr(runner.residency.psutil, "virtual_memory",
                            lambda: types.SimpleNamespace(available=128 * GIB))
        runner.run_group(g, lead, results / "marker.done", progress=False)
        assert max(n for _, n in up) == started_together
        for sid in schedule.group(g, lead):
            m = read_json(g.metrics_path(sid, next(iter(g.benches[sid]))))
            assert m["start_at_once"] == started_together
            assert m.get("kv_cache_mib_given") == given[sid] and (given[sid] is None) == (started_together == 1)


@pytest.mark.parametrize("turns", ["every", "first"])
def test_warmup_turns_first_warms_a_coresident_member_up_on_its_first_turn_only(tmp_path, monkeypatch, turns):
    """sweep.warmup_turns: `first` sends the warm-up requests on a member's first turn after its start only (it stays
    up between turns); `every` (the default) on each; each cell records what it sent."""
    g = expand(compose_jobs([f"results_dir={tmp_path}", "sweep.repeats=3", "dataset.num_prompts=3",
                             f"sweep.warmup_turns={turns}"]))
    bench = next(iter(next(iter(g.benches.values())).values())).spec
    materialise(bench["dataset"], g.dataset_file(bench["dataset"]))
    events, warmups = [], []

    class Recording(FakeSession):
        def measure(self, prompts, bench, progress, desc):
            warmups.append((self.sid, bench["repeat"], bench["warmup"]))
            return super().measure(prompts, bench, progress, desc)
    fake_backend(monkeypatch, events, session=Recording)
    lead = schedule.leads(g)[0]
    runner.run_group(g, lead, tmp_path / "m.done", progress=False)
    assert len(warmups) == 9
    for sid, rep, sent in warmups:
        first = rep == min(r for s, r, _ in warmups if s == sid)
        assert sent == (2 if turns == "every" or first else 0), (sid, rep, sent)
        bid = next(b for b, c in g.benches[sid].items() if c.spec["repeat"] == rep)
        assert read_json(g.metrics_path(sid, bid))["warmup_requests"] == sent
