#!/usr/bin/env bash
# The linters .ci/run runs before the tests; each must pass. VENV defaults to .venv.
#   ruff check                      pyproject.toml's [tool.ruff] (workflow/scripts/ruff.toml adds `snakemake`)
#   snakefmt --check                the Snakefile and the rules, at [tool.snakefmt]'s line length
#   snakemake --lint                every finding but the per-rule conda one (scripts/snakemake_lint.py says why)
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${SPECSWEEP_VENV:-.venv}
rc=0
"$VENV/bin/ruff" check . || rc=1
"$VENV/bin/snakefmt" --check Snakefile workflow/rules || rc=1
"$VENV/bin/python" scripts/snakemake_lint.py || rc=1
[ "$rc" -eq 0 ] && echo "linters: ruff, snakefmt and snakemake --lint found nothing" >&2
exit "$rc"
