# The embedded default pair, made here in three cached steps: nothing is downloaded. Changing how the
# drafter is trained retrains only the drafter.
TINY = f"{RESULTS}/models/tiny"


rule tiny_tokenizer:
    output:
        f"{TINY}/tokenizer/tokenizer.json",
    log:
        f"{TINY}/logs/tokenizer.log",
    params:
        out=lambda w, output: os.path.dirname(output[0]),
    script:
        "../scripts/tiny_tokenizer.py"


rule tiny_target:
    input:
        rules.tiny_tokenizer.output,
    output:
        config=f"{TINY}/target/config.json",
        report=f"{TINY}/target/train.json",
    log:
        f"{TINY}/logs/target.log",
    params:
        tokenizer=lambda w, input: os.path.dirname(input[0]),
        out=lambda w, output: os.path.dirname(output.config),
    script:
        "../scripts/tiny_target.py"


rule tiny_drafter:
    input:
        rules.tiny_target.output.config,
    output:
        config=f"{TINY}/drafter/config.json",
        report=f"{TINY}/drafter/train.json",
    log:
        f"{TINY}/logs/drafter.log",
    params:
        target=lambda w, input: os.path.dirname(input[0]),
        out=lambda w, output: os.path.dirname(output.config),
    script:
        "../scripts/tiny_drafter.py"
