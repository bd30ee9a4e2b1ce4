#!/usr/bin/env bash
# FROZEN: the step list as it ran (docs/campaigns/2026-12-01-h200-sglang.md), last from 1e23ceb as bench/h200_sglang.sh; run it from that
# commit. Maintained: scripts/gpu_host.sh (each step by name, as a preset run) and conf/experiment/gpu_*.yaml.
# The SGLang studies of bench/archive/h200/sglang/, on an offline one-GPU host, one step per call of a lease (each
# under 10 minutes; the host keeps /root and /tmp only while calls follow each other):
#   recv DIR   copy one carried folder of the SGLang bundle's parts to /root/sglwhl (shared/gpu-sglang's c1..c3
#              re-split into 48 MiB parts, .sgl/p1..p4, so that each part and the checkout fit one transfer)
#   install    reassemble and install SGLang 0.5.17 into /tmp/sgl (shared/gpu-sglang), the DAG's wheels
#              (.dag/wheels) into /tmp/dag; the tiny pair (carried results/models/tiny, its drafter config given
#              SGLang's mask_token) and the config-only 8B-shaped pair into /root/res
#   capture    tests/fake_sglang/capture.py: what a real SGLang answers, as test data (tests/data/sglang0517_*)
#   tiny       experiment=gpu_tiny on server=sglang_gpu_bundle: the tiny pair in bfloat16 (sgl_kernel's rmsnorm
#              takes no float32), the baseline and block 8 (K=7)
#   tiny-local the same on the in-process engine (server=local_cuda) in bfloat16, the same GPU's second side
#   8b         experiment=gpu_8b_shaped on SGLang: the baseline and block 16 (K=15) with random weights
# Each run step packs the study as $OUT/<study>.tar.gz and its log.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/root/res
export PYTHONPATH=/tmp/dag:$PWD/src HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
W=/root/sglwhl

study() {   # study NAME OVERRIDES...: the DAG as a user runs it, then its files packed for the trip back
  local name=$1 t0=$SECONDS; shift
  timeout 530 python3 -m specsweep.cli sweep --cores 16 "$@" --snakemake-args --resources gpu=1 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  tar czf "$OUT/$name.tar.gz" -C $RES "$name" datasets
  echo "study $name: rc=$rc in $((SECONDS - t0)) s"
  return "$rc"
}

case ${1:?step} in
  recv) mkdir -p $W && cp "${2:?folder}"/* $W/ && ls -la $W ;;
  install)
    if [ ! -f /tmp/sgl/.ok ]; then
      (cd $W && cat bundle.tar.part* > bundle.tar && sha256sum -c bundle.sha256) ||
        { echo "h200_sglang: the bundle's parts are missing or corrupt: carry every part again" >&2; exit 4; }
      mkdir -p /root/sglbundle && tar xf $W/bundle.tar -C /root/sglbundle && rm -f $W/bundle.tar
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/sgl \
        /root/sglbundle/wheels/*.whl 2>&1 | grep -v "Running pip as the 'root'"
      touch /tmp/sgl/.ok
    fi
    if [ ! -f /tmp/dag/.ok ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/dag .dag/wheels/*.whl \
        2>&1 | grep -v "Running pip as the 'root'"
      touch /tmp/dag/.ok
    fi
    ldconfig -p | grep -q libnvrtc.so.13 && echo "libnvrtc.so.13: found by the loader" || echo "libnvrtc.so.13: NOT found"
    TINY=results/models/tiny; [ -d $TINY ] || TINY=/root/carry/tiny      # carried in an earlier call
    mkdir -p $RES/models && cp -r $TINY $RES/models/
    python3 - <<'PY'
import json, pathlib
p = pathlib.Path("/root/res/models/tiny/drafter/config.json")
cfg = json.loads(p.read_text())
cfg["dflash_config"]["mask_token"] = "<|mask|>"       # the tiny tokenizer's mask token, id 5 (SGLang's default: <|MASK|>)
p.write_text(json.dumps(cfg, indent=2))
PY
    python3 -m specsweep.cli shape qwen3-8b $RES/models/qwen3-8b-shaped
    PYTHONPATH=/tmp/sgl python3 -c "import importlib.metadata as m; print('sglang', m.version('sglang'), 'in /tmp/sgl')"
    ;;
  tiny) study tiny-gpu-sglang experiment=gpu_tiny server=sglang_gpu_bundle kernel=sglang_triton \
          study=tiny-gpu-sglang results_dir=$RES server.dtype=bfloat16 "sweep.num_speculative_tokens=[7]" ;;
  tiny-local) study tiny-gpu-local-bf16 experiment=gpu_tiny server=local_cuda kernel=local_sdpa \
          study=tiny-gpu-local-bf16 results_dir=$RES server.dtype=bfloat16 "sweep.num_speculative_tokens=[7]" ;;
  capture) PYTHONPATH=/tmp/sgl timeout 360 python3 tests/fake_sglang/capture.py $RES/models/tiny "$OUT" ;;
  8b) study qwen3-8b-shaped-sglang experiment=gpu_8b_shaped server=sglang_gpu_bundle kernel=sglang_triton \
        study=qwen3-8b-shaped-sglang results_dir=$RES "sweep.num_speculative_tokens=[15]" \
        server.cuda_graph_max_bs=32 "server.extra_args=[--load-format,dummy]" ;;
  *) echo "h200_sglang.sh: unknown step '$1': recv DIR | install | tiny | 8b" >&2; exit 2 ;;
esac
