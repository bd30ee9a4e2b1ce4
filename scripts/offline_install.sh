#!/usr/bin/env bash
# Install vLLM and the DAG's packages on a GPU host without a package index (docs/gpu-hosts.md).
#   bash scripts/offline_install.sh PARTS [VLLM_SITE] [DAG_WHEELS] [DAG_SITE]
#     PARTS       a folder holding the vLLM bundle's parts (bundle.tar.part0..N and bundle.sha256), as made by
#                 shared/gpu-vllm/build_bundle.sh and carried over in several transfers
#     VLLM_SITE   where vLLM and its missing dependencies go (default /tmp/site): the server's PYTHONPATH
#     DAG_WHEELS  scripts/offline_wheels.sh's folder (default .dag/wheels); DAG_SITE where they go (/tmp/dag)
# Idempotent: a second run on the same host only checks the imports.
set -euo pipefail
PARTS=${1:?usage: offline_install.sh PARTS [VLLM_SITE] [DAG_WHEELS] [DAG_SITE]}
SITE=${2:-/tmp/site}
WHEELS=${3:-.dag/wheels}
DAG=${4:-/tmp/dag}
PY=${PYTHON:-python3}
install() { "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$@" 2>&1 |
            grep -v "Running pip as the 'root' user" || true; }

if [ ! -f "$SITE/.specsweep-ok" ]; then
  (cd "$PARTS" && cat bundle.tar.part* > bundle.tar && sha256sum -c --quiet bundle.sha256) ||
    { echo "offline_install: the bundle's parts in $PARTS are missing or corrupt: carry every part again" >&2; exit 4; }
  mkdir -p "$PARTS/bundle" && tar xf "$PARTS/bundle.tar" -C "$PARTS/bundle" && rm -f "$PARTS/bundle.tar"
  (cd "$PARTS/bundle" && sha256sum -c --quiet SHA256SUMS)
  install "$SITE" "$PARTS"/bundle/deps/*.whl
  tar xJf "$PARTS"/bundle/vllm*.tar.xz -C "$SITE"
  touch "$SITE/.specsweep-ok"
fi
if [ ! -f "$DAG/.specsweep-ok" ]; then
  install "$DAG" "$WHEELS"/*.whl
  touch "$DAG/.specsweep-ok"
fi
PYTHONPATH=$SITE "$PY" -c "import importlib.metadata as m; print('vllm', m.version('vllm'), 'in $SITE')"
PYTHONPATH=$DAG "$PY" -c "import snakemake, hydra; print('snakemake', snakemake.__version__, 'in $DAG')"
