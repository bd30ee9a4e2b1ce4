# The low-acceptance diagnosis (counterfactuals.py). Once a speculative server cell of real acceptance has
# finished, its group's job writes its pooled acceptance per bench group and whether any is below
# sweep.diagnose.below_al (acceptance_checkpoint.record_acceptance), in a record named after those settings
# (Grid.acceptance_path). The acceptance checkpoint (light, local) then finds it and runs no job; it writes the
# record where the group's job did not (a group that failed, settings changed since). Only then does the summary
# ask for the diagnose job, which runs the known causes' counterfactual cells on the cell's own backend and writes
# diagnosis.json; a healthy cell costs no launch and no cluster job. A finished diagnosis is never rerun unless its
# cells or its settings change. A CPU cell's diagnose job takes every core, as a server cell does: its
# counterfactual cells are server cells too.


checkpoint acceptance:
    input:
        cell_metrics,
    output:
        layout.acceptance(layout.server_dir(RESULTS, "{study}", "{server}"), "{settings}"),
    log:
        layout.log(layout.server_dir(RESULTS, "{study}", "{server}"), "acceptance-{settings}"),
    params:
        grid=lambda w: GRID.subset(w.server),
    script:
        "../scripts/acceptance.py"


rule diagnose:
    input:
        acceptance=lambda w: str(GRID.acceptance_path(w.server)),
        env=STUDY.env,
    output:
        layout.diagnosis(layout.server_dir(RESULTS, "{study}", "{server}")),
    log:
        layout.log(layout.server_dir(RESULTS, "{study}", "{server}"), "diagnose"),
    threads: lambda w: 1 if GRID.servers[w.server].gpus else all_cores(w.server)
    resources:
        gpu=lambda w: GRID.servers[w.server].gpus,
        gpu_model=lambda w: GRID.servers[w.server].run["job"]["gpu_model"] or "",
        runtime=lambda w: GRID.servers[w.server].run["job"]["runtime_min"],
        mem_mb=lambda w: GRID.servers[w.server].run["job"]["mem_mb"],
        slurm_extra=lambda w: slurm_extra(w.server),
    params:
        grid=lambda w: GRID.subset(w.server),
        settings=lambda w: GRID.configs[w.server]["sweep"].get("diagnose"),
    message:
        "low-acceptance diagnosis of {wildcards.server}"
    script:
        "../scripts/diagnose.py"
