# Helpers shared by the rules: every path comes from the library's grid, never rebuilt here.
import json
import threading
from pathlib import Path


def server_cells_of(study):
    return [sid for sid, cell in GRID.servers.items() if cell.study == study]


def diagnoses_of(study):
    """What the summary and pages read of the low-acceptance diagnosis (diagnose.smk): each diagnosed server cell's
    acceptance record (a checkpoint), and its diagnosis.json where that record asks for one."""
    out = []
    for sid in server_cells_of(study):
        if GRID.diagnosed(sid):
            record = checkpoints.acceptance.get(study=study, server=sid).output[0]
            needed = json.loads(Path(record).read_text())["needed"]  # counterfactuals.acceptance's record
            out += [record, str(GRID.diagnosis_path(sid))] if needed else [record]
    return out


RUN_MARKERS = {}


def cell_rounds(sid):
    """The rounds a server cell runs in, one job each: [None] (the whole cell in one job) unless sweep.rounds > 1."""
    return [None] if GRID.rounds(sid) == 1 else list(range(GRID.rounds(sid)))


def run_marker(sid, rnd=None):
    """The server job this run asks of a server cell (or of its round rnd), or None when its cells are all
    finished: looked at once per run. Each finished checkpoint makes Snakemake re-evaluate every server cell's
    inputs, also those whose jobs are still running; a fresh look would name a running job's unfinished cells as
    a new job, and on a GPU host it started (a second server for the same cell, on the other GPU: measured on two
    H200s)."""
    if (sid, rnd) not in RUN_MARKERS:
        RUN_MARKERS[sid, rnd] = GRID.run_marker(sid, rnd).stem if GRID.pending(sid, rnd) else None
    return RUN_MARKERS[sid, rnd]


def cell_metrics(wildcards):
    """The metrics.json of a server cell's bench cells. While any is unfinished, its server job (a checkpoint;
    one per round with sweep.rounds > 1) is asked for first; once that has run, Snakemake re-evaluates this and
    gets the paths a finished grid gives."""
    sid = wildcards.server
    for rnd in cell_rounds(sid):
        if run_marker(sid, rnd):
            checkpoints.serve_and_bench.get(study=wildcards.study, server=sid, todo=run_marker(sid, rnd))
    return [str(GRID.metrics_path(sid, bid)) for bid in GRID.benches[sid]]


def previous_launch(sid, rnd):
    """The run marker of the launch before round rnd of a server cell in its group's interleaved order
    (GRID.round_order: round i of each cell after round i of the one before it, round i+1 after round i of the
    last), skipping launches with nothing left to run; None for the first."""
    order = GRID.round_order(sid)
    for s, r in reversed(order[: order.index((sid, rnd))]):
        r = None if GRID.rounds(s) == 1 else r
        if run_marker(s, r):
            return str(layout.run_marker(GRID.server_dir(s), run_marker(s, r), None))
    return None


def serve_inputs(wildcards):
    sid = wildcards.server
    inputs = sorted({GRID.dataset_file(b.spec["dataset"]) for b in GRID.benches[sid].values()})
    rnd = GRID.marker_round(wildcards.todo)
    base = GRID.baseline_of.get(sid)
    if rnd is not None:  # a round: after the launch before it (its baseline's same round comes earlier)
        before = previous_launch(sid, rnd)
        inputs += [before] if before else []
    elif base:  # a speculative cell is compared with its matched baseline, so the baseline runs first
        inputs.append(str(GRID.cells_done(base)))
    return inputs + [str(GRID.study_files(wildcards.study).env)]  # env.json comes after the pair is built


def dataset_cfg(wildcards):
    for cells in GRID.benches.values():
        for cell in cells.values():
            ds = cell.spec["dataset"]
            if GRID.dataset_file(ds) == str(layout.dataset_file(RESULTS, wildcards.name)):
                return ds
    raise ValueError(f"no dataset in the grid writes {wildcards.name}.jsonl")


def all_cores(sid):
    """A CPU server cell's threads: every core. --cores when given; a cluster profile gives none, so then the
    cell's server.job.cpus, else this host's count (set job.cpus when compute nodes differ from it)."""
    if workflow._cores is not None:  # the property workflow.cores raises when unset
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
    return {
        "study": study,
        "pair": " ".join(sorted(pairs)) or "-",
        "dataset": " ".join(sorted({b["dataset"]["name"] for b in benches})),
        "thinking": " ".join(sorted({str(b["thinking"]).lower() for b in benches})),
    }


def plot_labels(wildcards):
    return {**study_labels(wildcards.study), "figure": wildcards.name}


def launch_labels(wildcards):
    """One server cell: its pair, method and K, and what its bench cells ran."""
    cell = GRID.servers[wildcards.server]
    benches = [b.spec for b in GRID.benches[wildcards.server].values()]
    return {
        "study": wildcards.study,
        "pair": cell.pair["name"],
        "method": cell.spec["method"],
        "K": "-" if cell.is_baseline else str(cell.spec["num_speculative_tokens"]),
        "dataset": " ".join(sorted({b["dataset"]["name"] for b in benches})),
        "thinking": " ".join(sorted({str(b["thinking"]).lower() for b in benches})),
    }


wildcard_constraints:
    study=r"[A-Za-z0-9._-]+",
    server=r"[A-Za-z0-9._-]+",


def cancel_timers():
    """Snakemake's job-rate limiter re-checks the schedule 1 s after each scheduling round with a
    threading.Timer, and Python waits for pending timers at exit: up to 1 s of every run that ran a job.
    Once the workflow has ended they have nothing left to check."""
    for thread in threading.enumerate():
        if isinstance(thread, threading.Timer):
            thread.cancel()
