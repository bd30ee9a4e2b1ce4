"""The one reader of server.extra_args: a flag's value in every spelling vLLM takes, and what the cells, preflight,
the residency plan and the vLLM launch ask of it."""
from __future__ import annotations

from specsweep.core.extra_args import flag_value, random_weights
from specsweep.backends.vllm.memory import mamba_cache_mode


def test_a_flags_value_in_each_spelling():
    args = ["--max-num-seqs", "8", "--load_format=dummy", "--enforce-eager", "--gdn-prefill-backend", "triton"]
    assert flag_value(args, "--max-num-seqs") == "8"
    assert flag_value(args, "--load-format") == "dummy"          # underscores, =
    assert flag_value(args, "--enforce-eager") == ""             # bare: the next token is a flag
    assert flag_value(args, "--gdn-prefill-backend") == "triton"
    assert flag_value(args, "--language-model-only") is None
    assert flag_value(None, "--x") is None and flag_value(["--x"], "--x") == ""


def test_random_weights_and_the_mamba_cache_mode():
    assert random_weights(["--load-format", "dummy"]) and random_weights(["--load-format=dummy"])
    assert not random_weights(["--load-format", "safetensors"]) and not random_weights([])
    assert mamba_cache_mode([]) == "none"
    assert mamba_cache_mode(["--enable-prefix-caching"]) == "align"
    assert mamba_cache_mode(["--enable-prefix-caching", "--mamba-cache-mode=all"]) == "all"
    assert mamba_cache_mode(["--mamba_cache_mode", "align"]) == "align"
