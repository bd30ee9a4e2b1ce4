"""Progress bars on the user's terminal, also from inside a Snakemake job whose output goes to a log."""
import sys

from tqdm import tqdm


def progress_bar(**kwargs) -> tqdm:
    out = sys.__stderr__   # not redirected by the job's log capture
    return tqdm(file=out, leave=False, mininterval=0.2 if out.isatty() else 10.0, **kwargs)
