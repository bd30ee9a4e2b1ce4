#!/bin/bash
# Issue 54's live Done-when: 12 A B pairs on this machine, alternating, loaded as it comes. A: the default study
# with `sweep.repeats=auto` (budget 20, planned looks 6, 10, 14, 20); B: the default (10 repeats). Each study its
# own results_dir under DIR (default /tmp/avf), the shipped tiny pair (models/tiny) as the README's command uses it.
R=${1:-/tmp/avf}
N=${2:-12}
cd "$(dirname "$0")/../../../.."   # the repository root
mkdir -p "$R"
for i in $(seq 1 "$N"); do
  for arm in a b; do
    name=$arm$i
    extra=""
    [ $arm = a ] && extra="sweep.repeats=auto"
    echo "$name start $(date -u +%FT%TZ) $(cat /proc/loadavg)" >> "$R/campaign.log"
    t0=$(date +%s.%N)
    OMP_NUM_THREADS=1 .venv/bin/snakemake --cores 2 --config overrides="results_dir=$R/$name $extra" > "$R/$name.log" 2>&1
    rc=$?
    echo "$name end $(date -u +%FT%TZ) rc=$rc wall_s=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))") $(cat /proc/loadavg)" >> "$R/campaign.log"
  done
done
echo "campaign done" >> "$R/campaign.log"
