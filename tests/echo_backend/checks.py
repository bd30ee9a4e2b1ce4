"""The echo backend's checks: a shared one and its own (preflight adds the refusals of what it lacks: all of
backends.FEATURES, since it claims no CAPABILITIES)."""
from specsweep.plan.checks import check_dataset, ok

from . import VERSION


def environment(server_run: dict) -> dict:
    return {"server_env": {"echo": VERSION}}


def check_echo(cfg, env):
    return ok("echo", f"echo {env['server_env']['echo']} answers every prompt with itself")


CHECKS = [check_dataset, check_echo]
