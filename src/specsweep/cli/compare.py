"""`specsweep compare`: two studies or two bench cells side by side; predicted against measured."""
from __future__ import annotations


def add(sub) -> None:
    cm = sub.add_parser("compare", help="two studies or two bench cells side by side, with paired CIs and verdicts; "
                                        "predicted (replayed rates) against measured wherever both exist")
    cm.add_argument("a", help="results/<study>, or a bench cell directory")
    cm.add_argument("b", nargs="?", default=None,
                    help="the same kind as A; ratios B vs A above 1 mean B is faster. Without it: A's predicted "
                         "against measured alone")
    cm.add_argument("--out", default="compare.csv", help="the CSV to write")
    cm.add_argument("--predicted-out", default="predicted.csv",
                    help="the CSV of predicted against measured (written where there is one)")
    cm.set_defaults(fn=main)


def main(args) -> int:
    """Two studies or two bench cells side by side, paired by prompt and turn; refuses pairs that differ."""
    from specsweep.read.compare import write_comparison

    write_comparison(args.a, args.b, args.out, args.predicted_out)
    return 0
