"""(Run after campaign.sh and campaign2.sh: python extract.py OUT; after campaign.sh /tmp/vp: python extract.py OUT /tmp/vp.) Per study of the campaign: each comparison's verdict, interval, repeats, looks and why it stopped; the A/A
verdict; wall time and load average from campaign.log. Writes one small JSON per study to argv[1]."""
import csv
import json
import re
import sys
from pathlib import Path
out = Path(sys.argv[1])
runs = sys.argv[2] if len(sys.argv) > 2 else "/tmp/vw"     # the campaign's results dirs and campaign.log
out.mkdir(parents=True, exist_ok=True)
log = {}
for line in open(f"{runs}/campaign.log"):
    p = line.split()
    if len(p) > 2 and p[1] in ("start", "end") and not p[0].endswith("-finish"):
        log.setdefault(p[0], {})[p[1]] = {"at": p[2], **({"rc": int(p[3][3:]), "wall_s": int(p[4][7:]),
                                          "loadavg": [float(x) for x in p[5:8]]} if p[1] == "end" else
                                          {"loadavg": [float(x) for x in p[3:6]]})}
for name in sorted(log):
    d = Path(f"{runs}/{name}/default")
    if not (d / "summary.csv").exists():
        continue
    rows = list(csv.DictReader(open(d / "summary.csv")))
    ks = list(csv.DictReader(open(d / "k_comparison.csv")))
    comps = []
    for r in rows:
        if r["method"] != "none" or r["pair"] == "A/A":
            comps.append({"comparison": ("A/A" if r["pair"] == "A/A" else f"K={r['num_speculative_tokens']}") + " vs baseline",
                          "verdict": r["verdict"], "speedup": float(r["speedup_e2e_geomean"]),
                          "ci": [float(r["speedup_e2e_ci_low"]), float(r["speedup_e2e_ci_high"])],
                          "repeats": int(float(r["repeats"])), "looks": int(float(r["looks"])), "stopped": r["stopped"],
                          "answered_at": int(m.group(1)) if (m := re.match(r"answered at repeat (\d+)", r["stopped"])) else None})
    for k in ks:
        comps.append({"comparison": f"K={k['k_a']} vs K={k['k_b']}", "verdict": k["verdict"],
                      "speedup": float(k["speedup_e2e_geomean"]),
                      "ci": [float(k["speedup_e2e_ci_low"]), float(k["speedup_e2e_ci_high"])],
                      "repeats": int(float(k["repeats_a"])), "looks": int(float(k["looks"])), "stopped": k["stopped"],
                      "answered_at": int(m.group(1)) if (m := re.match(r"answered at repeat (\d+)", k["stopped"])) else None})
    looks = next(d.glob("*/looks.json"), None)
    group = json.loads(looks.read_text()) if looks else None
    rec = {"study": name, "arm": "auto + A/A" if name.startswith("a") else "10 repeats", "results_dir": str(d.parent),
           "group_repeats": group["repeats"] if group else max(c["repeats"] for c in comps),
           "group_stopped": group["why"] if group else "fixed", "comparisons": comps,
           "aa_check": rows[0].get("aa_check") or None, **log[name]}
    (out / f"{name}.json").write_text(json.dumps(rec, indent=1) + "\n")
    print(name, rec["group_repeats"], rec["group_stopped"], log[name].get("end", {}).get("wall_s"),
          [(c["comparison"], c["verdict"], round(c["speedup"], 2), [round(x, 2) for x in c["ci"]], c["repeats"], c["stopped"]) for c in comps])
