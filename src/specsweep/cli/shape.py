"""`specsweep shape`: a config-only replica of a published pair (random weights: --load-format dummy), or with
`--weights` a real-format one: random bf16 safetensors on disk (models/replica.py)."""
from __future__ import annotations


def add(sub) -> None:
    sh = sub.add_parser("shape", help="write a config-only replica of a published pair (random weights: "
                        "--load-format dummy), or with --weights random safetensors files too")
    sh.add_argument("name", help="qwen3-8b, qwen3.5-27b, qwen3.6-27b or qwen3.6-35b-a3b")
    sh.add_argument("dest", help="folder to write target/ and drafter/ into")
    sh.add_argument("--weights", action="store_true",
                    help="also write random bf16 weights as sharded safetensors with their index (qwen3-8b, about 18 "
                         "GiB for target and drafter; the 27B hybrids, no MoE); serve them without --load-format dummy")
    sh.add_argument("--layers", type=int, help="cut the target to its first N layers (each layer's shape, and a "
                    "hybrid's pattern, as the model's; the drafter taps N spaced as the authors do): the 27B hybrid's "
                    "random weights in 16 layers are about 16 GiB, in 64 about 50")
    sh.add_argument("--shard-gib", type=float, default=2.0, help="a shard's size at most, in GiB (default 2)")
    sh.set_defaults(fn=main)


def main(args) -> int:
    from specsweep.models import shaped

    out = shaped.write(args.name, args.dest, layers=args.layers)
    if not args.weights:
        print(f"wrote {out}/target and {out}/drafter (config only: serve with --load-format dummy)")
        return 0
    from specsweep.models import replica

    total = 0
    for part in ("target", "drafter"):
        total += replica.write_weights(out / part, int(args.shard_gib * 2 ** 30), progress=lambda m: print(m, flush=True))
    print(f"wrote {out}/target and {out}/drafter with random bf16 weights ({total / 2 ** 30:.1f} GiB of safetensors): "
          "serve them from files, without --load-format dummy")
    return 0
