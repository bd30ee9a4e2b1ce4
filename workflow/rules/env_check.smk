# Preflight, before any server starts. A pair the workflow builds is checked once it is built.
rule env_check:
    input:
        lambda w: [rules.tiny_target.output.config, rules.tiny_drafter.output.config] if tiny_models_needed() else [],
    output:
        STUDY.env,
    log:
        STUDY.log("env_check"),
    params:
        configs=lambda w: [GRID.configs[sid] for sid in server_cells_of(w.study)],
    script:
        "../scripts/env_check.py"
