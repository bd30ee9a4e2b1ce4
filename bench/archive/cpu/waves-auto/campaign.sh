#!/bin/bash
# Issue 54: the default study in waves (sweep.waves=4 sweep.warmup_turns=first: 16 prompts in 4 waves of 4, warm-up on
# a member's first turn only), A: sweep.repeats=auto, B: 10 repeats, C: today's default (10 repeats, closed loop,
# warm-up every turn); A B C, alternating, each study its own results_dir under DIR, the shipped tiny pair.
R=${1:-/tmp/avf3}; N=${2:-12}; TREE=${TREE:-$(cd "$(dirname "$0")/../../../.." && pwd)}   # a checkout of the commit measured
cd "$TREE"
mkdir -p "$R"
for i in $(seq 1 "$N"); do
  for arm in a b c; do
    name=$arm$i
    case $arm in
      a) extra="sweep.repeats=auto sweep.waves=4 sweep.warmup_turns=first" ;;
      b) extra="sweep.waves=4 sweep.warmup_turns=first" ;;
      c) extra="" ;;
    esac
    echo "$name start $(date -u +%FT%TZ) $(cat /proc/loadavg)" >> "$R/campaign.log"
    t0=$(date +%s.%N)
    PYTHONPATH=$TREE/src OMP_NUM_THREADS=1 .venv/bin/snakemake --cores 2 --config overrides="results_dir=$R/$name $extra" > "$R/$name.log" 2>&1
    rc=$?
    echo "$name end $(date -u +%FT%TZ) rc=$rc wall_s=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))") $(cat /proc/loadavg)" >> "$R/campaign.log"
  done
done
echo "campaign done" >> "$R/campaign.log"
