# The embedded default pair, in three cached steps: nothing is downloaded. By default (tiny_pair: shipped in
# conf/config.yaml) each step copies the trained pair the repository ships under models/tiny/ (its MANIFEST.json
# names the recipe, the seed and the commit that trained it); `--config tiny_pair=train` trains each step here
# instead, by the same recipe (minutes on one core). Changing how the drafter is trained retrains only the drafter.
# `tiny_pair=train@S` (0 < S < 1) runs the same rules at S times the recipe's steps and prompts (the test suite's
# check of these rules, about a minute); each report records its scale, and a change of scale trains the pair again.
from specsweep.models import tiny as tiny_recipe

TINY = layout.tiny_pair(RESULTS)
SHIPPED_TINY = layout.tiny_pair(workflow.basedir)
TINY_SCALES = {tiny_recipe.train_scale(c.get("tiny_pair")) for c in GRID.configs.values()} - {None}
if len(TINY_SCALES) > 1:
    sys.exit(
        f"specsweep: the studies ask for the tiny pair at scales {sorted(TINY_SCALES)}; one results_dir holds one pair"
    )
TINY_BUILD = "train" if TINY_SCALES else "shipped"
TINY_SCALE = next(iter(TINY_SCALES), 1.0)
TINY_HOW = "by the recipe" if TINY_SCALE == 1 else f"at {TINY_SCALE} of the recipe's steps and prompts"

if TINY_BUILD == "train":

    rule tiny_tokenizer:
        output:
            TINY.tokenizer_file,
        log:
            TINY.log("tokenizer"),
        params:
            out=lambda w, output: os.path.dirname(output[0]),
        message:
            "tiny pair: building its tokenizer"
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
            scale=TINY_SCALE,
        message:
            f"tiny pair: training the target {TINY_HOW} (a few minutes on one core; its log: {{log}})"
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
            scale=TINY_SCALE,
        message:
            f"tiny pair: training the drafter on the target's answers {TINY_HOW} (a few minutes on one core; its log: {{log}})"
        script:
            "../scripts/tiny_drafter.py"

else:

    # A copy, not a link: a study's results/ stays whole when the checkout moves on.
    rule tiny_tokenizer:
        input:
            SHIPPED_TINY.tokenizer_file,
        output:
            TINY.tokenizer_file,
        log:
            TINY.log("tokenizer"),
        localrule: True
        message:
            "tiny pair: copying the shipped pair (models/tiny/; --config tiny_pair=train trains it here)"
        shell:
            "cp -r $(dirname {input})/. $(dirname {output}) > {log} 2>&1"

    rule tiny_target:
        input:
            rules.tiny_tokenizer.output,
            config=SHIPPED_TINY.config(SHIPPED_TINY.target),
        output:
            config=TINY.config(TINY.target),
            report=TINY.train_report(TINY.target),
        log:
            TINY.log("target"),
        localrule: True
        shell:
            "cp -r $(dirname {input.config})/. $(dirname {output.config}) > {log} 2>&1"

    rule tiny_drafter:
        input:
            rules.tiny_target.output.config,
            config=SHIPPED_TINY.config(SHIPPED_TINY.drafter),
        output:
            config=TINY.config(TINY.drafter),
            report=TINY.train_report(TINY.drafter),
        log:
            TINY.log("drafter"),
        localrule: True
        shell:
            "cp -r $(dirname {input.config})/. $(dirname {output.config}) > {log} 2>&1"
