#!/usr/bin/env bash
# Wheels of the DAG's own packages (Snakemake, Hydra and what they need) for an offline host, at the versions
# this checkout's venv runs, for another Python version. Packages the host already has are left out.
#   bash scripts/offline_wheels.sh DEST [HOST_PACKAGES]
#     DEST            where the wheels go (one folder; a pure-Python package with no wheel is built here)
#     HOST_PACKAGES   a file of package names the host has, separated by commas, spaces or newlines
#   SPECSWEEP_VENV=.venv   the venv whose versions are copied;  PYVER=3.12   the host's Python
# On the host (no index): python3 -m pip install --no-index --no-deps --target /tmp/dag DEST/*.whl, then run
# Snakemake with PYTHONPATH=/tmp/dag:src (docs/gpu-hosts.md).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=$(realpath -m "${1:?usage: offline_wheels.sh DEST [HOST_PACKAGES]}")
HOST=${2:-/dev/null}
VENV=${SPECSWEEP_VENV:-.venv}
PYVER=${PYVER:-3.12}
mkdir -p "$DEST"
# The closure of the DAG's top-level packages, as the venv resolved it, minus the host's packages.
mapfile -t PINS < <("$VENV/bin/python" - "$HOST" "$PYVER" snakemake hydra-core omegaconf <<'PY'
import importlib.metadata as md, re, sys
from packaging.requirements import Requirement

norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
host = {norm(n) for n in re.split(r"[\s,]+", open(sys.argv[1]).read()) if n}
env = {"extra": "", "python_version": sys.argv[2], "sys_platform": "linux", "platform_system": "Linux"}
seen, todo = {}, list(sys.argv[3:])
while todo:
    name = todo.pop()
    if norm(name) in seen:
        continue
    dist = md.distribution(name)
    seen[norm(name)] = dist.version
    todo += [r.name for r in map(Requirement, dist.requires or []) if not r.marker or r.marker.evaluate(env)]
print("\n".join(f"{n}=={v}" for n, v in sorted(seen.items()) if n not in host))
PY
)
PLAT=(--python-version "$PYVER" --implementation cp --only-binary=:all: --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
for pin in "${PINS[@]}"; do
  "$VENV/bin/python" -m pip download -q --no-deps "${PLAT[@]}" -d "$DEST" "$pin" 2>/dev/null ||
    "$VENV/bin/python" -m pip wheel -q --no-deps -w "$DEST" "$pin"   # no wheel on the index: pure Python, built here
done
ls "$DEST"/*.whl | wc -l | xargs echo "wheels in $DEST:"
du -sh "$DEST"
