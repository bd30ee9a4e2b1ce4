rule env_check:
    output:
        RESULTS + "/{study}/env.json",
    log:
        RESULTS + "/{study}/logs/env_check.log",
    params:
        configs=lambda w: [GRID.configs[sid] for sid in server_cells_of(w.study)],
    script:
        "../scripts/env_check.py"
