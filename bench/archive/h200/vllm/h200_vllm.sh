#!/usr/bin/env bash
# FROZEN: the step list as it ran (docs/campaigns/2026-12-01-h200-vllm.md, 2026-12-02-h200-residency.md, 2026-12-04-h200-*.md), last from 1e23ceb as bench/h200_vllm.sh; run it from that
# commit. Maintained: scripts/gpu_host.sh (each step by name, as a preset run) and conf/experiment/gpu_*.yaml.
# The GPU studies of bench/archive/h200/vllm/, run through the DAG on an offline one-GPU host, one step per call of a
# lease (each under 10 minutes; the host keeps /root and /tmp only while calls follow each other):
#   recv DIR     copy one carried folder of bundle parts (.whl/c1, ...) to /root/whl
#   install      scripts/offline_install.sh: vLLM into /tmp/site, the DAG's wheels (.dag/wheels) into /tmp/dag;
#                the tiny pair (carried results/models/tiny) and the config-only 8B-shaped pair into /root/res
#   tiny         experiment=gpu_tiny: the tiny pair in float32, baseline and DFlash K=3, 7, on vLLM and then on
#                the in-process engine (server=local_cuda), the two GPU sides of the cross-hardware check
#   8b-set       experiment=gpu_8b_shaped: the baseline and K=15 at the published acceptance length (6.54)
#   8b-cost      the same study's real-acceptance cells (K=7, 15), beside the set-acceptance one
#   8b-curve N   the system's curve at K=15: the baseline, real (random: nothing accepted) acceptance and set
#                lengths; N=1 runs lengths 2 and 4, N=2 adds 8 and 12 (the DAG skips what N=1 ran)
#   tiny-block   experiment=gpu_tiny at temperature 0.8: K=7 with standard and with block verification
#   tiny-sched   experiment=gpu_tiny at concurrency 1 and 8: K=3, K=7 and vLLM's dynamic K (sweep.k_schedule) as
#                one cell, K=7 up to 4 sequences and K=3 from 5 to 64
#   tiny-diag    the low-acceptance diagnosis on vLLM: K=7 with a doctored tiny drafter whose mask token is the
#                end-of-turn token; its counterfactual cells run on the same vLLM (the layer shifts are out of
#                vLLM's range for the tiny pair's ids, so the mask token is the one tried)
#   8b-group     issue #28's first GPU run: experiment=gpu_8b_shaped, the baseline and K=7, 15 at concurrency 1 and
#                8, 3 repeats, as one group (sweep.residency coresident, the default): 3 launches, not 9
#   8b-sleep     issue #28's sleep mode on a GPU: the 8B-shaped baseline and K=15 at concurrency 8, 3 repeats, with
#                sweep.residency=sleep (both started, one awake at a time: /sleep?level=1, /wake_up)
#   tiny-relaunch  issue #28's relaunch rounds on a GPU: the tiny pair's baseline and K=7, 4 repeats in 2 rounds,
#                sweep.residency=relaunch (4 launches)
#   modes        8b-sleep, then tiny-relaunch
#   27b-group    issue #44's hybrid study: experiment=gpu_27b_hybrid, the Qwen3.6-27B shape in its multimodal wrapper,
#                the baseline and K=15 at a set acceptance length of 6.0 for both z-lab drafter layouts (four sliding
#                layers and one full; all full) as one group of three, concurrency 1 and 8, 2 repeats (PROMPTS=N
#                sets dataset.num_prompts);  27b-one  the same with the sliding-window layout alone (two members)
#   27b-greedy   the same study (after 27b-group: its cells are kept) plus K=15 with real acceptance, sliding-window
#                layout: one more launch (~6 min cold), the greedy-agreement check against the baseline's answers
#   coresidency  bench/coresidency.py on the 8B-shaped pair (baseline and K=15, concurrency 8, 32 prompts, 2 rounds),
#                each server launched as its study's group would launch it (residency.plan: its memory share of
#                the group's GPU; 2026-12-02's run wrapped the script for it, which it now does itself)
#   bg STEP ...  run a step in its own process session (it outlives the call while the next call follows within
#                ~30 s), its files under /root/bg/STEP;  collect SECS  wait up to SECS for every bg step, then
#                copy what they wrote to $OUT/STEP/ (what is still running goes on)
#   vllm-metrics grep the bundle's vLLM for per-request metrics flags
#   8b-starts    issue #45: bench/start_side_by_side.py --visit gpu on the 8b-group's members (baseline, K=7, 15,
#                concurrency 1 and 8): one after another, side by side (KV fixed), side by side warm; about 12 min, so
#                run it as `bg 8b-starts`, then `collect 560` (twice)
#   8b-studies   issue #45: the 8b-group study cold (a new host compile cache), then again warm (a new study name,
#                the same cache): the whole walls; about 15 min, `bg 8b-studies` and `collect`; ends with
#                bench/warm_study.py on the two (warm_study.json beside the studies' packs)
# Each run step packs the study as $OUT/<study>.tar.gz (the compile cache left out) and its Snakemake log.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/root/res
export PYTHONPATH=/tmp/dag:$PWD/src HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
SET_AL=6.54           # z-lab/Qwen3-8B-DFlash-b16 on gsm8k at K=15 (shared notes: dflash.md)

study() {   # study NAME OVERRIDES [--also ...]: the DAG as a user runs it, then its files packed for the trip back
  local name=$1 t0=$SECONDS; shift
  python3 -m specsweep.cli sweep --cores 16 "$@" --snakemake-args --resources gpu=1 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  tar czf "$OUT/$name.tar.gz" -C $RES --exclude=.vllm-cache "$name" datasets
  nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/gpu memory used after: /'
  echo "study $name: rc=$rc in $((SECONDS - t0)) s"
  return "$rc"
}

case ${1:?step} in
  recv) mkdir -p /root/whl && cp "${2:?folder}"/* /root/whl/ && ls /root/whl ;;
  install)
    bash scripts/offline_install.sh /root/whl /tmp/site .dag/wheels /tmp/dag || exit
    mkdir -p $RES/models && cp -r results/models/tiny $RES/models/
    python3 -m specsweep.cli shape qwen3-8b $RES/models/qwen3-8b-shaped
    python3 -m specsweep.cli shape qwen3.5-27b $RES/models/qwen3.5-27b-dflash-shaped
    python3 -m specsweep.cli shape qwen3.6-27b $RES/models/qwen3.6-27b-dflash-shaped
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv ;;
  tiny) study tiny-gpu experiment=gpu_tiny server=vllm_gpu_bundle results_dir=$RES
        study tiny-gpu-local experiment=gpu_tiny server=local_cuda kernel=local_sdpa study=tiny-gpu-local \
          results_dir=$RES ;;
  8b-set) study qwen3-8b-shaped experiment=gpu_8b_shaped server=vllm_gpu_bundle results_dir=$RES \
            "sweep.num_speculative_tokens=[15]" "sweep.set_acceptance=[$SET_AL]" ;;
  8b-cost) study qwen3-8b-shaped experiment=gpu_8b_shaped server=vllm_gpu_bundle results_dir=$RES \
             --also "sweep.num_speculative_tokens=[15] sweep.set_acceptance=[$SET_AL]" ;;
  8b-curve) lengths=$([ "${2:?1 or 2}" = 1 ] && echo "null,2,4" || echo "null,2,4,8,12")
            study qwen3-8b-curve experiment=gpu_8b_shaped server=vllm_gpu_bundle results_dir=$RES study=qwen3-8b-curve \
              "sweep.num_speculative_tokens=[15]" "sweep.set_acceptance=[$lengths]" ;;
  tiny-block) study tiny-gpu-block experiment=gpu_tiny server=vllm_gpu_bundle results_dir=$RES study=tiny-gpu-block \
                "sweep.num_speculative_tokens=[7]" "sweep.verification=[standard,block]" sweep.temperature=0.8 ;;
  tiny-sched) study tiny-gpu-sched experiment=gpu_tiny server=vllm_gpu_bundle results_dir=$RES study=tiny-gpu-sched \
                "sweep.num_speculative_tokens=[3,7]" "sweep.k_schedule=[[1,4,7],[5,64,3]]" "sweep.concurrency=[1,8]" ;;
  tiny-diag) python3 -c "import sys; from pathlib import Path; from transformers import AutoTokenizer
from specsweep.diagnose.counterfactuals import doctor
eot = AutoTokenizer.from_pretrained(sys.argv[1] + '/target').convert_tokens_to_ids('<|im_end|>')
print('mask token id ->', eot, doctor(Path(sys.argv[1] + '/drafter'), Path(sys.argv[2]), {'mask_token_id': eot}))" \
               $RES/models/tiny $RES/models/tiny-badmask/drafter || exit
             study tiny-gpu-diag experiment=gpu_tiny server=vllm_gpu_bundle results_dir=$RES study=tiny-gpu-diag \
               pair.drafter=$RES/models/tiny-badmask/drafter "sweep.num_speculative_tokens=[7]" ;;
  8b-group) study qwen3-8b-group experiment=gpu_8b_shaped server=vllm_gpu_bundle results_dir=$RES study=qwen3-8b-group \
              "sweep.num_speculative_tokens=[7,15]" "sweep.concurrency=[1,8]" sweep.repeats=3 ;;
  8b-sleep) study qwen3-8b-sleep experiment=gpu_8b_shaped server=vllm_gpu_bundle results_dir=$RES study=qwen3-8b-sleep \
              "sweep.num_speculative_tokens=[15]" "sweep.concurrency=[8]" sweep.repeats=3 sweep.residency=sleep ;;
  tiny-relaunch) study tiny-gpu-relaunch experiment=gpu_tiny server=vllm_gpu_bundle results_dir=$RES \
                   study=tiny-gpu-relaunch "sweep.num_speculative_tokens=[7]" sweep.repeats=4 sweep.rounds=2 \
                   sweep.residency=relaunch ;;
  modes) bash "$0" 8b-sleep; bash "$0" tiny-relaunch ;;
  27b-one) study qwen3.6-27b-hybrid experiment=gpu_27b_hybrid pair=qwen3.6-27b-dflash server=vllm_gpu_bundle \
             results_dir=$RES study=qwen3.6-27b-hybrid ${PROMPTS:+dataset.num_prompts=$PROMPTS} ;;
  27b-group) study qwen3.6-27b-hybrid experiment=gpu_27b_hybrid pair=qwen3.6-27b-dflash server=vllm_gpu_bundle \
               results_dir=$RES study=qwen3.6-27b-hybrid ${PROMPTS:+dataset.num_prompts=$PROMPTS} \
               --also "pair=qwen3.5-27b-dflash pair.target=$RES/models/qwen3.6-27b-dflash-shaped/target" ;;
  27b-greedy) study qwen3.6-27b-hybrid experiment=gpu_27b_hybrid pair=qwen3.6-27b-dflash server=vllm_gpu_bundle \
                results_dir=$RES study=qwen3.6-27b-hybrid ${PROMPTS:+dataset.num_prompts=$PROMPTS} \
                "sweep.set_acceptance=[null,6.0]" \
                --also "pair=qwen3.5-27b-dflash pair.target=$RES/models/qwen3.6-27b-dflash-shaped/target sweep.set_acceptance=[6.0]" ;;
  coresidency)
    python3 bench/coresidency.py --overrides "experiment=gpu_8b_shaped server=vllm_gpu_bundle results_dir=$RES \
sweep.num_speculative_tokens=[15] sweep.concurrency=[8] dataset.num_prompts=${PROMPTS:-32}" \
      --rounds "${2:-2}" --results /root/cores --out "$OUT" 2>&1 | tee "$OUT/coresidency.log" ;;
  vllm-metrics) grep -rn "enable_per_request_metrics\|per_request_metrics\|per.request.spec" /tmp/site/vllm --include=*.py | head -20
                echo "matches: $(grep -rln "per_request_metrics" /tmp/site/vllm --include=*.py | wc -l) files" ;;
  bg) shift; step=$1; mkdir -p /root/bg/$step; rm -f /root/bg/$step.rc
      OUT=/root/bg/$step setsid bash -c 'bash bench/h200_vllm.sh "$@" > /root/bg/$1/step.out 2>&1; echo $? > /root/bg/$1.rc' \
        _ "$@" < /dev/null > /dev/null 2>&1 &
      echo "started $step in the background" ;;
  collect) until [ $SECONDS -ge "${2:-560}" ]; do
             left=0; for d in /root/bg/*/; do [ -f "${d%/}.rc" ] || left=1; done
             [ $left = 0 ] && break; sleep 5; done
           for d in /root/bg/*/; do n=$(basename "$d"); mkdir -p "$OUT/$n"; cp "$d"* "$OUT/$n/" 2>/dev/null
             echo "== $n: rc $(cat "${d%/}.rc" 2>/dev/null || echo 'still running')"; tail -25 "$d/step.out"; done ;;
  8b-starts) python3 bench/start_side_by_side.py --visit gpu --out "$OUT" --overrides "experiment=gpu_8b_shaped \
server=vllm_gpu_bundle results_dir=$RES sweep.num_speculative_tokens=[7,15] sweep.concurrency=[1,8]" 2>&1 \
               | tee "$OUT/8b-starts.log" ;;
  8b-studies) export SPECSWEEP_VLLM_CACHE=/root/vllm-cache-$(date +%s)
              walls=()
              for name in qwen3-8b-cold qwen3-8b-warm; do t0=$SECONDS
                study $name experiment=gpu_8b_shaped server=vllm_gpu_bundle results_dir=$RES study=$name \
                  "sweep.num_speculative_tokens=[7,15]" "sweep.concurrency=[1,8]" sweep.repeats=3
                walls+=($((SECONDS - t0))); done
              python3 bench/warm_study.py $RES/qwen3-8b-cold $RES/qwen3-8b-warm --walls "${walls[@]}" \
                --out "$OUT/warm_study.json" ;;
  *) echo "h200_vllm.sh: unknown step '$1': recv DIR | install | tiny | 8b-set | 8b-cost | 8b-curve N | tiny-block | tiny-sched | tiny-diag | 8b-group | 8b-sleep | tiny-relaunch | modes | coresidency [ROUNDS] | vllm-metrics | bg STEP ... | collect SECS | 8b-starts | 8b-studies | 27b-one | 27b-group | 27b-greedy" >&2
     exit 2 ;;
esac
