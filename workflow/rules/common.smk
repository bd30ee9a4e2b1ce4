# Helpers shared by the rules: every path comes from the library's grid, never rebuilt here.


def server_cells_of(study):
    return [sid for sid, cell in GRID.servers.items() if cell.study == study]


def cell_metrics(sid, bids):
    """The metrics.json of these bench cells. While any is unfinished, its server job (a checkpoint) is asked
    for first; once it has run, Snakemake re-evaluates this and gets the same paths a finished grid gives."""
    if any(bid in GRID.pending(sid) for bid in bids):
        marker = GRID.run_marker(sid)
        checkpoints.serve_and_bench.get(study=GRID.servers[sid].study, server=sid, todo=marker.stem)
    return [str(GRID.metrics_path(sid, bid)) for bid in bids]


def study_metrics(wildcards):
    return [m for sid in server_cells_of(wildcards.study) for m in cell_metrics(sid, list(GRID.benches[sid]))]


def tiny_models_needed():
    return any(GRID.configs[sid]["pair"]["built_by_workflow"] for sid in GRID.servers)


wildcard_constraints:
    study=r"[A-Za-z0-9._-]+",
    server=r"[A-Za-z0-9._-]+",
