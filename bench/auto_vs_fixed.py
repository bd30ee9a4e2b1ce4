"""`sweep.repeats: auto` against the fixed 10-repeat default, live and replayed, and the launch-to-launch component
(issue 54's Done-when), from a campaign of default studies run A B A B (bench/archive/cpu/auto-vs-fixed/campaign.sh:
A = `sweep.repeats=auto`, B = the default), each its own results_dir named a1, b1, a2, ... with a campaign.log
(`--auto`, `--fixed`: other letters, as bench/archive/cpu/waves-auto/campaign.sh's A B C, read against B and C).

- live: per study its three comparisons' verdicts, intervals and answers (summary.csv, k_comparison.csv) and its
  wall (campaign.log); whether A answered all three (`faster`, `slower`, `equivalent`), A's median and 95th
  percentile wall over B's, and any answered verdict that contradicts the pooled verdict (one 95% t interval over
  every study's repeat blocks of that comparison);
- replay: studies drawn from the recorded blocks (a recorded study at random, then each comparison's 20 blocks
  drawn with replacement from that study's own), each through the planned rule of budget 20
  (`spending.comparison`), the share that answers all three;
- launches: each study one launch; per comparison the launches' means and intervals, the precision-weighted mean,
  Cochran's Q, the launch SD (DerSimonian-Laird) with its Q-profile 95% interval, and how many launches' intervals
  hold the weighted mean.

- sessions (`--session DIR`, issue 54 item 5: launches spread over two sessions or more): the fixed studies (b1,
  b2, ...) of this campaign and of each other session's campaign of fixed studies, as launches: the same figures
  over all of them, per session, and how many of the fixed intervals hold the weighted mean of all sessions.
  `--keep SRC DEST` keeps a session's studies small: each study's tables and its blocks (`blocks.json`, which
  this command reads where the request rows are not kept) beside the campaign.log.

    python -m bench.auto_vs_fixed /tmp/avf --out bench/archive/cpu/auto-vs-fixed/auto_vs_fixed.json
    python -m bench.auto_vs_fixed bench/archive/cpu/auto-vs-fixed --session bench/archive/cpu/launches-2 \
        --out bench/archive/cpu/launches-2/launches.json
    python -m bench.auto_vs_fixed --keep /tmp/launch2 bench/archive/cpu/launches-2
    python -m bench.auto_vs_fixed --smoke      # seeded normal blocks, nothing read or written
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import re
import shutil
import sys
from pathlib import Path

import numpy as np

from bench import harness
from specsweep.read.replay_looks import study_blocks
from specsweep.verdicts import launches as launches_mod, spending, stats

NAMES = ("K=3 vs base", "K=7 vs base", "K=7 vs K=3")
ANSWERS = (stats.FASTER, stats.SLOWER, stats.EQUIVALENT)
BUDGET = 20       # the default sweep.max_repeats of `auto`; --budget replays another
LAUNCH_FIGURES = ("launches", "weighted_mean_ratio", "cochran_q", "q_p", "launch_sd", "launch_sd_ci", "mean_within_sd",
                  "intervals_holding_mean", "intervals", "carried_holding_mean", "carried_others_holding_mean",
                  "carried_width_ratio")
BLOCKS = "blocks.json"   # a kept study's blocks (--keep), where its request rows are not kept


def campaign_walls(root: Path) -> dict[str, float]:
    out = {}
    for line in (root / "campaign.log").read_text().splitlines():
        m = re.match(r"(\w+) end \S+ rc=(\d+) wall_s=([\d.]+)", line)
        if m and m.group(2) == "0":
            out[m.group(1)] = float(m.group(3))
    return out


def verdicts(study: Path) -> dict[str, dict]:
    """Each comparison's verdict, ratio, interval and answered repeat, as the study's tables say."""
    out = {}
    for r in csv.DictReader(open(study / "summary.csv")):
        if r["method"] != "none" and r["pair"] != "A/A":
            out[f"K={r['num_speculative_tokens']} vs base"] = row(r, "repeats")
    for r in csv.DictReader(open(study / "k_comparison.csv")):
        out[f"K={r['k_a']} vs K={r['k_b']}"] = row(r, "repeats_a")
    return out


def blocks_of(study: Path) -> dict[str, list[float]]:
    """A study's repeat blocks per comparison: from its request rows, or from the blocks.json `--keep` wrote."""
    kept = study / BLOCKS
    return json.loads(kept.read_text()) if kept.exists() else study_blocks(study.parent, BUDGET)


def keep(src: Path, dest: Path) -> None:
    """A session's campaign kept small: its campaign.log, and per finished study its tables and blocks.json."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "campaign.log", dest / "campaign.log")
    for name in campaign_walls(src):
        study, out = src / name / "default", dest / name / "default"
        out.mkdir(parents=True, exist_ok=True)
        for table in ("summary.csv", "k_comparison.csv"):
            shutil.copy(study / table, out / table)
        (out / BLOCKS).write_text(json.dumps(blocks_of(study)) + "\n")
    print("kept", dest)


def carry(path: Path) -> dict[str, float]:
    """Each comparison's launch SD over all the launches of a `--session` run's output."""
    return {n: r["launch_sd"] for n, r in json.loads(path.read_text())["sessions"]["all"].items()}


def session_arg(text: str) -> tuple[Path, str]:
    """`DIR` or `DIR:ARM`: a campaign folder and the letter of its fixed studies (b unless named)."""
    root, _, arm = text.rpartition(":") if ":" in text else (text, "", "b")
    return Path(root), arm or "b"


def sessions(roots: list[tuple[Path, str]], where: dict | None = None) -> dict:
    """The fixed studies of each session's campaign (its folder and their letter) as launches (module doc): all
    together, and per session, named by their folders as given; each read from `where[folder]` where given (an
    unpacked copy)."""
    blocks, intervals, per = {}, {c: {} for c in NAMES}, []
    for i, (root, arm) in enumerate(roots, 1):
        src = (where or {}).get(root, root)
        names = [n for n in campaign_walls(src) if n.startswith(arm)]
        if len(names) < 2:
            sys.exit(f"auto_vs_fixed: {root}: {len(names)} finished fixed study ({arm}1, {arm}2, ...): a session's "
                     "launch figures need two or more")
        for n in names:
            table = verdicts(src / n / "default")
            blocks[f"s{i}-{n}"] = blocks_of(src / n / "default")
            for c in NAMES:
                intervals[c][f"s{i}-{n}"] = [*table[c]["ci"], table[c]["ratio"]]
        per.append((str(root) if arm == "b" else f"{root}:{arm}", [f"s{i}-{n}" for n in names]))
    return {"all": launches(blocks, intervals),
            "per_session": {root: launches({n: blocks[n] for n in ns}, {c: {n: intervals[c][n] for n in ns}
                                                                       for c in NAMES}) for root, ns in per}}


def row(r: dict, repeats: str) -> dict:
    answered = r.get("answered_repeat") or ""
    return {"verdict": r["verdict"], "ratio": float(r["speedup_e2e_geomean"]),
            "ci": [float(r["speedup_e2e_ci_low"]), float(r["speedup_e2e_ci_high"])],
            "repeats": int(float(r[repeats])), "answered_repeat": int(float(answered)) if answered else None}


def t_interval(blocks) -> tuple[float, float]:
    return spending.interval(list(blocks), 0.05)


def pooled(blocks: dict[str, dict[str, list[float]]]) -> dict[str, dict]:
    out = {}
    for name in NAMES:
        allb = [b for s in blocks.values() for b in s.get(name, [])]
        low, high = t_interval(allb)
        ci = (math.exp(low), math.exp(high))
        out[name] = {"blocks": len(allb), "ratio": math.exp(float(np.mean(allb))), "ci": list(ci),
                     "verdict": stats.verdict(*ci, at_budget=True)}
    return out


def block_sd(blocks: dict[str, dict[str, list[float]]]) -> dict[str, dict]:
    """Per comparison: the blocks' SD within a study (log scale), pooled over these studies, and its degrees of
    freedom (each study's blocks less one)."""
    out = {}
    for name in NAMES:
        runs = [np.asarray(s[name]) for s in blocks.values() if len(s.get(name, [])) > 1]
        df = sum(len(r) - 1 for r in runs)
        ss = sum(float(((r - r.mean()) ** 2).sum()) for r in runs)
        out[name] = {"sd": math.sqrt(ss / df) if df else None, "df": df}
    return out


def contradicts(v: str, pool: dict) -> bool:
    """An answered verdict that the pooled one contradicts: the other direction, or `equivalent` where the pooled
    interval lies wholly outside ±5%."""
    pv, (lo, hi) = pool["verdict"], pool["ci"]
    if v in (stats.FASTER, stats.SLOWER) and pv in (stats.FASTER, stats.SLOWER):
        return v != pv
    if v == stats.EQUIVALENT:
        return lo > 1.05 or hi < 1 / 1.05
    return False


def replay(blocks: dict[str, dict[str, list[float]]], studies: int, seed: int, budget: int = BUDGET,
           launch_sd: dict[str, float] | None = None) -> dict:
    """The share of `studies` drawn from the recorded blocks (module doc) that the planned rule of `budget` answers
    in all three comparisons, and the mean answering repeat of the last one answered; with `launch_sd` (per
    comparison, `--carry`) each interval carrying it, as `sweep.launch_sd` makes a study's."""
    rng = np.random.Generator(np.random.PCG64(seed))
    names = sorted(blocks)
    all_three, last = 0, []
    per = {n: 0 for n in NAMES}
    for _ in range(studies):
        s = blocks[names[rng.integers(len(names))]]
        answered = []
        for name in NAMES:
            rec = spending.comparison(list(rng.choice(s[name], budget)), budget,
                                      launch_sd=(launch_sd or {}).get(name, 0.0))
            ok = rec["verdict"] in ANSWERS and rec["answered_at"] is not None
            per[name] += ok
            answered.append(rec["answered_at"] if ok else None)
        if all(a is not None for a in answered):
            all_three += 1
            last.append(max(answered))
    return {"studies": studies, "seed": seed, "budget": budget, "plan": list(spending.plan(budget)),
            "all_three_answered": all_three / studies, "answered": {n: per[n] / studies for n in NAMES},
            "mean_repeat_all_answered": float(np.mean(last)) if last else None,
            "recorded_studies": len(names), "launch_sd": launch_sd}


def launches(blocks: dict[str, dict[str, list[float]]], intervals: dict[str, dict[str, list[float]]]) -> dict:
    """Per comparison: Cochran's Q over the launches' block means (weights n / s^2), the launch SD with its
    Q-profile 95% interval (verdicts.launches.dersimonian_laird), how many launches' own intervals (as their tables
    report them) hold the precision-weighted mean, and how many hold it once they carry a launch SD as
    `sweep.launch_sd: recorded` would (`carried`): from the launches before each (in the order given, 4 or more;
    none before; `carried_width_ratio`: the median of their widths over the launches' own, log scale) and, as a
    study with every other launch recorded would, from all the others (`carried_others`)."""
    out = {}
    for name in NAMES:
        order = [study for study, s in blocks.items() if launches_mod.launch_mean(s.get(name, []))]
        got = [launches_mod.launch_mean(blocks[study][name]) for study in order]
        dl = launches_mod.dersimonian_laird([g[0] for g in got], [g[1] for g in got])
        target = math.exp(dl["weighted_mean"])
        held = [ci[0] <= target <= ci[1] for ci in intervals[name].values()]    # [low, high, the table's ratio]

        widths = []

        def holds(study: str, others: list[int]) -> bool:
            lo, hi, ratio = intervals[name][study]
            tau = 0.0
            if len(others) >= launches_mod.MIN_LAUNCHES:
                tau = launches_mod.dersimonian_laird([got[j][0] for j in others],
                                                     [got[j][1] for j in others])["launch_sd"]
            wlo, whi = launches_mod.widen_ratio(lo, hi, ratio, tau)
            widths.append(math.log(whi / wlo) / math.log(hi / lo))
            return wlo <= target <= whi

        scored = [s for s in order if s in intervals[name]]
        before = [holds(s, list(range(order.index(s)))) for s in scored]
        width_before = float(np.median(widths))
        others = [holds(s, [j for j in range(len(order)) if j != order.index(s)]) for s in scored]
        out[name] = {"launches": dl["launches"], "weighted_mean_ratio": target, "cochran_q": dl["cochran_q"],
                     "df": dl["df"], "q_p": dl["q_p"], "launch_sd": dl["launch_sd"], "launch_sd_ci": dl["launch_sd_ci"],
                     "mean_within_sd": float(np.mean([math.sqrt(g[1]) for g in got])),
                     "intervals_holding_mean": int(sum(held)), "intervals": len(held),
                     "carried_holding_mean": int(sum(before)), "carried_others_holding_mean": int(sum(others)),
                     "carried_width_ratio": width_before}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("campaign", nargs="?", type=Path, help="the campaign's folder: a1, b1, ... and campaign.log")
    ap.add_argument("--replays", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=20261206)
    ap.add_argument("--budget", type=int, action="append", help="replay these budgets too (default: 20 only)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--carry", type=Path, help="replay once more with each interval carrying the launch SDs of this "
                    "sessions' output (its `all` launches), as sweep.launch_sd: recorded would")
    ap.add_argument("--session", type=session_arg, action="append", metavar="DIR[:ARM]",
                    help="another session's campaign of fixed studies (ARM: their letter, b unless named)")
    ap.add_argument("--keep", type=Path, nargs=2, metavar=("SRC", "DEST"), help="keep a session's campaign small")
    ap.add_argument("--auto", default="a", metavar="ARM", help="the auto studies' letter (a: a1, a2, ...)")
    ap.add_argument("--fixed", default="b", metavar="ARM", help="the fixed studies' letter (b); a campaign of three "
                    "arms is read twice, once against each fixed arm")
    ap.add_argument("--smoke", action="store_true", help="seeded normal blocks, nothing read or written")
    args = ap.parse_args(argv)
    if args.keep:
        keep(*args.keep)
        return
    if args.smoke:
        rng = np.random.default_rng(54)
        blocks = {f"s{i}": {n: list(math.log(e) + 0.16 * rng.standard_normal(10)) for n, e in
                            zip(NAMES, (1.5, 1.75, 1.17))} for i in range(4)}
        print(json.dumps({"replay": replay(blocks, 200, args.seed)}))
        print("nothing written")
        return
    if args.campaign is None or not (args.campaign / "campaign.log").exists():
        sys.exit(f"auto_vs_fixed: {args.campaign}: no campaign.log there: name the campaign's folder "
                 "(bench/archive/cpu/auto-vs-fixed/campaign.sh DIR), or --smoke")
    with contextlib.ExitStack() as stack:     # a packed campaign (harness.PACK) is read from a temporary copy
        where = {d: stack.enter_context(harness.unpacked(d)) for d in [args.campaign, *(d for d, _ in args.session or [])]}
        report(args, argv, where)


def report(args, argv: list[str] | None, where: dict) -> None:
    """The live, replayed and launch figures of args.campaign (with args.session's launches, where given), each
    campaign read from where[folder]."""
    if args.session:
        out = {"sessions": sessions([(args.campaign, args.fixed), *args.session], where),
               "command": "python -m bench.auto_vs_fixed " + " ".join(argv if argv is not None else sys.argv[1:])}
        for scope, rec in [("all", out["sessions"]["all"]), *out["sessions"]["per_session"].items()]:
            for name, r in rec.items():
                print(scope, name, json.dumps({k: r[k] for k in LAUNCH_FIGURES}))
        if args.out:
            args.out.write_text(json.dumps(out, indent=1) + "\n")
            print("wrote", args.out)
        return
    campaign = where[args.campaign]
    walls = {n: w for n, w in campaign_walls(campaign).items() if n[0] in (args.auto, args.fixed)}
    studies = {n: campaign / n / "default" for n in sorted(walls, key=lambda s: (int(s[1:]), s[0]))}
    table = {n: verdicts(d) for n, d in studies.items()}
    blocks = {n: blocks_of(d) for n, d in studies.items()}
    pool = pooled(blocks)
    a = [n for n in studies if n.startswith(args.auto)]
    b = [n for n in studies if n.startswith(args.fixed)]
    answered = [n for n in a if all(table[n][c]["verdict"] in ANSWERS for c in NAMES)]
    bad = [(n, c, table[n][c]["verdict"]) for n in studies for c in NAMES if contradicts(table[n][c]["verdict"], pool[c])]
    wa, wb = np.asarray([walls[n] for n in a]), np.asarray([walls[n] for n in b])
    intervals = {c: {n: [*table[n][c]["ci"], table[n][c]["ratio"]] for n in studies} for c in NAMES}
    out = {"studies": {n: {"wall_s": walls[n], "comparisons": table[n],
                           "blocks": {c: len(blocks[n].get(c, [])) for c in NAMES}} for n in studies},
           "live": {"pairs": min(len(a), len(b)), "auto_answered_all_three": len(answered), "auto_studies": len(a),
                    "wall_median_ratio": float(np.median(wa) / np.median(wb)),
                    "wall_p95_ratio": float(np.percentile(wa, 95) / np.percentile(wb, 95)),
                    "wall_median_s": {"auto": float(np.median(wa)), "fixed": float(np.median(wb))},
                    "wall_p95_s": {"auto": float(np.percentile(wa, 95)), "fixed": float(np.percentile(wb, 95))},
                    "contradictions": bad},
           "pooled": pool,
           "block_sd": {"auto": block_sd({n: blocks[n] for n in a}), "fixed": block_sd({n: blocks[n] for n in b})},
           "replay": replay(blocks, args.replays, args.seed),
           "replay_budgets": [replay(blocks, args.replays, args.seed, n) for n in args.budget or [] if n != BUDGET],
           "replay_carried": replay(blocks, args.replays, args.seed, BUDGET, carry(args.carry)) if args.carry else None,
           "launches": {"all": launches(blocks, intervals),
                        "fixed": launches({n: blocks[n] for n in b}, {c: {n: intervals[c][n] for n in b} for c in NAMES}),
                        "auto": launches({n: blocks[n] for n in a}, {c: {n: intervals[c][n] for n in a} for c in NAMES})},
           "command": "python -m bench.auto_vs_fixed " + " ".join(argv if argv is not None else sys.argv[1:])}
    print(json.dumps({k: out[k] for k in ("live", "pooled", "block_sd", "replay", "replay_budgets")}, indent=1))
    for name, rec in out["launches"]["all"].items():
        print(name, json.dumps({k: rec[k] for k in LAUNCH_FIGURES}))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print("wrote", args.out)


if __name__ == "__main__":
    main()
