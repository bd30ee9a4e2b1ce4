from specsweep import snakejob, tiny

snakejob.run(snakemake.log[0], lambda: print(tiny.train_target(snakemake.params.tokenizer, snakemake.params.out)))
