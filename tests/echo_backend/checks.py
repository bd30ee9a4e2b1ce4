"""The echo backend's checks: two shared ones and its own."""
from specsweep.checks import check_dataset, check_set_acceptance, ok

from . import VERSION


def environment(server_run: dict) -> dict:
    return {"server_env": {"echo": VERSION}}


def check_echo(cfg, env):
    return ok("echo", f"echo {env['server_env']['echo']} answers every prompt with itself")


CHECKS = [check_dataset, check_echo, check_set_acceptance]
