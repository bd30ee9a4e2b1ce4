"""`snakemake --lint` on this workflow, failing on any finding but the deliberate one.

Excepted: "Specify a conda environment or container for each rule." The workflow runs in the one environment
scripts/install.sh makes, and vLLM or SGLang from wherever `server.python` points (often another venv); a
per-rule conda environment would pin neither (docs/development.md). Snakemake 9's `--lint json` prints text
(its CLI does not pass the format on), so this reads the text: "Lints for <item>:" then "    * <title>:".
"""
import subprocess
import sys
from pathlib import Path

EXCEPTED = {"Specify a conda environment or container for each rule."}


def findings(text: str) -> list[tuple[str, str]]:
    item, found = None, []
    for line in text.splitlines():
        if line.startswith("Lints for ") and line.endswith(":"):
            item = line[len("Lints for "):-1]
        elif line.startswith("    * ") and item is not None:
            found.append((item, line[len("    * "):].removesuffix(":")))
    return found


def main() -> int:
    snakemake = Path(sys.executable).parent / "snakemake"
    out = subprocess.run([str(snakemake), "--lint", *sys.argv[1:]], capture_output=True, text=True)
    text = out.stdout + out.stderr
    found = findings(text)
    left = [(item, title) for item, title in found if title not in EXCEPTED]
    if out.returncode != 0 and not found:      # it failed before linting: a broken workflow, not a lint
        sys.stderr.write(text)
        return out.returncode
    for item, title in left:
        print(f"snakemake --lint: {item}: {title}", file=sys.stderr)
    print(f"snakemake --lint: {len(found)} finding(s), {len(found) - len(left)} excepted (conda), {len(left)} left",
          file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
