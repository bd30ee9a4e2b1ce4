# The embedded default pair, made here in three cached steps: nothing is downloaded. Changing how the
# drafter is trained retrains only the drafter.
TINY = layout.tiny_pair(RESULTS)


rule tiny_tokenizer:
    output:
        TINY.tokenizer_file,
    log:
        TINY.log("tokenizer"),
    params:
        out=lambda w, output: os.path.dirname(output[0]),
    script:
        "../scripts/tiny_tokenizer.py"


rule tiny_target:
    input:
        rules.tiny_tokenizer.output,
    output:
        config=TINY.config(TINY.target),
        report=TINY.train_report(TINY.target),
    log:
        TINY.log("target"),
    params:
        tokenizer=lambda w, input: os.path.dirname(input[0]),
        out=lambda w, output: os.path.dirname(output.config),
    script:
        "../scripts/tiny_target.py"


rule tiny_drafter:
    input:
        rules.tiny_target.output.config,
    output:
        config=TINY.config(TINY.drafter),
        report=TINY.train_report(TINY.drafter),
    log:
        TINY.log("drafter"),
    params:
        target=lambda w, input: os.path.dirname(input[0]),
        out=lambda w, output: os.path.dirname(output.config),
    script:
        "../scripts/tiny_drafter.py"
