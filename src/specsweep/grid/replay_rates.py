"""A set acceptance as a cell records it (one sweep.set_acceptance entry: a length, rates, or a measured server
cell's rates replayed, {rates_from: DIR}), and the replay's reader: the rates read from another study's bench
cells, and where they came from. Below `cells`, which resolves each entry with it; it reads only files (layout's
names), never a grid or a study.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import yaml

from specsweep.core import layout
from specsweep.core.errors import ConfigError


def _measured_rates(path: str) -> list[tuple[Path, list[float]]]:
    """(bench cell directory, per-position acceptance) of each valid bench cell under a server cell's directory."""
    out = []
    for metrics in sorted(Path(path).glob(f"*/{layout.METRICS}")):
        m = json.loads(metrics.read_text())
        rates = (m.get("spec_decode") or {}).get("per_position_acceptance")
        if m.get("valid") and rates:
            out.append((metrics.parent, rates))
    return out


def rates_from(path: str) -> list[float]:
    """A measured server cell's per-position acceptance as set rates: per position, the median over the valid
    bench cells under `path` (a server cell's directory), rounded to 4 places. The cell's id holds these rates,
    never the path, so the same rates from another copy of the study are the same cell."""
    measured = [rates for _, rates in _measured_rates(path)]
    if not measured:
        raise ConfigError(f"config: sweep.set_acceptance rates_from {path} has no valid bench cell with per-position "
                          "acceptance under it: point it at a finished speculative server cell's directory "
                          "(results/<study>/<server cell>), from a study that has run")
    width = min(len(r) for r in measured)
    return [round(statistics.median(r[i] for r in measured), 4) for i in range(width)]


def rates_source(path: str) -> dict:
    """Where `rates_from(path)` took its rates: the server cell's directory as given and resolved, its study and
    server cell, its pair and K (from a bench cell's config.yaml, where there is one), the bench cells whose
    medians they are, and the rates. Recorded in the replay's bench cells' config.yaml (never in an id), it is
    how `specsweep compare` knows which drafter a replay predicts."""
    root, rates = Path(path).resolve(), rates_from(path)
    used = [bench for bench, _ in _measured_rates(path)]
    config = next((b / layout.CONFIG for b in used if (b / layout.CONFIG).exists()), None)
    cfg = (yaml.safe_load(config.read_text()) or {}) if config else {}
    return {"rates_from": str(path), "path": str(root), "study": root.parent.name, "server_cell": root.name,
            "pair": (cfg.get("pair") or {}).get("name"),
            "num_speculative_tokens": (cfg.get("server_spec") or {}).get("num_speculative_tokens"),
            "bench_cells": [b.name for b in used], "rates": rates}


def resolve_set_acceptance(value, k: int):
    """One sweep.set_acceptance entry as a K cell records it (None, a float length, or a list of float rates),
    checked as vLLM 0.26 checks it (SpeculativeConfig._resolve_synthetic_acceptance_rates). `{rates_from: DIR}`
    replays a measured server cell's rates (rates_from)."""
    if value is None:
        return None
    if isinstance(value, dict):
        source, value = value["rates_from"], rates_from(value["rates_from"])
        if len(value) != k:
            raise ConfigError(f"config: sweep.set_acceptance rates_from {source} measured {len(value)} positions but "
                              f"K={k}: replay it at sweep.num_speculative_tokens=[{len(value)}]")
    if not isinstance(value, list):
        if not 1 <= value <= k + 1:
            raise ConfigError(f"config: sweep.set_acceptance length {value} is outside [1, {k + 1}] for K={k}: a mean "
                              "acceptance length counts the bonus token, from 1 (no draft accepted) to K+1 (all)")
        return float(value)
    if len(value) != k:
        raise ConfigError(f"config: sweep.set_acceptance rates {value} have {len(value)} entries but K={k}: give one "
                          f"rate per draft position, exactly {k} (vLLM requires it), or a length instead")
    if not all(0 <= r <= 1 for r in value):
        raise ConfigError(f"config: sweep.set_acceptance rates {value} must each be in [0, 1]: each is the share of "
                          "steps that accept the drafts up to that position")
    if any(b > a for a, b in zip(value, value[1:])):
        raise ConfigError(f"config: sweep.set_acceptance rates {value} must not increase: a step that accepts "
                          "position i+1 has accepted position i, so give unconditional rates, highest first")
    return [float(r) for r in value]
