rule summarize:
    input:
        lambda w: [str(GRID.cells_done(sid)) for sid in server_cells_of(w.study)],
    output:
        f"{RESULTS}/{{study}}/summary.csv",
    log:
        f"{RESULTS}/{{study}}/logs/summarize.log",
    params:
        grid=lambda w: GRID.of_study(w.study),
    script:
        "../scripts/summarize.py"


rule plots:
    input:
        f"{RESULTS}/{{study}}/summary.csv",
    output:
        touch(f"{RESULTS}/{{study}}/plots/done"),
    log:
        f"{RESULTS}/{{study}}/logs/plots.log",
    script:
        "../scripts/plots.py"
