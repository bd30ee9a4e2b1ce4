from specsweep import snakejob, tiny

snakejob.run(snakemake.log[0], lambda: print(tiny.build_pair(snakemake.params.root)))
