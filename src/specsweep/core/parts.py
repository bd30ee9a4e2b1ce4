"""A backend's heavy parts (its session, its checks), imported on use: what the runner, preflight and the CLI
ask for by `server.backend`. Apart from the facts (`registry.get`), so that config and cells, which read the
facts, never reach a session, which reads cells."""
from __future__ import annotations

import importlib
from types import ModuleType

from specsweep.core.registry import BACKENDS, get

PARTS = ("session", "checks")


def part(name: str, which: str) -> ModuleType:
    """One of a backend's parts (PARTS), e.g. part("vllm", "session")."""
    get(name)                    # an unknown name is refused there, with the names it knows
    return importlib.import_module(f"{BACKENDS[name]}.{which}")


def session(name: str) -> ModuleType:
    return part(name, "session")


def checks(name: str) -> ModuleType:
    return part(name, "checks")
