def dataset_cfg(wildcards):
    for cells in GRID.benches.values():
        for cell in cells.values():
            ds = cell.spec["dataset"]
            if GRID.dataset_file(ds) == RESULTS + f"/datasets/{wildcards.name}.jsonl":
                return ds
    raise ValueError(f"no dataset in the grid writes {wildcards.name}.jsonl")


rule dataset:
    output:
        RESULTS + "/datasets/{name}.jsonl",
    log:
        RESULTS + "/datasets/{name}.log",
    params:
        cfg=dataset_cfg,
    script:
        "../scripts/dataset.py"
