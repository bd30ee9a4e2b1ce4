# The embedded default pair, made here: nothing is downloaded.
rule build_tiny_pair:
    output:
        target=RESULTS + "/models/tiny/target/config.json",
        drafter=RESULTS + "/models/tiny/drafter/config.json",
    log:
        RESULTS + "/models/tiny/build.log",
    params:
        root=RESULTS + "/models/tiny",
    script:
        "../scripts/build_tiny_pair.py"
