#!/usr/bin/env bash
# The GPU host's plumbing (docs/gpu-hosts.md): an offline one-GPU host, one command per call of a lease (each under
# 10 minutes; the host keeps /root and /tmp only while calls follow each other). Run from the repository's root.
#   recv DIR       copy one carried folder of vLLM bundle parts (.whl/c1, ...) to /root/whl
#   install        scripts/offline_install.sh: vLLM into /tmp/site, the DAG's wheels (.dag/wheels) into /tmp/dag;
#                  the tiny pair (the shipped models/tiny) and the config-only 8B-, 27B- and 35B-A3B-shaped pairs into /root/res
#   recv-sglang DIR, install-sglang   the same for SGLang 0.5.17 (shared/gpu-sglang's parts, re-split into 33 MiB
#                  parts .sgl/p1..p5) into /tmp/sgl; the tiny pair given SGLang's mask_token, the 8B-shaped pair
#   study PRESET [OVERRIDES...] [--also OVERRIDES]   a named preset (conf/experiment/PRESET.yaml) through the DAG as a
#                  user runs it, results_dir=/root/res, then the study packed as $OUT/<study>.tar.gz (the compile
#                  cache left out) beside its log $OUT/<study>.log (STUDY_TIMEOUT=S: give up after S seconds)
#   bg STEP ...    run a command of this script in its own process session (it outlives the call while the next
#                  call follows within ~30 s), its files under /root/bg/STEP;  collect SECS  wait up to SECS for
#                  every bg step, then copy what they wrote to $OUT/STEP/ (what is still running goes on)
# The H200 campaigns' steps, by name, each a preset run (the steps as they ran, frozen beside their data:
# bench/archive/h200/vllm/h200_vllm.sh, bench/archive/h200/sglang/h200_sglang.sh):
#   tiny (gpu_tiny_vllm, gpu_tiny_local), 8b-set (gpu_8b_set), 8b-cost (gpu_8b_shaped and --also K=15 at AL 6.54),
#   8b-curve N (gpu_8b_curve; N=2 adds lengths 8 and 12), tiny-block, tiny-sched, tiny-diag (gpu_tiny_*; tiny-diag
#   doctors the drafter first), 8b-group, 8b-sleep (gpu_8b_*), tiny-relaunch (gpu_tiny_relaunch), modes (8b-sleep,
#   then tiny-relaunch), 27b-one (gpu_27b_one), 27b-group (and --also the all-full drafter layout), 27b-greedy (and
#   real acceptance; with dummy weights its texts are empty, so its agreement is blank:
#   docs/campaigns/2026-12-06-h100-27b-greedy.md), 35b-moe (gpu_35b_moe_hybrid), 8b-studies [OVERRIDES] (gpu_8b_group
#   cold, then warm on the same compile cache, each with the overrides, then specsweep.read.warm_study; about 15 min:
#   `bg 8b-studies`, then `collect`); the benchmarks coresidency [ROUNDS] and 8b-starts (python -m bench run;
#   8b-starts about 12 min: `bg 8b-starts`, then `collect 560` twice), 8b-turns [ROUNDS] (bench turn_designs: the
#   8B-shaped baseline and K=15 at c=8, today's turns against waves, one launch);
#   vllm-metrics (a grep of the bundle); sglang-capture, sglang-tiny, sglang-tiny-local, sglang-8b (gpu_sglang_*).
# Issue 52's steps: 8b-disk (the 8B-shaped pair's random bf16 safetensors written to $RES/models/qwen3-8b-disk, about
#   17 GiB and 2-4 min, skipped where its index exists; then gpu_8b_on_disk, asleep at level 2: about 13 min in all,
#   `bg 8b-disk`, then `collect 560` twice); 27b-disk (the 27B hybrid cut to 16 layers, random weights of a real spread
#   in $RES/models/qwen3.6-27b-disk, about 19 GiB, then gpu_27b_on_disk: its greedy agreement at concurrency 1);
#   visit (an H200's: gpu_8b_answers, then 35b-moe, then 8b-turns 8, one after another: `bg visit`, then
#   `collect 560` until done); 8b-launches [N] (gpu_8b_answers N times, default 4, a study each in one results_dir:
#   the launches issue 54 item 5 asks of a GPU, each study's launches.json; a fifth would pin their SD);
#   visit-h100 (what fits 80 GB: sglang-27b-c8, after recv-sglang and install-sglang, no vLLM bundle needed);
#   sglang-27b (gpu_sglang_27b_hybrid, both drafter layouts, after install-sglang and the 27B shapes: `bg sglang-27b`,
#   then `collect`: c=1, as `sglang-27b-c1` ran it on 2026-12-07); sglang-27b-c8 (both layouts at c=8 with the
#   memory split that runs 8 DFLASH requests at once, gpu_sglang_27b_hybrid_c8); sglang-27b-first (its DFlash
#   members only, one repeat of 8 prompts at c=1: does DFLASH serve; it did, 2026-12-07).
# PROMPTS=N sets dataset.num_prompts for the 27B and 35B steps and coresidency.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/root/res
W=/root/sglwhl
export PYTHONPATH=/tmp/dag:$PWD/src HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
SET_AL=6.54           # z-lab/Qwen3-8B-DFlash-b16 on gsm8k at K=15 (shared notes: dflash.md)
SHAPED27=$RES/models/qwen3.6-27b-dflash-shaped/target

study_name() {   # the study a preset and its overrides compose to (the overrides before any --also)
  local args=()
  for a in "$@"; do [ "$a" = --also ] && break; args+=("$a"); done
  python3 -c 'import sys; from specsweep.grid.config import compose_jobs; from specsweep.core.errors import SpecsweepError
try: print(compose_jobs(sys.argv[1:])[0]["study"])
except SpecsweepError as e: sys.exit(f"gpu_host.sh study: {e}")' "${args[@]}"   # bad overrides: one line, no traceback
}

study() {   # study PRESET [OVERRIDES...] [--also ...]: the DAG as a user runs it, then its files packed for the trip back
  local preset=${1:?preset} t0=$SECONDS name; shift
  name=$(study_name "experiment=$preset" "results_dir=$RES" "$@") || return
  ${STUDY_TIMEOUT:+timeout $STUDY_TIMEOUT} python3 -m specsweep.cli sweep --cores 16 "experiment=$preset" \
    "results_dir=$RES" "$@" --snakemake-args --resources gpu=1 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  tar czf "$OUT/$name.tar.gz" -C $RES --exclude=.vllm-cache "$name" datasets
  nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/gpu memory used after: /'
  echo "study $name: rc=$rc in $((SECONDS - t0)) s"
  return "$rc"
}

case ${1:?command} in
  recv) mkdir -p /root/whl && cp "${2:?folder}"/* /root/whl/ && ls /root/whl ;;
  install)
    bash scripts/offline_install.sh /root/whl /tmp/site .dag/wheels /tmp/dag || exit
    mkdir -p $RES/models && cp -r models/tiny $RES/models/      # the shipped pair (its MANIFEST.json)
    python3 -m specsweep.cli shape qwen3-8b $RES/models/qwen3-8b-shaped
    python3 -m specsweep.cli shape qwen3.5-27b $RES/models/qwen3.5-27b-dflash-shaped
    python3 -m specsweep.cli shape qwen3.6-27b $RES/models/qwen3.6-27b-dflash-shaped
    python3 -m specsweep.cli shape qwen3.6-35b-a3b $RES/models/qwen3.6-35b-a3b-dflash-shaped
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv ;;
  recv-sglang) mkdir -p $W && cp "${2:?folder}"/* $W/ && ls -la $W ;;
  install-sglang)
    if [ ! -f /tmp/sgl/.ok ]; then
      (cd $W && cat bundle.tar.part* > bundle.tar && sha256sum -c bundle.sha256) ||
        { echo "gpu_host: the SGLang bundle's parts are missing or corrupt: carry every part again" >&2; exit 4; }
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
    TINY=models/tiny                                                   # the shipped pair
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
  study) shift; study "$@" ;;
  bg) shift; step=$1; mkdir -p /root/bg/$step; rm -f /root/bg/$step.rc
      OUT=/root/bg/$step setsid bash -c 'bash scripts/gpu_host.sh "$@" > /root/bg/$1/step.out 2>&1; echo $? > /root/bg/$1.rc' \
        _ "$@" < /dev/null > /dev/null 2>&1 &
      echo "started $step in the background" ;;
  collect) copy() { for d in /root/bg/*/; do mkdir -p "$OUT/$(basename "$d")"; cp "$d"* "$OUT/$(basename "$d")/" \
                      2>/dev/null; done; }       # every 30 s too: a call cut at its limit still brings back $OUT
           until [ $SECONDS -ge "${2:-560}" ]; do
             left=0; for d in /root/bg/*/; do [ -f "${d%/}.rc" ] || left=1; done
             [ $left = 0 ] && break; [ $((SECONDS % 30)) -lt 5 ] && copy; sleep 5; done
           copy
           for d in /root/bg/*/; do
             echo "== $(basename "$d"): rc $(cat "${d%/}.rc" 2>/dev/null || echo 'still running')"; tail -25 "$d/step.out"; done ;;
  # ---- the H200 campaigns' steps, as preset runs ----
  tiny) study gpu_tiny_vllm
        study gpu_tiny_local ;;
  8b-set) study gpu_8b_set ;;
  8b-cost) study gpu_8b_shaped server=vllm_gpu_bundle \
             --also "sweep.num_speculative_tokens=[15] sweep.set_acceptance=[$SET_AL]" ;;
  8b-curve) study gpu_8b_curve "sweep.set_acceptance=[$([ "${2:?1 or 2}" = 1 ] && echo "null,2,4" || echo "null,2,4,8,12")]" ;;
  tiny-block) study gpu_tiny_block ;;
  tiny-sched) study gpu_tiny_sched ;;
  tiny-diag) python3 -c "import sys; from pathlib import Path; from transformers import AutoTokenizer
from specsweep.diagnose.counterfactuals import doctor
eot = AutoTokenizer.from_pretrained(sys.argv[1] + '/target').convert_tokens_to_ids('<|im_end|>')
print('mask token id ->', eot, doctor(Path(sys.argv[1] + '/drafter'), Path(sys.argv[2]), {'mask_token_id': eot}))" \
               $RES/models/tiny $RES/models/tiny-badmask/drafter || exit
             study gpu_tiny_diag ;;
  8b-group) study gpu_8b_group ;;
  8b-sleep) study gpu_8b_sleep ;;
  tiny-relaunch) study gpu_tiny_relaunch ;;
  modes) bash "$0" 8b-sleep; bash "$0" tiny-relaunch ;;
  27b-one) study gpu_27b_one ${PROMPTS:+dataset.num_prompts=$PROMPTS} ;;
  27b-group) study gpu_27b_one ${PROMPTS:+dataset.num_prompts=$PROMPTS} \
               --also "pair=qwen3.5-27b-dflash pair.target=$SHAPED27" ;;
  35b-moe) study gpu_35b_moe_hybrid ${PROMPTS:+dataset.num_prompts=$PROMPTS} ;;
  27b-greedy) study gpu_27b_one ${PROMPTS:+dataset.num_prompts=$PROMPTS} "sweep.set_acceptance=[null,6.0]" \
                --also "pair=qwen3.5-27b-dflash pair.target=$SHAPED27 sweep.set_acceptance=[6.0]" ;;
  8b-studies) shift; export SPECSWEEP_VLLM_CACHE=/root/vllm-cache-$(date +%s)
              walls=()
              for name in qwen3-8b-cold qwen3-8b-warm; do t0=$SECONDS
                study gpu_8b_group study=$name "$@"
                walls+=($((SECONDS - t0))); done
              python3 -m specsweep.read.warm_study $RES/qwen3-8b-cold $RES/qwen3-8b-warm --walls "${walls[@]}" \
                --out "$OUT/warm_study.json" ;;
  coresidency)
    python3 -m bench run coresidency -- --overrides "experiment=gpu_8b_shaped server=vllm_gpu_bundle results_dir=$RES \
sweep.num_speculative_tokens=[15] sweep.concurrency=[8] dataset.num_prompts=${PROMPTS:-32}" \
      --rounds "${2:-2}" --results /root/cores --out "$OUT" 2>&1 | tee "$OUT/coresidency.log" ;;
  8b-starts) python3 -m bench run start_side_by_side -- --visit gpu --out "$OUT" --overrides "experiment=gpu_8b_shaped \
server=vllm_gpu_bundle results_dir=$RES sweep.num_speculative_tokens=[7,15] sweep.concurrency=[1,8]" 2>&1 \
               | tee "$OUT/8b-starts.log" ;;
  8b-turns) python3 -m bench run turn_designs -- --rounds "${2:-12}" --results /root/turns --out "$OUT" \
              --overrides "experiment=gpu_8b_shaped server=vllm_gpu_bundle results_dir=$RES \
sweep.num_speculative_tokens=[15] sweep.concurrency=[8]" 2>&1 | tee "$OUT/8b-turns.log" ;;
  vllm-metrics) grep -rn "enable_per_request_metrics\|per_request_metrics\|per.request.spec" /tmp/site/vllm --include=*.py | head -20
                echo "matches: $(grep -rln "per_request_metrics" /tmp/site/vllm --include=*.py | wc -l) files" ;;
  sglang-capture) PYTHONPATH=/tmp/sgl timeout 360 python3 tests/fake_sglang/capture.py $RES/models/tiny "$OUT" ;;
  sglang-tiny) STUDY_TIMEOUT=530 study gpu_sglang_tiny ;;
  sglang-tiny-local) STUDY_TIMEOUT=530 study gpu_sglang_tiny_local ;;
  sglang-8b) STUDY_TIMEOUT=530 study gpu_sglang_8b ;;
  8b-disk) DISK=$RES/models/qwen3-8b-disk
           if [ ! -f $DISK/drafter/model.safetensors.index.json ]; then t0=$SECONDS
             python3 -m specsweep.cli shape qwen3-8b $DISK --weights || exit
             echo "replica written in $((SECONDS - t0)) s: $(du -sh $DISK | cut -f1)"; df -h $RES | tail -1; fi
           study gpu_8b_on_disk ;;
  27b-disk) DISK=$RES/models/qwen3.6-27b-disk
            if [ ! -f $DISK/drafter/model.safetensors.index.json ]; then t0=$SECONDS
              python3 -m specsweep.cli shape qwen3.6-27b $DISK --weights --layers 16 || exit
              echo "replica written in $((SECONDS - t0)) s: $(du -sh $DISK | cut -f1)"; df -h $RES | tail -1; fi
            study gpu_27b_on_disk ;;
  visit) STUDY_TIMEOUT=540 study gpu_8b_answers   # a visit's studies in the guide's order, one after another:
        bash "$0" 35b-moe               # issue 54's 8B group first (291 s on an H100), then issue 52's MoE hybrid
        bash "$0" 8b-turns 8 ;;         # (about 12 min), then issue 54's stretch: `bg visit`, `collect 560` until done
  8b-launches) for i in $(seq 1 "${2:-4}"); do   # issue 54 item 5 on a GPU: N launches of the 8B group (default 4),
                 STUDY_TIMEOUT=900 study gpu_8b_answers study=qwen3-8b-answers-waves-l$i   # a study each, one
               done ;;     # results_dir (a cold one on an H100 ran past 540 s): `bg 8b-launches`, `collect 560`s
  visit-h100) bash "$0" sglang-27b-c8 ;;  # what fits 80 GB: SGLang's hybrid study at c=8, both layouts in one DAG
                                          # run (2026-12-07 ran c=1 with verdicts, and c=8 for one layout over three)
  sglang-27b|sglang-27b-first|sglang-27b-c8) for s in qwen3.5-27b qwen3.6-27b; do   # a replica with its processor files
                [ -f $RES/models/$s-dflash-shaped/target/preprocessor_config.json ] ||
                python3 -m specsweep.cli shape $s $RES/models/$s-dflash-shaped; done
              if [ "$1" = sglang-27b-first ]; then     # does DFLASH serve the hybrid: its members only, 8 prompts, c=1
                study gpu_sglang_27b_hybrid study=qwen3.6-27b-hybrid-sglang-first sweep.baseline=false sweep.repeats=1 \
                  "sweep.concurrency=[1]" dataset.num_prompts=8 --also "pair=qwen3.5-27b-dflash pair.target=$SHAPED27"
              elif [ "$1" = sglang-27b-c8 ]; then
                study gpu_sglang_27b_hybrid_c8 --also "pair=qwen3.5-27b-dflash pair.target=$SHAPED27"
              else study gpu_sglang_27b_hybrid --also "pair=qwen3.5-27b-dflash pair.target=$SHAPED27"; fi ;;
  *) echo "gpu_host.sh: unknown command '$1': recv DIR | install | recv-sglang DIR | install-sglang | study PRESET ... |" \
          "bg STEP ... | collect SECS | tiny | 8b-set | 8b-cost | 8b-curve N | tiny-block | tiny-sched | tiny-diag |" \
          "8b-group | 8b-sleep | tiny-relaunch | modes | 27b-one | 27b-group | 27b-greedy | 8b-studies |" \
          "coresidency [ROUNDS] | 8b-starts | vllm-metrics | sglang-capture | sglang-tiny | sglang-tiny-local | sglang-8b |" \
          "8b-disk | 27b-disk | visit | 8b-launches [N] | visit-h100 | sglang-27b | sglang-27b-c8 | sglang-27b-first" >&2
     exit 2 ;;
esac
