# Helpers shared by the rules: every path comes from the library's grid, never rebuilt here.


def server_cells_of(study):
    return [sid for sid, cell in GRID.servers.items() if cell.study == study]


def metrics_inputs(wildcards):
    """Each finished cell's metrics.json, or the marker of the server job that will write it."""
    return sorted({str(GRID.metrics_or_producer(sid, bid)) for sid, bid in GRID.cells_of_study(wildcards.study)})


def tiny_models_needed():
    return any(GRID.configs[sid]["pair"]["built_by_workflow"] for sid in GRID.servers)


wildcard_constraints:
    study=r"[A-Za-z0-9._-]+",
    server=r"[A-Za-z0-9._-]+",
