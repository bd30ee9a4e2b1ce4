#!/usr/bin/env bash
# Keep a study's figures in the repo (bench/<host>/<backend>/<study>/), never its weights or caches:
# summary tables, env.json, the plots, each server cell's server.json (its launch record), and each bench cell's
# metrics.json and requests.jsonl (gzipped: the per-chunk timings let a study be re-analysed per token later).
#   bash scripts/keep_study.sh results/<study> bench/archive/h200/vllm/<study>
set -euo pipefail
SRC=${1:?usage: keep_study.sh STUDY_DIR DEST}
DEST=${2:?usage: keep_study.sh STUDY_DIR DEST}
mkdir -p "$DEST"
cp "$SRC"/*.csv "$SRC"/env.json "$DEST"/
[ -d "$SRC/plots" ] && cp -r "$SRC/plots" "$DEST/"
for server in "$SRC"/*/; do
  [ -f "$server/logs/server.json" ] || continue
  name=$(basename "$server")
  mkdir -p "$DEST/$name"
  cp "$server/logs/server.json" "$DEST/$name/"
  for bench in "$server"/*/; do
    [ -f "$bench/metrics.json" ] || continue
    mkdir -p "$DEST/$name/$(basename "$bench")"
    cp "$bench/metrics.json" "$bench/config.yaml" "$DEST/$name/$(basename "$bench")/"
    gzip -9 -c "$bench/requests.jsonl" > "$DEST/$name/$(basename "$bench")/requests.jsonl.gz"
  done
done
du -sh "$DEST"
