# One job per group (GRID.group: a baseline and its speculative cells, compared with each other): start its servers
# once, let them take turns over their unfinished bench cells, repeat by repeat (sweep.residency, runner.py), stop
# them. Its output is a marker in the lead's folder named after the set of bench cells it still had to run; finished
# cells are never declared outputs, so a failed job cannot make Snakemake delete them. It is a checkpoint:
# `server_cell_done` asks for it only while cells are unfinished, and afterwards reads the same metrics.json paths a
# finished grid gives, so a rerun runs exactly what is missing. A CPU server takes every core, so CPU groups never
# run side by side and skew each other's timings; GPU groups run side by side on disjoint GPUs.


checkpoint serve_and_bench:
    input:
        serve_inputs,
    output:
        layout.run_marker(layout.server_dir(RESULTS, "{study}", "{server}"), "{todo}"),
    log:
        layout.log(layout.server_dir(RESULTS, "{study}", "{server}"), "job-{todo}"),
    threads: lambda w: 1 if schedule.group_gpus(GRID, w.server) else all_cores(w.server)
    resources:
        gpu=lambda w: schedule.group_gpus(GRID, w.server),
        # what a cluster executor (profiles/slurm) asks for; a local run ignores them
        gpu_model=lambda w: GRID.servers[w.server].run["job"]["gpu_model"] or "",
        runtime=lambda w: group_runtime(w.server),
        mem_mb=lambda w: group_mem_mb(w.server),
        slurm_extra=lambda w: slurm_extra(w.server),
    params:
        pending=lambda w: pending_line(w.server),
        grid=lambda w: GRID.subset(*schedule.group(GRID, w.server)),
    message:
        "group {wildcards.server}: {params.pending}"
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
