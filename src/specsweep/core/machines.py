"""The one door to a backend's machine part (backends/<name>/machine.py: what the planner asks it about memory,
KV, sleep and starts; plan/machine.py says the questions), imported by name on use. Apart from `parts`, whose
sessions and checks reach the planner: a machine part is below it."""
from __future__ import annotations

import importlib
from types import ModuleType

from specsweep.core.registry import BACKENDS, get


def machine(name: str) -> ModuleType:
    """A backend's machine part, e.g. machine("vllm")."""
    get(name)                    # an unknown name is refused there, with the names it knows
    return importlib.import_module(f"{BACKENDS[name]}.machine")
