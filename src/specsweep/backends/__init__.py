"""The backends, one package each under backends/, and the one place that maps `server.backend` to its package.

A backend package owns everything it knows (docs/development.md, adding a backend):
- `__init__.py`, its facts, importable anywhere (the standard library only: config, cells and tracking read
  it, and vLLM's process imports the guard below it): `SPEC_FLAGS`, the launch flags `server.extra_args` may
  not set, each with the config key to use instead; `ID_TAG`, what its server cells' ids carry after the pair
  (`""` for vLLM, the first backend); `ID_BY_BLOCK`, whether they are named by block size (`-b4`) rather
  than by method and K; `VERSION_FIELDS`, the figures that name the server's version (MLflow tags them); `LAYER_ID_OFFSET`, what
  it adds to a DFlash target_layer_id beyond HF's hidden_states[id + 1] (the diagnosis's layer shifts; 1 when
  left out); and `describe(env)`, the line `specsweep doctor` prints about it;
- `session.py`: `open_session(grid, sid, progress)`, a context manager that brings a server cell up and
  yields a `bench_cell.Session`;
- `checks.py`: `CHECKS`, its preflight checks in order, and `environment(server_run)`, what preflight
  records about the Python it runs in.
Its launch (argv, probe, version) and whatever else it needs live beside them, in its own package.

The facts are imported from here (`get`); a backend's other parts through `backends.parts`, so that neither
config nor cells reaches a session, and a vLLM job never imports torch. Nothing outside backends/ imports a
backend package (tests/test_layout.py).
"""
from __future__ import annotations

import importlib
from types import ModuleType

# server.backend -> its package; a new backend is one line here
BACKENDS = {
    "vllm": "specsweep.backends.vllm",
    "local": "specsweep.backends.local",
    "sglang": "specsweep.backends.sglang",
}


def names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def get(name: str) -> ModuleType:
    """A backend's facts (its package's `__init__`), imported on use."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}: one of {names()}")
    return importlib.import_module(BACKENDS[name])


def backend_for(spec: dict) -> ModuleType:
    """The facts of the backend a server cell's spec names."""
    return get(spec["server"]["backend"])
