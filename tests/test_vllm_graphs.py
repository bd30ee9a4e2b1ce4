"""vLLM 0.26's CUDA graph sizes and dispatch (backends/vllm/graphs.py), against what its logs said on the H100
(bench/archive/h100/vllm/qwen3.6-35b-a3b-moe-hybrid: the baseline's "cudagraph_capture_sizes': [1, 2, 4]" and
"FULL=2 (largest=2)" at --max-num-seqs 3; the K=15 member's three FULL decode graphs) and its source's rules."""
from specsweep.backends.vllm import graphs


def full_requests(seqs, q, tokens=8192):
    return [c for c in range(1, 4 * seqs) if graphs.full_decode(c, seqs, q, tokens)]


def test_the_h100_moe_servers_graphs():
    assert graphs.capture_sizes(3, 1, 8192) == [1, 2, 4]
    assert full_requests(3, 1) == [1, 2]                       # FULL=2 (largest=2): 3 requests pad to 4 > 3
    assert full_requests(3, 16) == [1, 2, 3]                   # three FULL decode graphs: 16, 32, 48 tokens


def test_the_default_sizes_and_the_spec_decode_rounding():
    assert graphs.capture_sizes(64, 1)[:6] == [1, 2, 4, 8, 16, 24] and graphs.capture_sizes(64, 1)[-1] == 128
    assert graphs.capture_sizes(1024, 1)[-1] == 512 and 264 not in graphs.capture_sizes(1024, 1)
    assert graphs.capture_sizes(1024, 1, 200)[-1] == 200        # max_num_batched_tokens caps and is captured
    assert graphs.capture_sizes(8, 3) == [3, 6, 9, 18, 24, 33, 42, 48]   # each rounded up to a multiple of 1 + K
    assert all(graphs.full_decode(c, 64, q) for c in (1, 8, 32) for q in (1, 8, 16))   # the 8B group's servers


def test_least_seqs_is_the_next_capture_size():
    assert [graphs.least_seqs(c) for c in (1, 2, 3, 5, 8, 9, 17)] == [1, 2, 4, 8, 8, 16, 24]
    assert all(graphs.full_decode(c, graphs.least_seqs(c), 1) for c in range(1, 300))


def test_outside_names_the_fix_and_a_larger_graph_does_not_make_one():
    why = graphs.outside(["--max-num-seqs", "3"], 3, 0, 1024, 8192)
    assert why.endswith("set --max-num-seqs 4 (a capture size), or a concurrency of at most 2")
    assert graphs.outside(["--max-num-seqs", "4"], 3, 0, 1024, 8192) is None
    assert graphs.outside([], 3, 0, 1024, 8192) is None         # vLLM's own 1024
    # FULL decode graphs stop at max_num_seqs requests whatever the largest graph
    assert graphs.outside(["--max-num-seqs", "3"], 3, 0, 1024, 8192, largest=512) is not None
    assert graphs.capture_sizes(3, 1, 8192, largest=512)[-1] == 512


def test_a_baseline_whose_graphs_miss_a_chat_prompt_is_warned_with_the_fix():
    """The MoE preset's --max-num-seqs 8: the baseline's graphs would stop at 16 tokens, below a chat prompt; its
    K=15 member's at 256. kernel.cuda_graph_max_tokens=512 (the preset's) makes them reach."""
    why = graphs.prefill_outside(["--max-num-seqs", "8"], 1024, 8192)
    assert why.startswith("its CUDA graphs stop at 16 tokens (2 x --max-num-seqs 8)")
    assert why.endswith("set kernel.cuda_graph_max_tokens=512")
    assert graphs.prefill_outside(["--max-num-seqs", "8"], 1024, 8192, largest=512) is None
    assert graphs.prefill_outside(["--max-num-seqs", "64"], 1024, 8192) is None      # 128: the 8B and 27B presets'


def test_the_largest_graph_is_read_from_the_engines_log():
    from helpers import DATA

    from specsweep.backends.vllm.session import graph_max_tokens

    assert graph_max_tokens((DATA / "vllm026_h200_qwen35_27b_baseline_log.txt").read_text()) == 128   # 64 seqs
    assert graph_max_tokens((DATA / "vllm026_h200_qwen35_27b_dflash_swa_k15_log.txt").read_text()) == 512
    assert graph_max_tokens((DATA / "vllm_cpu_dflash_startup_log.txt").read_text()) == 0      # --enforce-eager
    assert graph_max_tokens("no such line") is None
    assert graphs.capture_sizes(64, 1)[-1] == 128 and graphs.capture_sizes(64, 16)[-1] == 512   # the model agrees


def test_a_baseline_whose_prefills_ran_outside_its_graphs_invalidates_the_comparison():
    """The H100 MoE run: the baseline's graphs stopped at 4 tokens (--max-num-seqs 3), its K=15 member's at 96, the
    prompts were 24-28 tokens: the K=15 cells say so and are invalid; where both or neither run them in graphs, or
    a log said nothing, nothing is said."""
    from specsweep.run.bench_cell import graph_asymmetry, invalidate

    rows = [{"ok": True, "prompt_tokens": n} for n in (24, 28)]
    why = graph_asymmetry({"cuda_graph_max_tokens": 96}, {"cuda_graph_max_tokens": 4}, rows, rows)
    assert why.startswith("its baseline's prefills (28 tokens at most) ran outside CUDA graphs, whose largest is 4 ")
    assert why.endswith("give both servers --max-num-seqs 14 or more, or shorter prompts")
    for cell, base in ((128, 128), (0, 0), (96, None), (None, 4), (16, 4)):
        assert graph_asymmetry({"cuda_graph_max_tokens": cell}, {"cuda_graph_max_tokens": base}, rows, rows) is None
    figures = {"valid": True, "invalid_reason": None}
    invalidate(figures, why)
    invalidate(figures, None)
    assert figures == {"valid": False, "invalid_reason": why}
