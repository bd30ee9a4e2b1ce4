#!/bin/bash
cd "$(dirname "$0")/../../../.."   # the repository root
T=$PWD/results/models/tiny       # a trained tiny pair
PAIR="pair.target=$T/target pair.drafter=$T/drafter pair.built_by_workflow=false"
# finish a2 (its group job failed after its bench cells, in record_acceptance, fixed since)
echo "a2-finish start $(date -u +%FT%TZ) $(cat /proc/loadavg)" >> /tmp/vw/campaign.log
PYTHONPATH=$PWD/src OMP_NUM_THREADS=1 .venv/bin/snakemake --cores 2 --config overrides="results_dir=/tmp/vw/a2 $PAIR sweep.repeats=auto sweep.aa=true" > /tmp/vw/a2-finish.log 2>&1
echo "a2-finish end $(date -u +%FT%TZ) rc=$? $(cat /proc/loadavg)" >> /tmp/vw/campaign.log
for name in a4 b4; do
  extra=""
  [ ${name:0:1} = a ] && extra="sweep.repeats=auto sweep.aa=true"
  echo "$name start $(date -u +%FT%TZ) $(cat /proc/loadavg)" >> /tmp/vw/campaign.log
  t0=$(date +%s)
  PYTHONPATH=$PWD/src OMP_NUM_THREADS=1 .venv/bin/snakemake --cores 2 --config overrides="results_dir=/tmp/vw/$name $PAIR $extra" > /tmp/vw/$name.log 2>&1
  rc=$?
  echo "$name end $(date -u +%FT%TZ) rc=$rc wall_s=$(( $(date +%s) - t0 )) $(cat /proc/loadavg)" >> /tmp/vw/campaign.log
done
echo "campaign2 done" >> /tmp/vw/campaign.log
