"""How long the first N members of a study's group take to be ready when started at once (the runner starts them
one after another: runner.Members.start). Each member's ready_s and when the last was up; every server started here
is stopped before it returns.

    PYTHONPATH=src .venv/bin/python bench/start_side_by_side.py 2 --overrides "pair.target=... pair.drafter=..."
"""
from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

from specsweep.backends.vllm import session as vllm
from specsweep.cells import expand
from specsweep.config import compose_jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("members", type=int)
    ap.add_argument("--overrides", default="", help="Hydra overrides of the study (pair, server, sweep)")
    args = ap.parse_args()
    results = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    grid = expand(compose_jobs([f"results_dir={results}", "tracking=off", *args.overrides.split()]))
    sids = list(grid.servers)[: args.members]
    servers, ready, t0 = {}, {}, time.monotonic()

    def start(sid):
        servers[sid] = vllm.server_for(grid, sid, results / "logs" / sid)
        servers[sid].__enter__()
        ready[sid] = round(time.monotonic() - t0, 1)
    threads = [threading.Thread(target=start, args=(sid,)) for sid in sids]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps({"members": len(sids), "ready_s": ready, "all_up_s": max(ready.values(), default=None)}))
    finally:
        for srv in servers.values():
            srv.__exit__(None, None, None)


if __name__ == "__main__":
    main()
