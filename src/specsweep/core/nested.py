"""Nested records (configs, metrics.json, a stream's chunks): a value at a key path, and flat dotted keys."""
from __future__ import annotations

from typing import Any


def aslist(value: Any) -> list:
    """A config value that may be one item, a list or absent, as a list."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def at(record, path: tuple[str, ...]):
    """The value at a key path, or None where any step is missing or not a dict."""
    for key in path:
        if not isinstance(record, dict):
            return None
        record = record.get(key)
    return record


def flatten(record: dict, prefix: str = "", split_lists: bool = False) -> dict:
    """Dotted keys: {"a": {"b": 1}} -> {"a.b": 1}; an empty dict stays a value. With split_lists, a list of
    numbers becomes one key per entry (`a.0`, `a.1`, ...), as MLflow metrics and the report's tables show it."""
    out = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}.", split_lists))
        elif split_lists and isinstance(value, list) and value and \
                all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
            out.update({f"{name}.{i}": v for i, v in enumerate(value)})
        else:
            out[name] = value
    return out
