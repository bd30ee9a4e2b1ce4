from specsweep import preflight, snakejob

snakejob.run(snakemake.log[0], lambda: preflight.write_env(snakemake.params.configs, snakemake.output[0]))
