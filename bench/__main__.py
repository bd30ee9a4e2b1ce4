"""The benchmarks' one runner, over bench/manifest.toml, the one list:

    python -m bench list                               # every entry: name, group, host, minutes, page
    python -m bench run NAME [--smoke] [-- ARGS...]     # one benchmark, ARGS after its manifest arguments
    python -m bench run --group G [--smoke]             # every entry of a group: a smoke tier (fast, server, dag,
                                                        # gpu, manual) or a host (cpu, h200, h200x2)
    python -m bench pack FOLDER --keep NAME...          # a kept campaign's studies into FOLDER/studies.tar.gz

It runs each as `python -m bench.<script>` from the repository's root with the root, src/ and tests/ on
PYTHONPATH (the path set once, here: the scripts carry no sys.path lines), one after another, and exits non-zero
when any failed or its smoke output lacks what the manifest expects.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every entry of bench/manifest.toml")
    run = sub.add_parser("run", help="run one benchmark, or every one of a group")
    run.add_argument("name", nargs="?", help="an entry's name")
    run.add_argument("--group", help="a smoke tier (fast, server, dag, gpu, manual) or a host (cpu, h200, h200x2)")
    run.add_argument("--smoke", action="store_true", help="its smoke: tiny sizes, nothing written to the archive")
    run.add_argument("extra", nargs="*", help="after --: more arguments for the one benchmark named")
    packing = sub.add_parser("pack", help="pack a kept campaign's studies into one file (bench/archive/README.md)")
    packing.add_argument("folder", type=Path)
    packing.add_argument("--keep", nargs="+", default=[], metavar="NAME", help="files left beside the pack")
    args = ap.parse_args(argv)
    if args.command == "pack":
        from bench import harness

        print("wrote", harness.pack(args.folder, args.keep))
        return 0
    entries = manifest.load()
    if args.command == "list":
        for e in entries:
            print(f"{e['name']:20} {e['smoke']:7} {e['host']:10} {e['minutes']:>14} min  {e['page']}")
        return 0
    if bool(args.name) == bool(args.group):
        ap.error("run: name one benchmark or give --group")
    if args.group:
        chosen = manifest.group(entries, args.group)
        if not chosen:
            ap.error(f"run: no entry in group {args.group!r}")
    else:
        chosen = [manifest.entry(entries, args.name)]
    failed = []
    for e in chosen:
        print(f"==== bench {e['name']}{' --smoke' if args.smoke else ''}", flush=True)
        ok, _ = manifest.run(e, smoke=args.smoke, extra=args.extra, echo=True)
        if not ok:
            failed.append(e["name"])
    print(f"==== {len(chosen) - len(failed)} of {len(chosen)} passed" + (f"; failed: {' '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
