"""Compose the Hydra config tree into resolved study configs, one per (pair, dataset) job.

Both ways in (Snakemake `--config` and `specsweep sweep -m`) end here, so both produce the same
resolved dicts and therefore the same cell ids.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Iterable

import yaml

from specsweep.core.errors import ConfigError
from specsweep.core.nested import aslist, flatten
from specsweep.core.paths import REPO, user_cache
from specsweep.grid import repeats

CONF_DIR = REPO / "conf"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
PACKAGE = Path(__file__).resolve().parents[1]     # specsweep itself
COMPOSED_KEPT = 256          # compositions kept in the user's cache (composed_path); the oldest half goes beyond


def format_override_value(value: Any) -> str:
    """Render a Python value (as Snakemake's --config YAML-parsed it) in Hydra override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_override_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{format_override_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if text and all(c.isalnum() or c in "-_./:" for c in text):
        return text
    return json.dumps(text)  # Hydra accepts double-quoted strings with JSON escapes


def overrides_from_snakemake(config: dict) -> list[str]:
    """Snakemake's --config as Hydra overrides.

    Snakemake only takes identifier keys, so dotted overrides travel in one string:
        --config dataset=gsm8k overrides="sweep.num_speculative_tokens=[2,4,6] server.max_model_len=1024"
    and a nested value sets fields: --config 'sweep={num_speculative_tokens: [2,4]}'.
    """
    out: list[str] = []
    for key, value in config.items():
        if key == "jobs_file":
            continue
        if key == "overrides":
            out += _split_overrides(value) if isinstance(value, str) else [str(v) for v in value]
        elif isinstance(value, dict):
            out += [f"{key}.{k}={format_override_value(v)}" for k, v in flatten(value).items()]
        else:
            out.append(f"{key}={format_override_value(value)}")
    return out


def _split_overrides(value: str) -> list[str]:
    """--config overrides="..." as the shell would split it; an unbalanced quote is a one-line error. Snakemake
    strips the quotes at either end of a --config value (parse_key_value_arg), so one that ends a quoted override
    is lost before it gets here."""
    try:
        return shlex.split(value)
    except ValueError as e:
        raise ConfigError(f"config: overrides={value!r}: {e}; Snakemake strips a quote at either end of a --config "
                          "value, so end it with a space, e.g. overrides=\"... server.env.X='1' \"") from None


def _compose_one(overrides: list[str]) -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=list(overrides))
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_hydra_message(e, overrides)) from None
    except ValueError as e:       # Hydra's word for a malformed defaults list in a config file
        hint = ": quote YAML's off/on/yes/no, which it reads as booleans" if "bool" in str(e) else ""
        raise ConfigError(f"config: a config file's defaults list is malformed ({e}){hint}") from None
    finally:
        GlobalHydra.instance().clear()
    return resolved


def _hydra_message(e: Exception, overrides: list[str]) -> str:
    text = " ".join(str(e).split())
    if "Could not find '" in text:
        missing = text.split("Could not find '")[1].split("'")[0]          # e.g. pair/nope
        group, _, choice = missing.rpartition("/")
        choices = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")) if group else []
        if choices:
            return f"config: {group}={choice} is not in conf/{group}/: choose one of: {', '.join(choices)}"
        return f"config: could not find {missing!r} in conf/: check the group name"
    if "Missing mandatory value" in text:
        key = text.split("full_key: ")[-1].split()[0] if "full_key: " in text else "a value"
        return f"config: {key} is required: set it, e.g. `{key}=...`"
    if "Could not override '" in text or "not in struct" in text:
        key = (text.split("Could not override '")[1] if "Could not override '" in text else text.split("Key '")[1])
        key = key.split("'")[0]
        return f"config: {key} is not a config key: check its spelling against conf/ (the schema allows no extra keys)"
    return f"config: {text.split(' full_key')[0]} (overrides: {' '.join(overrides) or 'none'})"


@functools.cache
def _workflow_schema(path: Path, mtime_ns: int) -> dict:
    """The workflow's schema file, parsed once per version of it (parsing took 40 ms of every validate)."""
    return yaml.safe_load(path.read_text())


def schema() -> dict:
    """The config schema: the workflow's (SCHEMA), the registry's backend names as server.backend's enum, and
    each backend's fragment (its SCHEMA fact) where server.backend names it."""
    from specsweep.core import registry

    out = copy.deepcopy(_workflow_schema(SCHEMA, SCHEMA.stat().st_mtime_ns))
    out["properties"]["server"]["properties"]["backend"] = {"enum": list(registry.names())}
    out.setdefault("allOf", []).extend(
        {"if": {"properties": {"server": {"properties": {"backend": {"const": name}}}}}, "then": fragment}
        for name in registry.names() if (fragment := registry.schema_fragment(name)))
    return out


def validate(cfg: dict) -> dict:
    """Check one resolved config against the schema (schema(): the workflow's and the backends' fragments)."""
    import jsonschema

    try:
        jsonschema.Draft202012Validator(schema()).validate(cfg)
    except jsonschema.ValidationError as e:
        raise ConfigError(_schema_message(e)) from None
    for item in cfg["server"].get("extra_args", []):
        fix = _spec_flag_fix(cfg["server"]["backend"], item)
        if fix:
            raise ConfigError(f"config: server.extra_args item {item!r} overrides the cell's spec "
                              f"(the cell would record one thing and run another): {fix}")
        if str(item).lstrip().startswith(("{", "[")):
            try:
                json.loads(item)
            except json.JSONDecodeError as je:
                raise ConfigError(
                    f"config: server.extra_args item {item!r} is not valid JSON ({je.msg} at char {je.pos}): "
                    "quote keys and strings with double quotes") from None
    sweep = cfg["sweep"]   # an axis given as a scalar (as multirun gives it) is a list of one
    for axis in ("num_speculative_tokens", "thinking", "concurrency"):
        sweep[axis] = aslist(sweep[axis])
    sweep["verification"] = aslist(sweep.get("verification", ["standard"]))
    acceptance = sweep.get("set_acceptance")      # its entries may be lists (rates), and null is an entry
    sweep["set_acceptance"] = acceptance if isinstance(acceptance, list) else [acceptance]
    _refuse_synthetic_extra(cfg["pair"]["speculative_extra"] or {})
    repeats.check(sweep)
    for axis in ("pairs", "datasets"):
        sweep[axis] = aslist(sweep[axis]) or None
    if sweep.get("k_by_concurrency"):
        sweep["k_by_concurrency"] = _k_by_concurrency(sweep["k_by_concurrency"])
    return _canonical(cfg)


def _refuse_synthetic_extra(extra: dict) -> None:
    """vLLM's acceptance settings belong to sweep.set_acceptance, which the cell's id and name record."""
    for key in ("rejection_sample_method", "synthetic_acceptance_length", "synthetic_acceptance_rates"):
        if key in extra:
            raise ConfigError(f"config: pair.speculative_extra.{key} sets vLLM's acceptance behind the cell's back: "
                              "drop it and use sweep.set_acceptance (a mean acceptance length, or a list of "
                              "per-position rates) or sweep.verification (standard or block), which the cell's id "
                              "and name record")


def _k_by_concurrency(linked: dict) -> dict[int, list[int]]:
    """sweep.k_by_concurrency with integer concurrencies (a YAML or JSON key may be a string) and K lists."""
    out = {}
    for conc, ks in linked.items():
        if not str(conc).isdigit() or int(conc) < 1:
            raise ConfigError(f"config: sweep.k_by_concurrency key {conc!r} is not a concurrency: use positive "
                              "integers, e.g. sweep.k_by_concurrency={1:7,4:[3,4]}")
        out[int(conc)] = aslist(ks)
    return out


_SPECULATIVE = "use pair.method, sweep.num_speculative_tokens and pair.speculative_extra"


def _spec_flag_fix(backend: str, item) -> str | None:
    """What to use instead when one extra_args item sets a spec flag: `--flag`, `--flag=value`, vLLM's
    `--flag_name` and `--flag.key=value`, or an argparse abbreviation (`--tensor-parallel`)."""
    from specsweep.core import registry

    flags = registry.get(backend).SPEC_FLAGS      # the launch flags the backend's argv sets
    name = str(item).strip().split("=", 1)[0]
    if not name.startswith("--"):
        return flags.get(name) if name.startswith("-") else None
    name = name.split(".", 1)[0].replace("_", "-")
    if len(name) == 2:                      # `--` ends the options
        return None
    if name.startswith("--speculative-") or "--speculative-".startswith(name):
        return _SPECULATIVE
    return flags.get(name) or next((fix for flag, fix in flags.items() if flag.startswith(name)), None)


def _canonical(obj):
    """Keys sorted at every level, so a config read back from a jobs file is the same value, repr included."""
    if isinstance(obj, dict):
        return {k: _canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [_canonical(v) for v in obj]
    return obj


def _schema_message(e: Exception) -> str:
    import jsonschema

    cause = e
    while cause is not None and not isinstance(cause, jsonschema.ValidationError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return "config: " + " ".join(str(e).split())[:300]
    key = ".".join(str(p) for p in cause.absolute_path) or "(top level)"
    if isinstance(cause.schema, dict) and "fix" in cause.schema:     # the schema's own advice for this check
        return f"config: {key}={cause.instance} is {cause.schema['fix']}"
    return f"config: {key}: {cause.message}; fix it in conf/ or with an override `{key}=...`"


def compose_jobs(overrides: Iterable[str] = ()) -> list[dict]:
    """One resolved, validated config per (pair, dataset) named in the sweep. A composition made before from the
    same inputs is read back (composed_path), so a Snakemake start skips Hydra's compose and the schema check
    (docs/campaigns/2026-12-03-small-grid.md#2026-12-03-night-no-checkpoint-jobs-and-why-3-s-is-out-of-reach-here)."""
    overrides = list(overrides)
    path = composed_path(overrides)
    try:
        return json.loads(path.read_text(), object_hook=_from_json)
    except (OSError, ValueError, TypeError):   # none kept yet, or a torn or foreign file: compose afresh
        pass
    jobs = _compose_jobs(overrides)
    _keep_composed(path, jobs)
    return jobs


def composed_path(overrides: list[str]) -> Path:
    """Where the composition of `overrides` is kept: named by a digest of all it depends on, so a changed input
    is a new name and a stale composition is never read. Those inputs: the overrides, every file under conf/, the
    schema, specsweep's own code (validate, the backends' schema fragments and flags), the backend registry, and
    the versions of Hydra, OmegaConf, jsonschema and Python. Composition reads no environment variable and no
    other file (conf/ has no `oc.env` or other resolver)."""
    import importlib.util

    from specsweep.core import registry

    digest = hashlib.sha256(json.dumps([overrides, sorted(registry.BACKENDS.items()), _library_versions()]).encode())
    files = [(root, f) for root, pattern in ((CONF_DIR, "*.yaml"), (SCHEMA.parent, SCHEMA.name), (PACKAGE, "*.py"))
             for f in sorted(root.rglob(pattern))]
    for module in registry.BACKENDS.values():      # a backend registered from outside specsweep: its facts
        if not module.startswith("specsweep."):
            origin = Path(importlib.util.find_spec(module).origin)
            files.append((origin.parent, origin))
    for root, f in files:
        digest.update(f"{f.relative_to(root)}\0".encode() + f.read_bytes() + b"\0")
    return user_cache() / "composed" / f"{digest.hexdigest()[:32]}.json"


@functools.cache
def _library_versions() -> list[str]:
    """Python's and the composing libraries' versions: read once a process (importlib.metadata scans sys.path)."""
    from importlib import metadata

    return [sys.version, *(metadata.version(d) for d in ("hydra-core", "omegaconf", "jsonschema"))]


_PAIRS = "(pairs)"   # a dict a JSON object cannot hold (a key not a string, e.g. sweep.k_by_concurrency's): its pairs


def _to_json(value: Any) -> Any:
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and list(value) != [_PAIRS]:
            return {k: _to_json(v) for k, v in value.items()}
        return {_PAIRS: [[k, _to_json(v)] for k, v in value.items()]}
    return [_to_json(v) for v in value] if isinstance(value, list) else value


def _from_json(obj: dict) -> dict:
    return {k: v for k, v in obj[_PAIRS]} if list(obj) == [_PAIRS] else obj


def _keep_composed(path: Path, jobs: list[dict]) -> None:
    """Write a composition as JSON, whole or not at all, and keep the folder's size bounded. One that would not
    read back equal (a type JSON lacks) is not kept; nor is one where the cache cannot be written (a read-only
    home): either only costs the next run its compose."""
    try:
        text = json.dumps(_to_json(jobs))
        if json.loads(text, object_hook=_from_json) != jobs:
            return
    except (TypeError, ValueError):
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        staged.write_text(text)
        os.replace(staged, path)
        kept = sorted(path.parent.glob("*.json"), key=lambda f: f.stat().st_mtime)
        if len(kept) > COMPOSED_KEPT:
            for f in kept[:len(kept) - COMPOSED_KEPT // 2]:
                f.unlink(missing_ok=True)
    except OSError:
        pass


def _compose_jobs(overrides: list[str]) -> list[dict]:
    base = validate(_compose_one(overrides))
    pairs = aslist(base["sweep"]["pairs"]) or [None]
    datasets = aslist(base["sweep"]["datasets"]) or [None]
    if pairs == [None] and datasets == [None]:
        return [base]
    jobs = []
    for p in pairs:
        for d in datasets:
            extra = ([f"pair={p}"] if p else []) + ([f"dataset={d}"] if d else [])
            jobs.append(validate(_compose_one(overrides + extra)))
    return jobs


def load_jobs_file(path: str | Path) -> list[dict]:
    """Jobs written by `specsweep sweep -m` for Snakemake to run."""
    jobs = yaml.safe_load(Path(path).read_text())
    return [validate(j) for j in jobs]


def jobs_from_snakemake(config: dict) -> list[dict]:
    if "jobs_file" in config:
        return load_jobs_file(config["jobs_file"])
    return compose_jobs(overrides_from_snakemake(config))
