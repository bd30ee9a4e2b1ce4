from specsweep import snakejob
from specsweep.models import tiny

snakejob.run(snakemake.log[0], lambda: print(tiny.train_drafter_for(snakemake.params.target, snakemake.params.out,
                                                                     scale=snakemake.params.scale)))
