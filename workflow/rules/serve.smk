# One job per server cell (per round of it with sweep.rounds > 1: common.smk's previous_launch orders the
# rounds of a group's cells interleaved): start vLLM, run its unfinished bench cells, stop vLLM. Its output is a marker
# named after the set of bench cells it still had to run; finished cells are never declared outputs, so a
# failed job cannot make Snakemake delete them. It is a checkpoint: `server_cell_done` asks for it only
# while cells are unfinished, and afterwards reads the same metrics.json paths a finished grid gives, so a
# rerun runs exactly what is missing. A CPU server takes every core, so CPU cells never run side by side
# and skew each other's timings; GPU cells run side by side on disjoint GPUs.


checkpoint serve_and_bench:
    input:
        serve_inputs,
    output:
        layout.run_marker(layout.server_dir(RESULTS, "{study}", "{server}"), "{todo}"),
    log:
        layout.log(layout.server_dir(RESULTS, "{study}", "{server}"), "job-{todo}"),
    threads: lambda w: 1 if GRID.servers[w.server].gpus else all_cores(w.server)
    resources:
        gpu=lambda w: GRID.servers[w.server].gpus,
        # what a cluster executor (profiles/slurm) asks for; a local run ignores them
        gpu_model=lambda w: GRID.servers[w.server].run["job"]["gpu_model"] or "",
        runtime=lambda w: GRID.servers[w.server].run["job"]["runtime_min"],
        mem_mb=lambda w: GRID.servers[w.server].run["job"]["mem_mb"],
        slurm_extra=lambda w: slurm_extra(w.server),
    params:
        pending=lambda w: GRID.pending(w.server, GRID.marker_round(w.todo)),
        round=lambda w: GRID.marker_round(w.todo),  # None: the whole server cell (sweep.rounds 1)
        grid=lambda w: GRID.subset(w.server),
    message:
        "server cell {wildcards.server}: bench cells to run: {params.pending}"
    script:
        "../scripts/serve_and_bench.py"


# No action: Snakemake touches the marker itself. A `run:` block here was not in-process: Snakemake 9 runs
# each `run:` job as a whole new Snakemake process (Snakefile, Hydra compose, DAG), 2-4 s per server cell.
rule server_cell_done:
    input:
        cell_metrics,
    output:
        touch(layout.cells_done(layout.server_dir(RESULTS, "{study}", "{server}"), "{cellset}")),
    log:
        layout.log(layout.server_dir(RESULTS, "{study}", "{server}"), "cells-{cellset}"),
