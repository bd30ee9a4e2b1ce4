from specsweep.diagnose import acceptance_checkpoint, counterfactuals
from specsweep.grid import schedule
from specsweep.run import runner
from specsweep import snakejob


def run_group():
    grid, lead = snakemake.params.grid, snakemake.wildcards.server
    # a low thinking-on cell's counterfactual without thinking runs on the cell's own server (on_own_server)
    runner.run_group(grid, lead, snakemake.output[0], also=counterfactuals.on_own_server)
    acceptance_checkpoint.record_acceptance(grid, schedule.group(grid, lead))


snakejob.run(snakemake.log[0], run_group)
