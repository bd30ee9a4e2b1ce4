from specsweep.diagnose import counterfactuals
from specsweep import snakejob

snakejob.run(snakemake.log[0], lambda: counterfactuals.diagnose(snakemake.params.grid, snakemake.wildcards.server,
                                                                snakemake.output[0], snakemake.input.env))
