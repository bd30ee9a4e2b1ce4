from specsweep.diagnose import acceptance_checkpoint
from specsweep import snakejob

snakejob.run(snakemake.log[0], lambda: acceptance_checkpoint.acceptance(snakemake.params.grid,
                                                                        snakemake.wildcards.server,
                                                                        snakemake.output[0]))
