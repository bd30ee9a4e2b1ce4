"""`specsweep drafter inspect`: what a drafter checkpoint is and whether it fits a target."""
from __future__ import annotations

import json
from pathlib import Path

from specsweep.core.errors import ConfigError


def add(sub) -> None:
    dr = sub.add_parser("drafter", help="drafter checkpoint tooling").add_subparsers(dest="drafter_cmd", required=True)
    di = dr.add_parser("inspect", help="shapes, config (given or inferred from the weights), fit to a target")
    di.add_argument("path")
    di.add_argument("--target", help="target checkpoint directory to check the drafter against")
    di.add_argument("--write", action="store_true", help="write the inferred config.json when there is none")
    di.set_defaults(fn=main)


def main(args) -> int:
    """What a drafter checkpoint is: shapes, its config or the one they imply, and its fit to a target."""
    from specsweep.core.results import atomic_write_json
    from specsweep.models import drafter_config, model_shape
    from specsweep.plan import checks

    path = Path(args.path)
    if not path.is_dir():
        raise ConfigError(f"drafter: {path} is not a directory: give a checkpoint directory")
    shapes = drafter_config.weight_shapes(path)
    if not shapes:
        raise ConfigError(f"drafter: {path} holds no *.safetensors weights")
    for name, shape in sorted(shapes.items()):
        if not name.startswith("layers.") or name.startswith("layers.0."):
            print(f"  {name:48s} {list(shape)}")
    n_layers = len({n.split(".")[1] for n in shapes if n.startswith("layers.")})
    print(f"  ... {n_layers} layer(s), {sum(_numel(s) for s in shapes.values()) / 1e6:.2f}M parameters")
    target = model_shape.read_config(args.target) if args.target else None
    existing = model_shape.read_config(path)
    if existing is not None:
        print("config.json:", json.dumps({k: existing.get(k) for k in (
            "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "block_size", "num_target_layers", "dflash_config")}, indent=1))
    else:
        inferred, assumed = drafter_config.infer_config(shapes, target)
        print("no config.json; the weights imply:", json.dumps(inferred, indent=1))
        for a in assumed:
            print(f"  assumed: {a}")
        if args.write:
            atomic_write_json(path / "config.json", inferred)
            print(f"wrote {path / 'config.json'}")
    if args.target:
        cfg = {"pair": {"method": "dflash", "drafter": str(path), "target": args.target, "tokenizer": None,
                        "mask_token_id": None}}
        check = checks.check_drafter(cfg, {})
        print(f"[{check.status:4}] matches {args.target}: {check.message}")
        return 1 if check.status == "fail" else 0
    return 0


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
