#!/bin/bash
# The live check of 2026-12-06 (docs/campaigns/2026-12-06-cpu-launch-component.md): the default study five times under
# one results_dir, each its own study name, one after another; the fifth pins the launch SD of the first four.
# Run from the repository's root: bash bench/archive/cpu/launch-component/live/launches.sh /tmp/lsd
root=${1:?a results_dir}
for i in 1 2 3 4 5; do
  t0=$(date +%s)
  .venv/bin/snakemake --cores 2 --config overrides="results_dir=$root study=l$i" > "$root-l$i.log" 2>&1
  echo "l$i rc=$? wall=$(( $(date +%s) - t0 ))" >> "$root.log"
done
