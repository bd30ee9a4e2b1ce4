"""Per cell of each kept default study: its repeats' median pass wall, their spread, and its paired e2e speedup.

    python3 passes.py /tmp/rr/d1 /tmp/rr/d2 ...     (folders holding results/default/ and uptime.txt; runs.txt here)
"""
import csv
import glob
import json
import math
import statistics
import sys

for d in sys.argv[1:]:
    out = []
    for r in csv.DictReader(open(f"{d}/results/default/summary.csv")):
        sid = r["server_cell"]
        walls = [json.load(open(f))["wall_s"] for f in sorted(glob.glob(f"{d}/results/default/{sid}/*/metrics.json"))]
        cv = statistics.pstdev(walls) / statistics.mean(walls)
        ci = (float(r["speedup_e2e_ci_low"]), float(r["speedup_e2e_ci_high"])) if r["speedup_e2e_ci_low"] else None
        line = f"K{r['num_speculative_tokens'] or 0}: pass {statistics.median(walls):.2f}s cv {cv:.2f} " \
               f"max/min {max(walls) / min(walls):.1f}"
        if ci:
            line += (f" e2e {float(r['speedup_e2e_geomean']):.2f} [{ci[0]:.2f},{ci[1]:.2f}] "
                     f"w {math.log(ci[1] / ci[0]):.2f} {r['verdict']}")
        out.append(line)
    k = list(csv.DictReader(open(f"{d}/results/default/k_comparison.csv")))
    print(d.split("/")[-1], open(f"{d}/uptime.txt").read().split("\n")[1], "|", " | ".join(out), "|",
          k[0]["statement"] if k else "")
