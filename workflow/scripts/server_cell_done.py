from specsweep import snakejob
from specsweep.results import atomic_write_json

snakejob.run(snakemake.log[0], lambda: atomic_write_json(snakemake.output[0], sorted(snakemake.input)))
