"""Today's cell ids, pinned as exact strings: a config refactor that renames a cell would recompute (and orphan)
every result already under it. Add a study here when it has results worth keeping; never edit an id.

A deliberate new study design (a new default) gets new pins; the old design stays pinned through explicit
overrides equal to its old values, so its results stay addressable."""
import pytest

from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs

T0C4 = ["synthetic-t0-c4-r0-920133dd"]
# The default since the verdicts: 10 repeats (r0 is the old default's cell, unchanged).
T0C4_R10 = [*T0C4, "synthetic-t0-c4-r1-695441c5", "synthetic-t0-c4-r2-7ae17cf4", "synthetic-t0-c4-r3-4f386d4e",
            "synthetic-t0-c4-r4-e2c57a29", "synthetic-t0-c4-r5-6fd39322", "synthetic-t0-c4-r6-69e529a4",
            "synthetic-t0-c4-r7-cd2c8fd3", "synthetic-t0-c4-r8-7c90a983", "synthetic-t0-c4-r9-90f0fe69"]
# The default since issue 54 (conf/sweep/answers.yaml): auto's budget of 20 repeats, in waves, the warm-up once.
T0C4_ANSWERS = ["synthetic-t0-c4-r0-031d616f", "synthetic-t0-c4-r1-321b46b3", "synthetic-t0-c4-r2-303c476f",
                "synthetic-t0-c4-r3-08c4dc4d", "synthetic-t0-c4-r4-2fcc4eae", "synthetic-t0-c4-r5-a4e7cfe1",
                "synthetic-t0-c4-r6-d880cf1b", "synthetic-t0-c4-r7-67ab603e", "synthetic-t0-c4-r8-923df0d2",
                "synthetic-t0-c4-r9-611a8ccc", "synthetic-t0-c4-r10-ce165ee5", "synthetic-t0-c4-r11-30e8f2b5",
                "synthetic-t0-c4-r12-3a6dfe7a", "synthetic-t0-c4-r13-fea6de62", "synthetic-t0-c4-r14-155fcf34",
                "synthetic-t0-c4-r15-47328947", "synthetic-t0-c4-r16-74d783a4", "synthetic-t0-c4-r17-510f1baf",
                "synthetic-t0-c4-r18-843dbdd1", "synthetic-t0-c4-r19-43aea6f3"]
FIXED = ["sweep=default"]          # the design before it: 10 repeats, a closed loop, the warm-up every turn
ONE_REPEAT = [*FIXED, "sweep.repeats=1"]    # the default sweep before the verdicts
# vllm-cpu before its KV cache was sized in MiB (server.kv_cache_mib: 64): VLLM_CPU_KVCACHE_SPACE's 1 GiB
GIB_KV = ["server.kv_cache_mib=null", "+server.env.VLLM_CPU_KVCACHE_SPACE='1'"]
UNI = ["server.kv_cache_mib=null", "+server.env.VLLM_CPU_KVCACHE_SPACE=1"]   # ... the same: env values are strings
MP = ["server.distributed_executor_backend=null", *GIB_KV]    # ... and before that, in vLLM's own worker
UNPINNED = ["server.pin_engine_core=false", *MP]     # ... and before its engine core was pinned
BLOCK_BENCHES = ["synthetic-t0-c1-r0-36141925", "synthetic-t1-c1-r0-05914b04"]

PINNED = {
    # The default since issue 54: the same servers, the questions answered in waves
    "default": ([], {
        "default/base-target-098e0b7787": sorted(T0C4_ANSWERS),
        "default/tiny-dflash-k3-9e942b8b1b": sorted(T0C4_ANSWERS),
        "default/tiny-dflash-k7-ad4119284e": sorted(T0C4_ANSWERS),
    }),
    # ... and before it, since vllm-cpu's KV cache is 64 MiB (server.kv_cache_mib)
    "default-fixed": (FIXED, {
        "default/base-target-098e0b7787": T0C4_R10,
        "default/tiny-dflash-k3-9e942b8b1b": T0C4_R10,
        "default/tiny-dflash-k7-ad4119284e": T0C4_R10,
    }),
    "smoke": (["study=smoke", "sweep=smoke"], {
        "smoke/base-target-098e0b7787": ["synthetic-t0-c2-r0-063501a6"],
        "smoke/tiny-dflash-k3-9e942b8b1b": ["synthetic-t0-c2-r0-063501a6"],
    }),
    # ... and before it: vllm-cpu running its model in the engine core (server.distributed_executor_backend: uni)
    "default-uni": ([*FIXED, *UNI], {
        "default/base-target-1b632c0d1d": T0C4_R10,
        "default/tiny-dflash-k3-1a52155894": T0C4_R10,
        "default/tiny-dflash-k7-2cdda33be5": T0C4_R10,
    }),
    "smoke-uni": (["study=smoke", "sweep=smoke", *UNI], {
        "smoke/base-target-1b632c0d1d": ["synthetic-t0-c2-r0-063501a6"],
        "smoke/tiny-dflash-k3-1a52155894": ["synthetic-t0-c2-r0-063501a6"],
    }),
    # ... and before it: the engine core pinned beside its worker (server.pin_engine_core: auto)
    "default-mp": ([*FIXED, *MP], {
        "default/base-target-e9e4e4a490": T0C4_R10,
        "default/tiny-dflash-k3-519c3ae069": T0C4_R10,
        "default/tiny-dflash-k7-1ad3d3b816": T0C4_R10,
    }),
    "smoke-mp": (["study=smoke", "sweep=smoke", *MP], {
        "smoke/base-target-e9e4e4a490": ["synthetic-t0-c2-r0-063501a6"],
        "smoke/tiny-dflash-k3-519c3ae069": ["synthetic-t0-c2-r0-063501a6"],
    }),
    # ... and before that: the engine core where vLLM put it
    "default-unpinned": ([*FIXED, *UNPINNED], {
        "default/base-target-09e275b51d": T0C4_R10,
        "default/tiny-dflash-k3-e5c0bfe23a": T0C4_R10,
        "default/tiny-dflash-k7-1f6724895f": T0C4_R10,
    }),
    "default-unpinned-one-repeat": ([*UNPINNED, *ONE_REPEAT], {
        "default/base-target-09e275b51d": T0C4,
        "default/tiny-dflash-k3-e5c0bfe23a": T0C4,
        "default/tiny-dflash-k7-1f6724895f": T0C4,
    }),
    "smoke-unpinned": (["study=smoke", "sweep=smoke", *UNPINNED], {
        "smoke/base-target-09e275b51d": ["synthetic-t0-c2-r0-063501a6"],
        "smoke/tiny-dflash-k3-e5c0bfe23a": ["synthetic-t0-c2-r0-063501a6"],
    }),
    "blocks": (["study=blocks", "server=local", "kernel=local_sdpa", "sweep=blocks"], {
        "blocks/base-local-b1-7911cc6ae4": BLOCK_BENCHES,
        "blocks/tiny-local-b2-741d69b862": BLOCK_BENCHES,
        "blocks/tiny-local-b4-58b78e94b4": BLOCK_BENCHES,
        "blocks/tiny-local-b8-1ec83f01a8": BLOCK_BENCHES,
        "blocks/tiny-local-b16-c9e7f19441": BLOCK_BENCHES,
    }),
    "experiment=smoke": (["experiment=smoke"], None),          # None: the same cells as the study named
    "experiment=blocks": (["experiment=blocks"], None),
    "blocks-cuda": (["study=blocks", "server=local_cuda", "kernel=local_graphs", "sweep=blocks"], {
        "blocks/base-local-b1-fdfa6b050b": BLOCK_BENCHES,
        "blocks/tiny-local-b2-bb7561b862": BLOCK_BENCHES,
        "blocks/tiny-local-b4-4a01f696a0": BLOCK_BENCHES,
        "blocks/tiny-local-b8-0c675a1746": BLOCK_BENCHES,
        "blocks/tiny-local-b16-c9a54f9bdb": BLOCK_BENCHES,
    }),
    "vllm_gpu": (["server=vllm_gpu", "pair=qwen3-8b-dflash-b16", *ONE_REPEAT], {
        "default/base-qwen3-8b-a8a6a78558": T0C4,
        "default/qwen3-8b-dflash-b16-dflash-k3-b45b8b8f16": T0C4,
        "default/qwen3-8b-dflash-b16-dflash-k7-2f89330469": T0C4,
    }),
    "vllm_gpu-flash_attn_graphs": (["server=vllm_gpu", "pair=qwen3-8b-dflash-b16", "kernel=flash_attn_graphs",
                                    *ONE_REPEAT], {
        "default/base-qwen3-8b-734d683266": T0C4,
        "default/qwen3-8b-dflash-b16-dflash-k3-b48de91269": T0C4,
        "default/qwen3-8b-dflash-b16-dflash-k7-15ebceba49": T0C4,
    }),
    "vllm_gpu-default": (["server=vllm_gpu", "pair=qwen3-8b-dflash-b16", *FIXED], {
        "default/base-qwen3-8b-a8a6a78558": T0C4_R10,
        "default/qwen3-8b-dflash-b16-dflash-k3-b45b8b8f16": T0C4_R10,
        "default/qwen3-8b-dflash-b16-dflash-k7-2f89330469": T0C4_R10,
    }),
}


def cells(overrides):
    """Each server cell's directory under results_dir, with its bench ids."""
    grid = expand(compose_jobs([*overrides, "results_dir=results"]))   # the tiny pair's paths include it
    return {f"{grid.servers[s].study}/{s}": sorted(grid.benches[s]) for s in grid.servers}


@pytest.mark.parametrize("study", PINNED)
def test_cell_ids_never_change(study):
    overrides, expected = PINNED[study]
    assert cells(overrides) == (expected or PINNED[study.split("=")[1]][1])
