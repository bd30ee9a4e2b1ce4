from specsweep import snakejob
from specsweep.models import tiny

snakejob.run(snakemake.log[0], lambda: tiny.build_tokenizer(snakemake.params.out))
