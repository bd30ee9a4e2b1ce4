"""Every error a user can cause or fix: its message is the one line (or one line per failed check) shown."""
from __future__ import annotations


class SpecsweepError(Exception):
    """The base: the CLI and the Snakemake scripts catch this one type and print its message, no traceback."""

    multiline = False    # True: every line of the message is shown (one per failed check), not just the first


class ConfigError(SpecsweepError):
    """A user mistake in the config or the input data."""


class ServerError(SpecsweepError):
    """A server did not come up or did not stop; the message ends with the log's last lines."""


class CellError(SpecsweepError):
    """A bench or server cell failed; its message says which and why."""


class TrackingError(SpecsweepError):
    """MLflow could not be written; results/ is intact and a later run ingests again."""


class PreflightError(SpecsweepError):
    """At least one check failed; the message is one line per failed check."""

    multiline = True
