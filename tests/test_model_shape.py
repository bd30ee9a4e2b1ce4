"""model_shape: the one owner of a model's shape. The text model found inside multimodal wrappers, and what vLLM 0.26
allocates for a Gated DeltaNet hybrid, against its own logged figures of the 27B-shaped launch on the H200
(../shared/notes/hybrid-models.md; issue 44): attention block 784 tokens for the baseline, 864 with DFlash K=15,
50.2 GiB of weights for the baseline, 53.5 GiB with the drafter."""
import json

import pytest

from specsweep.backends.vllm import memory
from specsweep.models import model_shape, shaped

GIB = 1024 ** 3
QWEN3_8B_TEXT = {"num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "tie_word_embeddings": False}


def test_read_config_takes_a_folder_or_a_file_and_none_where_there_is_none(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"a": 1}))
    assert model_shape.read_config(tmp_path) == model_shape.read_config(tmp_path / "config.json") == {"a": 1}
    assert model_shape.read_config(tmp_path / "nowhere") is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    assert model_shape.read_config(tmp_path / "bad") is None


@pytest.mark.parametrize("wrap, multimodal", [
    (lambda t: t, False),
    (lambda t: {"architectures": ["X"], "text_config": t, "vision_config": {"depth": 2, "hidden_size": 8}}, True),
    (lambda t: {"llm_config": t}, False),
    (lambda t: {"language_config": t}, False),
    (lambda t: {"thinker_config": {"text_config": t, "audio_config": {"d_model": 8, "encoder_layers": 1}}}, True),
])
def test_the_text_model_is_found_however_it_is_wrapped(wrap, multimodal):
    cfg = wrap(dict(QWEN3_8B_TEXT))
    assert model_shape.text_config(cfg) == QWEN3_8B_TEXT
    s = model_shape.shape(cfg)
    assert (s.layers, s.hidden, s.heads, s.kv_heads, s.head_dim, s.vocab) == (36, 4096, 32, 8, 128, 151936)
    assert s.multimodal == multimodal and (s.tower_params > 0) == multimodal
    assert not s.hybrid and s.full_attention_layers == 36 and s.linear_attention_layers == 0


def test_no_config_or_no_layers_is_no_shape(tmp_path):
    assert model_shape.shape(tmp_path) is None and model_shape.shape(None) is None
    assert model_shape.shape({"text_config": {"vocab_size": 3}}) is None
    kv_only = model_shape.shape({"num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 32})
    assert kv_only.kv_bytes_per_token(2) == 4 * 2 * 2 * 32 * 2 and kv_only.hidden == 0


def test_a_dense_models_kv_tokens_match_vllms_log():
    """Qwen3-8B-shaped on the H200 (bench/archive/h200/vllm/coresidency): 'Available KV cache memory: 18.17 GiB',
    'GPU KV cache size: 132,320 tokens' (144 KiB a token; the GiB figure is rounded to 0.01)."""
    s = model_shape.shape(QWEN3_8B_TEXT)
    assert s.kv_bytes_per_token(2) == 36 * 2 * 8 * 128 * 2 and memory.block_size(s) == 16
    assert abs(memory.kv_tokens(s, int(18.17 * GIB), 4096) - 132_320) < 132_320 * 0.001
    assert abs(s.weights_bytes(2) / GIB - 15.27) < 15.27 * 0.01        # 'Model loading took 15.27 GiB'
    d = model_shape.shape(shaped.SHAPES["qwen3-8b"]().drafter)             # and 17.22 GiB with the drafter
    assert d.drafter and abs((s.weights_bytes(2) + d.weights_bytes(2)) / GIB - 17.22) < 17.22 * 0.01


def test_the_27b_hybrid_as_vllm_counts_it():
    t, d = model_shape.shape(shaped.qwen35_27b_target()), model_shape.shape(shaped.qwen35_27b_drafter(True))
    assert (t.layers, t.full_attention_layers, t.linear_attention_layers, t.hybrid, t.multimodal) == \
        (64, 16, 48, True, True)
    assert t.layer_types[:4] == ("linear_attention",) * 3 + ("full_attention",)
    assert (t.dtype, t.ssm_dtype, t.architectures) == ("bfloat16", "float32", ("Qwen3_5ForConditionalGeneration",))
    # KV only in the 16 full-attention layers: 2 x 4 KV heads x 256 x 2 bytes each
    assert t.kv_bytes_per_token(2) == 16 * 4096
    # a GDN layer's state: conv (4 - 1 + K) x (2 x 16 x 128 + 48 x 128) bf16, recurrent 48 x 128 x 128 float32
    assert t.mamba_page_bytes(0) == 3 * 10240 * 2 + 48 * 128 * 128 * 4 == 3_207_168
    assert t.mamba_page_bytes(15) == 18 * 10240 * 2 + 48 * 128 * 128 * 4
    # vLLM's attention block: 16 x cdiv(Mamba page, 16 x 4096), what it logged on the H200
    assert memory.block_size(t, 0) == 784 and memory.block_size(t, 15) == 864
    assert memory.block_size(t, 0, asked=1024) == 1024                 # a --block-size above it stays
    # the state a sequence holds: 48 Mamba pages, each padded to the attention page (block x 4096), and a block
    # more a speculative token
    assert memory.state_bytes_per_sequence(t, 0) == 48 * 784 * 4096
    assert memory.state_bytes_per_sequence(t, 15) == 48 * 864 * 4096 * 16
    # weights (random, bf16, --language-model-only) against 'Model loading took': 50.2 GiB, with the drafter 53.5
    assert abs(t.weights_bytes(2) / GIB - 50.2) < 50.2 * 0.1
    assert abs((t.weights_bytes(2) + d.weights_bytes(2)) / GIB - 53.5) < 53.5 * 0.1
    assert t.weights_bytes(2, language_only=False) > t.weights_bytes(2)       # the vision tower, when served
    # the drafter: 5 layers, no embeddings of its own, sliding layers hold KV too
    assert (d.layers, d.drafter, d.hybrid, d.kv_bytes_per_token(2)) == (5, True, False, 5 * 2 * 8 * 128 * 2)
    assert d.full_attention_layers == 1 and d.sliding_window == 2048
    # the baseline's pool: pages of 784 x 4096 bytes in 4 groups of 16 layers (16 full + 48 GDN), a request of
    # 4096 tokens holding 6 attention blocks and one block in each GDN group (prefix caching off, vLLM's default
    # on a hybrid); 'GPU KV cache size: 627,598 tokens' is 1,379 blocks: 65.99-66.04 GiB of KV budget, which is
    # 0.85 of the 139.8 GiB H200 less the 50.2 GiB of weights and 2.6 GiB of activations and graphs
    pool = memory.pool(t)
    assert (pool.block_size, pool.group_size, pool.attention_windows, pool.mamba_groups) == (784, 16, (None,), 3)
    assert pool.blocks_per_request(4096) == 6 + 3
    assert memory.kv_tokens(t, 1379 * pool.block_bytes, 4096) == memory.kv_tokens(t, 1380 * pool.block_bytes - 1, 4096) == 627_598
    assert 0.85 * 139.8 - 50.2 - 4 < 1379 * pool.block_bytes / GIB < 1380 * pool.block_bytes / GIB < 0.85 * 139.8 - 50.2
    assert memory.pool(t, mamba_cache_mode="align").blocks_per_request(4096) == 6 + 3 * 2
    # with the drafter at K=15: its 5 layers join, groups of 5 (4 of the target's full layers, 1 of the drafter's,
    # 10 of GDN), and each GDN group holds 1 + 15 blocks a request
    k15 = memory.pool(t, model_shape.shape(shaped.qwen35_27b_drafter(False)), 15)
    assert (k15.block_size, k15.group_size, len(k15.attention_windows), k15.mamba_groups) == (864, 5, 5, 10)
    assert k15.blocks_per_request(4096) == 5 * 5 + 10 * 16


def test_the_sliding_window_drafters_server_as_vllm_logged_it():
    """Qwen3.6-27B-DFlash's layout (4 sliding + 1 full) at K=15 beside the 27B hybrid, served by vLLM 0.26 on the
    H200 (V2 model runner, --language-model-only, --gdn-prefill-backend triton, max_model_len 4096, 0.9):
    'Model loading took 53.52 GiB', 'attention block size to 864 tokens', 'Available KV cache memory: 71.8 GiB',
    'GPU KV cache size: 101,741 tokens'. Groups of one layer (the drafter's one full layer is the fewest of a
    kind): a request holds 5 blocks in each of 17 full layers, 6 in each sliding one, 16 in each of 48 GDN."""
    t, d = model_shape.shape(shaped.qwen35_27b_target()), model_shape.shape(shaped.qwen35_27b_drafter(True))
    pool = memory.pool(t, d, 15)
    assert (pool.block_size, pool.group_size, pool.mamba_groups) == (864, 1, 48)
    assert pool.blocks_per_request(4096) == 17 * 5 + 4 * 6 + 48 * 16 == 877
    assert abs(pool.tokens(int(71.8 * GIB), 4096) - 101_741) < 101_741 * 0.001      # 71.8 is rounded to 0.1
    assert abs((t.weights_bytes(2) + d.weights_bytes(2)) / GIB - 53.52) < 53.52 * 0.01


@pytest.mark.parametrize("log, drafter, k", [
    ("vllm026_h200_qwen35_27b_baseline_log.txt", None, 0),
    ("vllm026_h200_qwen35_27b_dflash_swa_k15_log.txt", True, 15),
])
def test_two_27b_launches_on_the_h200_as_their_own_logs_say(log, drafter, k):
    """Two real launches (vLLM 0.26, the H200, 2026-12-04, both with --kv-cache-memory-bytes 8 GiB and
    max_model_len 4096): the weights within 1%, the attention block size and the KV tokens as each log says them."""
    import re
    from pathlib import Path

    text = (Path(__file__).parent / "data" / log).read_text()
    logged = {"weights": float(re.search(r"Model loading took ([\d.]+) GiB", text).group(1)),
              "block": int(re.search(r"attention block size to (\d+) tokens", text).group(1)),
              "tokens": int(re.search(r"GPU KV cache size: ([\d,]+) tokens", text).group(1).replace(",", ""))}
    assert "kv_cache_memory_bytes': 8589934592" in text and "'max_model_len': 4096" in text
    target = model_shape.shape(shaped.qwen35_27b_target())
    draft = model_shape.shape(shaped.qwen35_27b_drafter(sliding=True)) if drafter else None
    weights = target.weights_bytes(2) + (draft.weights_bytes(2) if draft else 0)
    assert weights / 2 ** 30 == pytest.approx(logged["weights"], rel=0.01)
    pool = memory.pool(target, draft, k)
    assert pool.block_size == logged["block"]
    assert pool.tokens(8 * 2 ** 30, 4096) == logged["tokens"]


@pytest.mark.parametrize("member, drafter", [
    ("base-target-78ec3b14d7", None),
    ("qwen3.5-27b-dflash-dflash-k15-al6-be294b12be", False),
    ("qwen3.6-27b-dflash-dflash-k15-al6-e4d848403a", True),
])
def test_the_27b_groups_launches_through_the_dag_as_their_logs_say(member, drafter):
    """Issue 44's study on the H200 (bench/archive/h200/vllm/qwen3.6-27b-hybrid, vLLM 0.26, each member relaunched
    alone at 0.85, KV memory profiled, not fixed): the weights within 1%, the block size exactly, and the KV tokens
    of the KV memory vLLM logged (rounded to 0.01 GiB) within 0.1%."""
    import re
    from pathlib import Path

    logs = Path(__file__).parents[1] / "bench/archive/h200/vllm/qwen3.6-27b-hybrid" / member / "logs"
    text = next(logs.glob("server-*.log")).read_text()
    weights = float(re.search(r"Model loading took ([\d.]+) GiB", text).group(1))
    block = int(re.search(r"attention block size to (\d+) tokens", text).group(1))
    kv_gib = float(re.search(r"Available KV cache memory: ([\d.]+) GiB", text).group(1))
    tokens = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", text).group(1).replace(",", ""))
    target = model_shape.shape(shaped.qwen35_27b_target())
    draft = None if drafter is None else model_shape.shape(shaped.qwen35_27b_drafter(sliding=drafter))
    mine = target.weights_bytes(2) + (draft.weights_bytes(2) if draft else 0)
    assert mine / 2 ** 30 == pytest.approx(weights, rel=0.01)
    pool = memory.pool(target, draft, 15 if draft else 0)
    assert pool.block_size == block
    assert pool.tokens(int(kv_gib * 2 ** 30), 4096) == pytest.approx(tokens, rel=0.001)


def test_the_35b_moe_hybrid_as_vllm_counts_it():
    """Qwen3.6-35B-A3B (specsweep shape qwen3.6-35b-a3b; ../shared/notes/moe-hybrid.md): 40 layers, 30 Gated
    DeltaNet + 10 gated attention, each with an MoE of 256 experts of FFN 512 and a shared expert of 512, inside the
    multimodal wrapper. vLLM 0.26 on an H100 (issue 52): 'Model loading took 64.69 GiB' for the baseline."""
    t, d = model_shape.shape(shaped.qwen36_35b_a3b_target()), model_shape.shape(shaped.qwen36_35b_a3b_drafter())
    assert (t.layers, t.full_attention_layers, t.linear_attention_layers, t.hybrid, t.multimodal) == \
        (40, 10, 30, True, True)
    assert (t.experts, t.expert_intermediate, t.shared_intermediate, t.hidden) == (256, 512, 512, 2048)
    assert t.architectures == ("Qwen3_5MoeForConditionalGeneration",) and t.attn_output_gate
    assert t.weights_bytes(2) / GIB == pytest.approx(64.69, rel=0.01)
    # the experts are most of it: 40 layers x 3 x 2048 x 256 x 512 values
    assert 40 * 3 * 2048 * 256 * 512 / t.params() > 0.9
    # KV in the 10 full-attention layers only: 2 x 2 KV heads x 256 x 2 bytes; a GDN layer's state (conv 3 x
    # (2 x 16 x 128 + 32 x 128) bf16, recurrent 32 x 128 x 128 float32) sets vLLM's attention block to 1056 tokens
    assert t.kv_bytes_per_token(2) == 10 * 2048 and t.mamba_page_bytes(0) == 3 * 8192 * 2 + 32 * 128 * 128 * 4
    assert memory.block_size(t, 0) == 1056 and memory.block_size(t, 15) == 1168
    # the drafter: 6 layers (5 sliding of window 4096 + 1 full), 8 tapped layers, no embeddings of its own
    assert (d.layers, d.full_attention_layers, d.sliding_window, d.context_layers, d.drafter) == (6, 1, 4096, 8, True)
    assert d.weights_bytes(2) / GIB == pytest.approx(0.72, abs=0.01)
    # the baseline's pool: 4 groups of 10 (10 full + 30 GDN), pages of 1056 x 2048 bytes: 20.6 MiB a block; the
    # 44 blocks vLLM found on the H100 ('available Mamba cache blocks (44)') are its 0.9 GiB of KV
    pool = memory.pool(t)
    assert (pool.group_size, pool.mamba_groups, pool.block_bytes) == (10, 3, 10 * 1056 * 2048)
    assert int(0.9 * GIB // pool.block_bytes) == 44
