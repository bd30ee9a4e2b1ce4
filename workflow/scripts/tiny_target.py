from specsweep import snakejob
from specsweep.models import tiny

snakejob.run(snakemake.log[0], lambda: print(tiny.train_target(snakemake.params.tokenizer, snakemake.params.out,
                                                                scale=snakemake.params.scale)))
