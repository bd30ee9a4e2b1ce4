# Helpers shared by the rules: every path comes from the library's grid, never rebuilt here.
import json
from collections import Counter
from pathlib import Path

from snakemake.exceptions import WorkflowError


def server_cells_of(study):
    return [sid for sid, cell in GRID.servers.items() if cell.study == study]


def diagnoses_of(study):
    """What the summary and pages read of the low-acceptance diagnosis (diagnose.smk): each diagnosed server cell's
    acceptance record (a checkpoint), and its diagnosis.json where that record asks for one. The group's job comes
    first: it writes the record (acceptance_checkpoint.record_acceptance), and the checkpoint then runs no job."""
    out = []
    for sid in server_cells_of(study):
        if GRID.diagnosed(sid):
            after_group(study, sid)
            record = checkpoints.acceptance.get(study=study, server=sid, settings=GRID.acceptance_tag(sid)).output[0]
            needed = json.loads(Path(record).read_text())["needed"]  # acceptance_checkpoint.acceptance's record
            out += [record, str(GRID.diagnosis_path(sid))] if needed else [record]
    return out


RUN_MARKERS = {}


def run_marker(lead):
    """The job this run asks of a group (its lead's id), or None when its cells are all finished: looked at once per
    run. Each finished checkpoint makes Snakemake re-evaluate every server cell's inputs, also those whose jobs are
    still running; a fresh look would name a running job's unfinished cells as a new job, and on a GPU host it
    started (a second server for the same cell, on the other GPU: measured on two H200s)."""
    if lead not in RUN_MARKERS:
        RUN_MARKERS[lead] = schedule.run_marker(GRID, lead).stem if schedule.group_pending(GRID, lead) else None
    return RUN_MARKERS[lead]


def after_group(study, sid):
    """While any bench cell of sid's group is unfinished, ask for the group's job (a checkpoint) first: the input
    function calling this is evaluated again once that job has run."""
    lead = schedule.group_of(GRID, sid)
    if run_marker(lead):
        checkpoints.serve_and_bench.get(study=study, server=lead, todo=run_marker(lead))


def cell_metrics(wildcards):
    """The metrics.json of a server cell's bench cells, the paths a finished grid gives, after its group's job; a
    repeat an `auto` group did not need, its not-needed record (repeats.done_path)."""
    after_group(wildcards.study, wildcards.server)
    return [str(repeats.done_path(GRID, wildcards.server, bid)) for bid in GRID.benches[wildcards.server]]


def pending_line(lead):
    """The group job's message: how many bench cells it has to run, and of which members (`specsweep cells` names
    them, and the job's log each as it finishes)."""
    counts = Counter(sid for sid, _ in schedule.group_pending(GRID, lead))
    total = counts.total()
    return f"{total} bench cell{'' if total == 1 else 's'} to run: " + ", ".join(
        f"{n} of {sid}" for sid, n in counts.items()
    )


def serve_inputs(wildcards):
    members = schedule.group(GRID, wildcards.server)
    inputs = sorted({GRID.dataset_file(b.spec["dataset"]) for sid in members for b in GRID.benches[sid].values()})
    return inputs + [str(GRID.study_files(wildcards.study).env)]  # env.json comes after the pair is built


def group_runtime(lead):
    """A group's time limit on a cluster: its members' together, since they take turns in one job."""
    return sum(GRID.servers[sid].run["job"]["runtime_min"] for sid in schedule.group(GRID, lead))


def group_mem_mb(lead):
    """A group's host memory on a cluster: the most one member asks for, or what its members need up together."""
    return residency.group_mem_mb(GRID, schedule.group(GRID, lead))


def dataset_cfg(wildcards):
    for cells in GRID.benches.values():
        for cell in cells.values():
            ds = cell.spec["dataset"]
            if GRID.dataset_file(ds) == str(layout.dataset_file(RESULTS, wildcards.name)):
                return ds
    raise ValueError(f"no dataset in the grid writes {wildcards.name}.jsonl")


def all_cores(sid):
    """A CPU server cell's threads: every core. --cores when given (workflow.cores, documented under the rules'
    threads, raises WorkflowError without it: tests/test_snakemake_interface.py); a cluster profile gives none,
    so then the cell's server.job.cpus, else this host's count (set job.cpus when compute nodes differ from it)."""
    try:
        return workflow.cores
    except WorkflowError:
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
    settings=r"[0-9a-f]+",
