rule dataset:
    output:
        layout.dataset_file(RESULTS, "{name}"),
    log:
        layout.dataset_log(RESULTS, "{name}"),
    params:
        cfg=dataset_cfg,
    script:
        "../scripts/dataset.py"
