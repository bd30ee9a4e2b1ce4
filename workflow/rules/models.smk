# The embedded default pair, made here: nothing is downloaded.
rule build_tiny_pair:
    output:
        target=f"{RESULTS}/models/tiny/target/config.json",
        drafter=f"{RESULTS}/models/tiny/drafter/config.json",
    log:
        f"{RESULTS}/models/tiny/build.log",
    params:
        root=lambda w, output: os.path.dirname(os.path.dirname(output.target)),
    script:
        "../scripts/build_tiny_pair.py"
