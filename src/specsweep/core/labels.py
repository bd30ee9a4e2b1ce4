"""A configuration's human label and its id: the one spelling that MLflow run names, plot legends, `compare`'s
headings, the K comparison's statements and the pages share.

A configuration is a server cell with its bench settings (dataset, thinking, concurrency), pooled over its
repeats: one summary row. Its label is parts joined by ` · `:

    tiny · dflash K=7 · AL set 3.0 · block verification · sglang · data=synthetic · think · c=4

pair; method and K (`K schedule 1-4:7,5-64:3` for a schedule, `baseline` for a baseline); the set acceptance
(`AL set 3.0`, or `AL set 2.5 (rates)` for per-position rates); a verification other than standard; a backend
whose cell ids carry a tag (all but vLLM); the data; `think`; the concurrency. A plot's legend is the setting's
parts alone (`setting`): the plot names the pair and the data elsewhere.

Reads typed rows (table.read, summary.rows) or anything with those keys (a DataFrame row).
"""
from __future__ import annotations

from specsweep.core import registry
from specsweep.core.table import blank

SEP = " · "


def k_label(k: int, schedule=None) -> str:
    """`K=7`, or for a K schedule (sweep.k_schedule [[1,4,7],[5,64,3]]) `K schedule 1-4:7,5-64:3`."""
    if not blank(schedule) and schedule:
        return "K schedule " + ",".join(f"{a}-{b}:{kk}" for a, b, kk in schedule)
    return f"K={int(k)}"


def acceptance_label(value) -> str:
    """'' for a real acceptance; `AL set 3.0` for a set length, `AL set 2.5 (rates)` for per-position rates (the
    length they give, 1 + their sum)."""
    if blank(value) or value == "":
        return ""
    if isinstance(value, list):
        return f"AL set {round(1 + sum(value), 3)} (rates)"
    return f"AL set {round(float(value), 3)}"


def _get(row, key):
    value = row.get(key) if hasattr(row, "get") else getattr(row, key, None)
    return None if blank(value) else value


def setting(row, method: bool = True) -> list[str]:
    """The configuration's server settings as label parts: `dflash K=7`, the set acceptance, the verification;
    `baseline` for a baseline, `baseline · exact length` for its ignore_eos row (a set-acceptance study's baseline
    has one of each). method=False leaves the method out (a plot of one method)."""
    if _get(row, "method") == "none":
        return ["baseline", *(["exact length"] if _get(row, "ignore_eos") else [])]
    k = k_label(_get(row, "num_speculative_tokens"), _get(row, "k_schedule"))
    parts = [f"{_get(row, 'method')} {k}" if method else k]
    if acceptance := acceptance_label(_get(row, "set_acceptance")):
        parts.append(acceptance)
    if _get(row, "verification") not in (None, "standard"):
        parts.append(f"{_get(row, 'verification')} verification")
    return parts


def bench(row) -> list[str]:
    """The bench settings as label parts: `data=synthetic`, `think` where thinking, `c=4`."""
    return [f"data={_get(row, 'dataset')}", *(["think"] if _get(row, "thinking") else []),
            f"c={_get(row, 'concurrency')}"]


def label(row, pair: str | None = None, with_pair: bool = True) -> str:
    """The configuration's label (the module's docstring). `pair` names a baseline by the pairs it is the baseline
    of (its own pair is "baseline"); with_pair=False leaves the pair out (`compare`, whose rows match across
    pairs)."""
    parts = [pair or _get(row, "pair")] if with_pair else []
    parts += setting(row)
    backend = _get(row, "backend")
    if backend in registry.names() and registry.get(backend).ID_TAG:       # as its cell ids name it
        parts.append(backend)
    return SEP.join(parts + bench(row))


def config_id(row, lengths: bool = False, eos: bool = False) -> str:
    """A configuration's id: its server cell and bench settings, as a bench cell id reads without its repeat
    (`tiny-dflash-k7-ab12/synthetic-t0-c4`); a set prompt length adds `-p<tokens>`, `lengths` (a study of more
    than one output length: several_output_lengths) `-o<max_tokens>`, and `eos` (a study whose baseline runs both
    ignore_eos settings: both_eos) `-e` to the ignore_eos row, so a study of one output length and one ignore_eos
    keeps the ids it had before those axes (docs/axes.md)."""
    out = f"{_get(row, 'server_cell')}/{_get(row, 'dataset')}-t{int(bool(_get(row, 'thinking')))}-c" \
          f"{_get(row, 'concurrency')}"
    if _get(row, "prompt_length") is not None:
        out += f"-p{int(_get(row, 'prompt_length'))}"
    if lengths and _get(row, "max_tokens") is not None:
        out += f"-o{int(_get(row, 'max_tokens'))}"
    if eos and _get(row, "ignore_eos"):
        out += "-e"
    return out


def both_eos(rows) -> bool:
    """Whether a server cell of a table has rows of both ignore_eos settings (a set-acceptance study's baseline)."""
    seen: dict = {}
    for r in rows:
        seen.setdefault(_get(r, "server_cell"), set()).add(bool(_get(r, "ignore_eos")))
    return any(len(v) > 1 for v in seen.values())


def several_output_lengths(rows) -> bool:
    """Whether a table's rows hold more than one output length (sweep.max_tokens as an axis)."""
    return len({_get(r, "max_tokens") for r in rows}) > 1
