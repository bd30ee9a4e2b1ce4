"""`specsweep shape`: a config-only replica of a published pair (random weights: --load-format dummy)."""
from __future__ import annotations


def add(sub) -> None:
    sh = sub.add_parser("shape", help="write a config-only replica of a published pair (random weights: "
                        "--load-format dummy)")
    sh.add_argument("name", help="qwen3-8b, qwen3.5-27b, qwen3.6-27b or qwen3.6-35b-a3b")
    sh.add_argument("dest", help="folder to write target/ and drafter/ into")
    sh.set_defaults(fn=main)


def main(args) -> int:
    from specsweep.models import shaped

    out = shaped.write(args.name, args.dest)
    print(f"wrote {out}/target and {out}/drafter (config only: serve with --load-format dummy)")
    return 0
