from specsweep.plan import preflight
from specsweep import snakejob

snakejob.run(snakemake.log[0], lambda: preflight.preflight(snakemake.params.configs, snakemake.output[0]))
