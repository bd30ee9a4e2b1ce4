"""Peer backends, one file each: `open_session(grid, sid, progress)` is a context manager that brings one
server cell up, yields a `bench_cell.Session`, and brings it down. A backend imports only neutral modules.

Adding one: a file here with `open_session`, its name below, and a `conf/server/` entry that sets
`backend:` to that name (docs/development.md).
"""
from __future__ import annotations

from types import ModuleType

NAMES = ("vllm", "local", "sglang")


def backend_for(spec: dict) -> ModuleType:
    """The backend module a server cell's spec names; imported on use, so a vLLM job never imports torch."""
    name = spec["server"]["backend"]
    if name == "vllm":
        from . import vllm as module
    elif name == "local":
        from . import local as module
    elif name == "sglang":
        from . import sglang as module
    else:
        raise ValueError(f"unknown backend {name!r}: one of {NAMES}")
    return module
