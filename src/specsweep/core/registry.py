"""The backends, one package each under backends/, and the one place that maps `server.backend` to its package.

A backend package owns everything it knows (docs/development.md, adding a backend):
- `__init__.py`, its facts, importable anywhere (the standard library only: config, cells and tracking read
  it, and vLLM's process imports the guard below it): `SPEC_FLAGS`, the launch flags `server.extra_args` may
  not set, each with the config key to use instead; `ID_TAG`, what its server cells' ids carry after the pair
  (`""` for vLLM, the first backend); `ID_BY_BLOCK`, whether they are named by block size (`-b4`) rather
  than by method and K; `VERSION_FIELDS`, the figures that name the server's version (MLflow tags them); `LAYER_ID_OFFSET`, what
  it adds to a DFlash target_layer_id beyond HF's hidden_states[id + 1] (the diagnosis's layer shifts; 1 when
  left out); `LABEL`, how messages name it (`the NAME backend` when left out); `CAPABILITIES`, which of `FEATURES` it implements (none when left out: preflight then refuses
  each, checks.refusals); `SCHEMA`, the JSON Schema fragment its configs must also satisfy (the server keys
  it needs, the kernel keys it refuses; config.schema() adds it, and its name to the schema's backend list);
  and `describe(env)`, the line `specsweep doctor` prints about it;
- `session.py`: `open_session(grid, sid, progress)`, a context manager that brings a server cell up and
  yields a `bench_cell.Session`;
- `checks.py`: `CHECKS`, its preflight checks in order, and `environment(server_run)`, what preflight
  records about the Python it runs in;
- `machine.py`: its answers to the planner's questions about the machine (plan/machine.py).
Its launch (argv, probe, version) and whatever else it needs live beside them, in its own package.

The facts are imported from here (`get`); a backend's session and checks through `core.parts`, its machine part
through `core.machines`, so that neither config nor cells reaches a session, and a vLLM job never imports torch.
Nothing outside backends/ imports a backend package (tests/test_layout.py).
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


# What a backend may implement beyond plain decoding (its CAPABILITIES), each with the config that asks for it:
# a backend without one is refused by the shared check (checks.refusals), whatever its name.
FEATURES = {
    "set_acceptance": "sweep.set_acceptance",
    "block_verification": "sweep.verification=block",
    "k_schedule": "sweep.k_schedule",
    "divergence": "sweep.divergence",
}


def names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def capabilities(name: str) -> frozenset[str]:
    """The FEATURES a backend implements, from its facts."""
    caps = frozenset(getattr(get(name), "CAPABILITIES", ()))
    if caps - FEATURES.keys():
        raise ValueError(f"backend {name!r} claims {sorted(caps - FEATURES.keys())}: not one of {sorted(FEATURES)}")
    return caps


def having(feature: str) -> tuple[str, ...]:
    """The backends that implement a feature, in registry order."""
    return tuple(n for n in names() if feature in capabilities(n))


def schema_fragment(name: str) -> dict:
    """The JSON Schema fragment a backend's configs must also satisfy ({} when it has none)."""
    return getattr(get(name), "SCHEMA", {})


def get(name: str) -> ModuleType:
    """A backend's facts (its package's `__init__`), imported on use."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}: one of {names()}")
    return importlib.import_module(BACKENDS[name])


def backend_for(spec: dict) -> ModuleType:
    """The facts of the backend a server cell's spec names."""
    return get(spec["server"]["backend"])
