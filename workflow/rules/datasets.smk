rule dataset:
    output:
        f"{RESULTS}/datasets/{{name}}.jsonl",
    log:
        f"{RESULTS}/datasets/{{name}}.log",
    params:
        cfg=dataset_cfg,
    script:
        "../scripts/dataset.py"
