rule summarize:
    input:
        lambda w: [str(GRID.cells_done(sid)) for sid in server_cells_of(w.study)],
    output:
        RESULTS + "/{study}/summary.csv",
    log:
        RESULTS + "/{study}/logs/summarize.log",
    params:
        grid=lambda w: GRID.of_study(w.study),
    script:
        "../scripts/summarize.py"


rule plots:
    input:
        RESULTS + "/{study}/summary.csv",
    output:
        touch(RESULTS + "/{study}/plots/done"),
    log:
        RESULTS + "/{study}/logs/plots.log",
    script:
        "../scripts/plots.py"
