from specsweep.read import pages
from specsweep import snakejob

snakejob.run(snakemake.log[0], lambda: pages.training_page(dict(snakemake.input.items()), snakemake.output[0]))
