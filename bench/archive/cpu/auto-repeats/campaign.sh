#!/bin/bash
# A B A B A B: auto (+A/A) and the 10-repeat default, each its own results_dir under DIR (default /tmp/vw;
# the planned-looks campaign ran this same loop under /tmp/vp: `campaign.sh /tmp/vp`)
R=${1:-/tmp/vw}
cd "$(dirname "$0")/../../../.."   # the repository root
T=$PWD/results/models/tiny       # a trained tiny pair
PAIR="pair.target=$T/target pair.drafter=$T/drafter pair.built_by_workflow=false"
for i in 1 2 3; do
  for arm in a b; do
    name=$arm$i
    extra=""
    [ $arm = a ] && extra="sweep.repeats=auto sweep.aa=true"
    echo "$name start $(date -u +%FT%TZ) $(cat /proc/loadavg)" >> $R/campaign.log
    t0=$(date +%s)
    PYTHONPATH=$PWD/src OMP_NUM_THREADS=1 .venv/bin/snakemake --cores 2 --config overrides="results_dir=$R/$name $PAIR $extra" > $R/$name.log 2>&1
    rc=$?
    echo "$name end $(date -u +%FT%TZ) rc=$rc wall_s=$(( $(date +%s) - t0 )) $(cat /proc/loadavg)" >> $R/campaign.log
  done
done
echo "campaign done" >> $R/campaign.log
