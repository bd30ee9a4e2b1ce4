from specsweep import pages, snakejob

snakejob.run(snakemake.log[0], lambda: pages.write_pages(
    snakemake.params.grid, snakemake.wildcards.study, snakemake.input.summary, snakemake.input.env,
    dict(snakemake.output.items())))
