"""Ship a trained tiny pair: copy results/models/tiny (tokenizer/, target/, drafter/) into the repository's
models/tiny/ and write its MANIFEST.json: the recipe (models/tiny.py's shapes and training defaults), the seed,
the commit whose rules trained it, the command, the training reports and each file's SHA-256.

    snakemake --cores 2 --config tiny_pair=train results_dir=/tmp/pair -- /tmp/pair/models/tiny/drafter/config.json
    python scripts/ship_tiny_pair.py /tmp/pair --commit <the commit that trained it>

tests/test_tiny.py checks that the shipped files are the manifest's and that its recipe is the code's.
"""
import argparse
import json
import shutil
import subprocess

from specsweep.core import layout
from specsweep.core.paths import REPO
from specsweep.models import tiny

STEPS = ("tokenizer", "target", "drafter")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results_dir", help="the results_dir the pair was trained in (its models/tiny/)")
    ap.add_argument("--commit", help="the commit whose rules trained it (default: HEAD)")
    args = ap.parse_args()
    source, shipped = layout.tiny_pair(args.results_dir), layout.tiny_pair(REPO)
    commit = args.commit or subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                           text=True).stdout.strip()
    reports = {m: json.loads(source.train_report(getattr(source, m)).read_text()) for m in ("target", "drafter")}
    scaled = {m: r["scale"] for m, r in reports.items() if r.get("scale", 1) != 1}
    if scaled:      # tiny_pair=train@S: the rules' check, not the recipe's pair
        raise SystemExit(f"{args.results_dir}: trained at a scale of the recipe ({scaled}), not by it: "
                         "train it with --config tiny_pair=train")
    for step in STEPS:
        shutil.rmtree(shipped.dir / step, ignore_errors=True)
        shutil.copytree(source.dir / step, shipped.dir / step)
    manifest = {
        "what": "the embedded tiny pair, trained by the workflow's rules (tiny_tokenizer, tiny_target, tiny_drafter)",
        "commit": commit,
        "command": "snakemake --cores 2 --config tiny_pair=train",
        "recipe": tiny.recipe(),
        "reports": reports,
        "files": tiny.file_digests(shipped.dir, STEPS),
    }
    (shipped.dir / tiny.MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"shipped {shipped.dir}: {len(manifest['files'])} files, "
          f"{sum((shipped.dir / f).stat().st_size for f in manifest['files']) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
