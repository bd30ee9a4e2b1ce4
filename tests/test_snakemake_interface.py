"""What the workflow takes from Snakemake beyond its rule syntax, checked against the installed Snakemake: a
change there fails here, not in a study. workflow/rules/common.smk is parsed for real, through Snakemake's
Python API, with a stand-in grid."""
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)       # Snakemake keeps its .snakemake/ in the working directory


def cores_seen(tmp_path: Path, cores: int | None, job_cpus: int | None) -> int:
    """all_cores of a CPU server cell, as common.smk computes it when Snakemake parses it with --cores `cores`
    (None: not given, as under a cluster profile) and the cell's server.job.cpus `job_cpus`."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    out = tmp_path / f"cores-{cores}-{job_cpus}.json"
    snakefile = tmp_path / f"Snakefile-{cores}-{job_cpus}"
    snakefile.write_text(
        "from types import SimpleNamespace\n"
        f"GRID = SimpleNamespace(servers={{'s': SimpleNamespace(run={{'job': {{'cpus': {job_cpus!r}}}}})}})\n"
        f"include: {str(REPO / 'workflow' / 'rules' / 'common.smk')!r}\n"
        "with open(config['out'], 'w') as f:\n"
        "    f.write(json.dumps(all_cores('s')))\n"
        "rule all:\n"
        "    output: 'never'\n")
    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        workflow = api.workflow(resource_settings=ResourceSettings(cores=cores),
                                config_settings=ConfigSettings(config={"out": str(out)}), snakefile=snakefile)
        workflow.dag()  # parses the Snakefile with the cores given (list_rules would set them to 1)
    return json.loads(out.read_text())


@pytest.mark.parametrize("job_cpus", [None, 5])
def test_a_cpu_cell_takes_the_cores_given_with_cores(tmp_path, job_cpus):
    """workflow.cores (Snakemake's docs: rules, threads) is the --cores value, whatever server.job.cpus says."""
    assert cores_seen(tmp_path, 3, job_cpus) == 3


def test_without_cores_a_cpu_cell_takes_its_job_cpus_else_this_hosts_count(tmp_path):
    """Without --cores, workflow.cores raises WorkflowError (common.smk catches exactly that): a change in what it
    raises, or a default it starts to return, fails here."""
    import os

    assert cores_seen(tmp_path, None, 5) == 5
    assert cores_seen(tmp_path, None, None) == os.cpu_count()
