# Helpers shared by the rules: every path comes from the library's grid, never rebuilt here.


def server_cells_of(study):
    return [sid for sid, cell in GRID.servers.items() if cell.study == study]


RUN_MARKERS = {}


def run_marker(sid):
    """The server job this run asks of a server cell, or None when its cells are all finished: looked at once
    per run. Each finished checkpoint makes Snakemake re-evaluate every server cell's inputs, also those whose
    jobs are still running; a fresh look would name a running job's unfinished cells as a new job, and on a
    GPU host it started (a second server for the same cell, on the other GPU: measured on two H200s)."""
    if sid not in RUN_MARKERS:
        RUN_MARKERS[sid] = GRID.run_marker(sid).stem if GRID.pending(sid) else None
    return RUN_MARKERS[sid]


def cell_metrics(wildcards):
    """The metrics.json of a server cell's bench cells. While any is unfinished, its server job (a checkpoint)
    is asked for first; once that has run, Snakemake re-evaluates this and gets the paths a finished grid gives."""
    sid = wildcards.server
    if run_marker(sid):
        checkpoints.serve_and_bench.get(study=wildcards.study, server=sid, todo=run_marker(sid))
    return [str(GRID.metrics_path(sid, bid)) for bid in GRID.benches[sid]]


def serve_inputs(wildcards):
    sid = wildcards.server
    inputs = sorted({GRID.dataset_file(b.spec["dataset"]) for b in GRID.benches[sid].values()})
    base = GRID.baseline_of.get(sid)
    if base:   # a speculative cell is compared with its matched baseline, so the baseline runs first
        inputs.append(str(GRID.cells_done(base)))
    return inputs + [f"{RESULTS}/{wildcards.study}/env.json"]   # env.json comes after the pair is built


def dataset_cfg(wildcards):
    for cells in GRID.benches.values():
        for cell in cells.values():
            ds = cell.spec["dataset"]
            if GRID.dataset_file(ds) == f"{RESULTS}/datasets/{wildcards.name}.jsonl":
                return ds
    raise ValueError(f"no dataset in the grid writes {wildcards.name}.jsonl")


def all_cores(sid):
    """A CPU server cell's threads: every core. --cores when given; a cluster profile gives none, so then the
    cell's server.job.cpus, else this host's count (set job.cpus when compute nodes differ from it)."""
    if workflow._cores is not None:   # the property workflow.cores raises when unset
        return workflow.cores
    return GRID.servers[sid].run["job"]["cpus"] or os.cpu_count()


def slurm_extra(sid):
    """SIGTERM ahead of the time limit, so the cell stops its server and keeps its finished bench cells; a CPU
    cell holds its node alone, as it holds every core in a local run."""
    cell = GRID.servers[sid]
    extra = f"--signal=TERM@{cell.run['job']['signal_before_s']}"
    return extra if cell.gpus else extra + " --exclusive"


def tiny_models_needed():
    return any(GRID.configs[sid]["pair"]["built_by_workflow"] for sid in GRID.servers)


def study_labels(study):
    """The report's labels of a study: its pairs, datasets and thinking modes."""
    benches = [b.spec for sid in server_cells_of(study) for b in GRID.benches[sid].values()]
    pairs = {GRID.servers[sid].pair["name"] for sid in server_cells_of(study) if not GRID.servers[sid].is_baseline}
    return {"study": study, "pair": " ".join(sorted(pairs)) or "-",
            "dataset": " ".join(sorted({b["dataset"]["name"] for b in benches})),
            "thinking": " ".join(sorted({str(b["thinking"]).lower() for b in benches}))}


def plot_labels(wildcards):
    return {**study_labels(wildcards.study), "figure": wildcards.name}


def launch_labels(wildcards):
    """One server cell: its pair, method and K, and what its bench cells ran."""
    cell = GRID.servers[wildcards.server]
    benches = [b.spec for b in GRID.benches[wildcards.server].values()]
    return {"study": wildcards.study, "pair": cell.pair["name"], "method": cell.spec["method"],
            "K": "-" if cell.is_baseline else str(cell.spec["num_speculative_tokens"]),
            "dataset": " ".join(sorted({b["dataset"]["name"] for b in benches})),
            "thinking": " ".join(sorted({str(b["thinking"]).lower() for b in benches}))}


wildcard_constraints:
    study=r"[A-Za-z0-9._-]+",
    server=r"[A-Za-z0-9._-]+",
