from specsweep.read import pages
from specsweep import snakejob
from specsweep.read.study import Study

snakejob.run(snakemake.log[0], lambda: pages.write_pages(
    Study.load(snakemake.params.dir, snakemake.params.grid), snakemake.input.summary, snakemake.input.k_comparison,
    snakemake.input.env, dict(snakemake.output.items())))
