from specsweep import snakejob, tiny

snakejob.run(snakemake.log[0], lambda: tiny.build_tokenizer(snakemake.params.out))
