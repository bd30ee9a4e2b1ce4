# The table and its plots in one job: as two, the plots paid a second Python start-up and Snakemake round.
rule summarize:
    input:
        lambda w: [str(GRID.cells_done(sid)) for sid in server_cells_of(w.study)],
    output:
        summary=f"{RESULTS}/{{study}}/summary.csv",
        plots=touch(f"{RESULTS}/{{study}}/plots/done"),
    log:
        f"{RESULTS}/{{study}}/logs/summarize.log",
    params:
        grid=lambda w: GRID.of_study(w.study),
    script:
        "../scripts/summarize.py"
