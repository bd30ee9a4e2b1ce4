"""Issue 52, item 4: SGLang on the Gated DeltaNet hybrid. Whether SGLang 0.5.17's DFLASH serves a hybrid target is
not documented (docs/backends.md#sglang-on-a-hybrid-target), so preflight warns in one line, keyed on the SGLang
version it probed, and the preset gpu_sglang_27b_hybrid is the study that answers it.

Its first run on an H100 (2026-12-06) found the target, a multimodal wrapper, needs the checkpoint's
preprocessor_config.json even to serve text: every SGLang member exited before it was ready with transformers' OSError,
and the job's line named none of it. Preflight now refuses such a folder (sglang_processor), and a failed start quotes
SGLang's own error with its fix (session.start_failure)."""
import sys
from pathlib import Path

from helpers import DATA

from specsweep.backends.sglang import checks as sglang_checks
from specsweep.backends.sglang import session
from specsweep.grid.config import compose_jobs
from specsweep.models import shaped
from specsweep.run import tracebacks

SGLANG = ["server=sglang", f"server.python={sys.executable}", "kernel=sglang_triton"]


def job(tmp_path, name, pair, *extra):
    out = shaped.write(name, tmp_path / name, with_tokenizer=False)
    [cfg] = compose_jobs([f"results_dir={tmp_path / 'r'}", *SGLANG, f"pair={pair}", f"pair.target={out}/target",
                          f"pair.drafter={out}/drafter", "pair.built_by_workflow=false", *extra])
    return cfg


def test_dflash_on_a_hybrid_target_warns_naming_the_probed_version_unless_it_has_served_one(tmp_path):
    cfg = job(tmp_path, "qwen3.6-27b", "qwen3.6-27b-dflash", "sweep.concurrency=[1]")
    got = sglang_checks.check_sglang_hybrid(cfg, {"server_env": {"sglang": "0.5.23"}})
    assert got.status == "warn" and "\n" not in got.message
    assert got.message.startswith("SGLang 0.5.23: DFLASH on a Gated DeltaNet hybrid target (48 linear-attention "
                                  "layers) has not run here")
    assert "(not probed)" in sglang_checks.check_sglang_hybrid(cfg, {}).message
    served = sglang_checks.check_sglang_hybrid(cfg, {"server_env": {"sglang": "0.5.17"}})     # 2026-12-07, an H100
    assert served.status == "pass" and served.message.startswith("SGLang 0.5.17 has served DFLASH on a Gated DeltaNet "
                                                                 "hybrid target (48 linear-attention layers)")


def test_a_sweep_above_one_request_at_the_default_state_cache_warns_with_the_split_that_ran_eight(tmp_path):
    """SGLang 0.5.17 ran one DFLASH request at a time on the 27B hybrid at its default memory split (2026-12-07)."""
    served = {"server_env": {"sglang": "0.5.17"}}
    one = job(tmp_path, "qwen3.6-27b", "qwen3.6-27b-dflash", "sweep.concurrency=[1]")
    assert sglang_checks.check_sglang_hybrid(one, served).status == "pass"
    eight = job(tmp_path / "8", "qwen3.6-27b", "qwen3.6-27b-dflash", "sweep.concurrency=[1,8]")
    got = sglang_checks.check_sglang_hybrid(eight, served)
    assert got.status == "warn" and "\n" not in got.message
    assert "ran one request at a time on an 80 GB H100" in got.message and "(concurrency 8 here)" in got.message
    assert got.message.endswith("as experiment=gpu_sglang_27b_hybrid_c8 does (8 at once at 0.92)")
    sized = job(tmp_path / "s", "qwen3.6-27b", "qwen3.6-27b-dflash", "sweep.concurrency=[1,8]",
                "server.extra_args=[--mamba-ssm-dtype,bfloat16,--max-mamba-cache-size,40]")
    assert sglang_checks.check_sglang_hybrid(sized, served).status == "pass"


def test_a_release_seen_serving_it_a_dense_target_or_a_baseline_pass(tmp_path, monkeypatch):
    hybrid = job(tmp_path, "qwen3.5-27b", "qwen3.5-27b-dflash", "sweep.concurrency=[1]")
    monkeypatch.setattr(sglang_checks, "HYBRID_DFLASH_VERIFIED", ("0.5.17",))
    assert sglang_checks.check_sglang_hybrid(hybrid, {"server_env": {"sglang": "0.5.17"}}).status == "pass"
    monkeypatch.setattr(sglang_checks, "HYBRID_DFLASH_VERIFIED", ())
    dense = job(tmp_path, "qwen3-8b", "qwen3-8b-dflash-b16")
    assert sglang_checks.check_sglang_hybrid(dense, {"server_env": {"sglang": "0.5.17"}}).status == "pass"
    base = job(tmp_path / "b", "qwen3.6-27b", "qwen3.6-27b-dflash", "pair.method=none")
    assert sglang_checks.check_sglang_hybrid(base, {"server_env": {"sglang": "0.5.17"}}).status == "pass"


def test_the_preset_runs_the_hybrid_pair_on_the_bundle_with_real_acceptance():
    [cfg] = compose_jobs(["experiment=gpu_sglang_27b_hybrid", "results_dir=/root/res"])
    assert cfg["server"]["backend"] == "sglang" and cfg["kernel"]["name"] == "sglang_triton"
    assert cfg["pair"]["target"] == "/root/res/models/qwen3.6-27b-dflash-shaped/target"
    assert cfg["sweep"]["set_acceptance"] == [None] and cfg["server"]["extra_args"] == ["--load-format", "dummy"]
    assert cfg["sweep"]["concurrency"] == [1]     # at SGLang's default split, DFLASH ran one request at a time


def test_the_c8_preset_gives_eight_running_requests_the_memory_they_took_on_an_h100():
    """What ran on 2026-12-07 (both members capped to 8 running requests): a bf16 state cache of 40 slots, at 0.92."""
    [cfg] = compose_jobs(["experiment=gpu_sglang_27b_hybrid_c8", "results_dir=/root/res"])
    assert cfg["sweep"]["concurrency"] == [8] and cfg["server"]["gpu_memory_utilization"] == 0.92
    assert cfg["server"]["extra_args"] == ["--load-format", "dummy", "--mamba-ssm-dtype", "bfloat16",
                                           "--max-mamba-cache-size", "40"]
    assert cfg["pair"]["name"] == "qwen3.6-27b-dflash" and cfg["study"] == "qwen3.6-27b-hybrid-sglang-c8"


# ---- the image processor SGLang builds at start-up ----------------------------------------------------------------
# The last lines of a real failed start: SGLang 0.5.17 on an H100 (2026-12-06) serving the qwen3.6-27b replica that
# `specsweep shape` wrote before it wrote processor files (server-20261206T225616-4979-a32949.log), from its first
# "Ignore import error" line on; the warnings and ServerArgs's line before it are left out.
NO_PROCESSOR = DATA / "sglang0517_no_preprocessor_config_log.txt"
REPLICA = "/root/res/models/qwen3.6-27b-dflash-shaped/target"


def test_a_failed_start_quotes_sglangs_own_error_shortened_with_its_fix(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(NO_PROCESSOR.read_text())
    assert session.root_cause(log.read_text()).startswith(f"OSError: Can't load image processor for '{REPLICA}'.")
    wrapper = (f"SGLang exited with code 1 before it was ready; log {log}, last lines:\n"
               + "\n".join(log.read_text().splitlines()[-3:]))
    first, *rest = session.start_failure(wrapper, log).splitlines()
    assert first.startswith(f"SGLang exited with code 1 before it was ready: OSError: Can't load image processor for "
                            f"'{REPLICA}'. … ")
    assert first.endswith("a directory containing a preprocessor_config.json file (fix: copy the checkpoint's "
                          "preprocessor_config.json and video_preprocessor_config.json beside its config.json, or "
                          f"rerun `specsweep shape` for a replica, which writes both) (log {log})")
    assert "https://huggingface.co/models" not in first           # the middle of transformers' message, cut
    assert rest[0] == "last lines:" and rest[-1].startswith("OSError: Can't load image processor")


def test_a_dead_schedulers_error_is_the_cause_not_the_launchers_wrapper():
    """A scheduler that dies at start-up logs its traceback (scheduler.py: "Scheduler hit an exception: ..."), then the
    launcher raises EOFError from its pipe and "Initialization failed. Please see the error messages above"
    (entrypoints/engine.py, _launch_subprocesses): the scheduler's own error is the cause. In SGLang's format, built
    from its source; the cause's text is made up."""
    log = "\n".join([
        "[2026-12-06 22:56:40 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/tmp/sgl/sglang/srt/managers/scheduler.py", line 3100, in run_scheduler_process',
        "ValueError: a made-up cause of a scheduler's death.",
        "", "[2026-12-06 22:56:41] Rank 0 scheduler is dead. Please check if there are relevant logs.",
        "[2026-12-06 22:56:41] Exit code: -9", "Traceback (most recent call last):",
        '  File "/tmp/sgl/sglang/srt/entrypoints/engine.py", line 1190, in _launch_subprocesses', "EOFError",
        "", "During handling of the above exception, another exception occurred:", "",
        "Traceback (most recent call last):", '  File "<frozen runpy>", line 198, in _run_module_as_main',
        "RuntimeError: Initialization failed. Please see the error messages above."])
    assert session.root_cause(log) == "ValueError: a made-up cause of a scheduler's death."
    assert session.root_cause("[2026-12-06 22:56:41] all fine\n") is None


def test_a_long_cause_is_cut_in_its_middle_at_word_boundaries():
    """run/tracebacks.py, shared with vLLM: a cause within the limit stays whole (vLLM's Mamba line, 197 characters)."""
    short = "ValueError: max_num_seqs (64) exceeds available Mamba cache blocks (44)."
    assert tracebacks.shorten(short) == short
    words = "RuntimeError: " + " ".join(f"word{i}" for i in range(100))
    cut = tracebacks.shorten(words)
    assert len(cut) <= tracebacks.LIMIT and cut.startswith("RuntimeError: word0 ") and cut.endswith(" word99")
    head, tail = cut.split(" … ")
    assert words.startswith(head + " ") and words.endswith(" " + tail)


def test_a_multimodal_target_without_its_preprocessor_config_is_refused_before_launch(tmp_path):
    cfg = job(tmp_path, "qwen3.6-27b", "qwen3.6-27b-dflash")
    target = Path(cfg["pair"]["target"])
    assert sglang_checks.check_sglang_processor in sglang_checks.CHECKS
    assert sglang_checks.check_sglang_processor(cfg, {}).status == "pass"       # `specsweep shape` wrote it
    (target / "preprocessor_config.json").unlink()
    got = sglang_checks.check_sglang_processor(cfg, {})
    assert got.status == "fail" and "\n" not in got.message
    assert got.message == (f"{target} has no preprocessor_config.json: SGLang 0.5.17 loads a multimodal checkpoint's "
                           "image processor even to serve text, and exits before it is ready without it; copy the "
                           "checkpoint's preprocessor_config.json and video_preprocessor_config.json beside its "
                           "config.json, or rerun `specsweep shape` for a replica, which writes both")
    # SGLang builds the processor from --tokenizer-path: a tokenizer folder of its own is the one that needs it
    tok = tmp_path / "tok"
    tok.mkdir()
    moe = job(tmp_path, "qwen3.6-35b-a3b", "qwen3.6-35b-a3b-dflash", f"pair.tokenizer={tok}")
    assert sglang_checks.check_sglang_processor(moe, {}).message.startswith(f"{tok} has no preprocessor_config.json")


def test_a_text_only_target_needs_no_processor_files(tmp_path):
    dense = job(tmp_path, "qwen3-8b", "qwen3-8b-dflash-b16")
    assert not list(Path(dense["pair"]["target"]).glob("*preprocessor_config.json"))
    assert sglang_checks.check_sglang_processor(dense, {}).status == "pass"


# The last lines of a real failed start: SGLang 0.5.17 on an H100 (2026-12-07) serving the qwen3.6-27b replica's
# DFLASH K=15 member with --max-mamba-cache-size 48 at --mem-fraction-static 0.85, from the target's "Load weight
# begin" on (transformers' tokenizer warnings left out); bench/archive/h100/sglang/qwen3.6-27b-hybrid-sglang-c8-mamba.
NO_KV = DATA / "sglang0517_hybrid_no_kv_log.txt"


def test_a_start_the_state_cache_left_no_kv_names_the_studys_key_and_the_fraction_that_failed(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(NO_KV.read_text())
    assert session.root_cause(log.read_text()).startswith("ValueError: Loaded weights leave no GPU memory for the KV")
    first = session.start_failure(f"SGLang exited with code -9 before it was ready; log {log}", log).splitlines()[0]
    assert first.startswith("SGLang exited with code -9 before it was ready: ValueError: Loaded weights leave no GPU")
    assert ("(fix: raise server.gpu_memory_utilization (SGLang's --mem-fraction-static) above 0.85, or shrink the "
            "state cache (--max-mamba-cache-size, --mamba-ssm-dtype bfloat16 in server.extra_args)") in first
    assert first.endswith(f"(log {log})")
