from specsweep.grid import datasets
from specsweep import snakejob

snakejob.run(snakemake.log[0], lambda: print(datasets.materialise(snakemake.params.cfg, snakemake.output[0])))
