"""`sweep.repeats: auto` in a group's job (runner.run_cells; docs/methods.md#sweeprepeats-auto-in-a-groups-job).

Before each repeat the group looks at its comparisons (comparisons: each member against the lead, its baseline,
which holds the speculative cells and the A/A cell; each two speculative members that differ only in K; each at
every bench setting) through sequential.look, on the blocks of the repeats done. The A/A comparison (sweep.aa) is
looked at too but holds no group: it is a check of the others, read wherever they stop. Once every one is answered, or the
budget is spent (sweep.max_repeats; sweep.max_minutes, this job's time), it writes a not-needed record for each bench
cell of the repeats left (repeats.py: they count as done) and the group's record (layout.LOOKS, in the lead's
folder: the budget, why it stopped, each comparison's record), and the job runs no further turn.

Under `sweep.looks: planned` (spending.py) the looks that count are the plan's (3, 5, 7, 10 for max_repeats 10):
the looks between them change nothing. The plan is fixed by the budget the group first looked by (layout.LOOK_PLAN,
written at its first planned look): a rerun under another plan, or under sweep.looks=every, is refused, since the
first budget's alpha is spent by its last look (a new results_dir starts afresh).

The summary reads each comparison again from its finished repeats (sequence_columns), with the same rule.
"""
from __future__ import annotations

import itertools
import time

from specsweep.core import layout
from specsweep.core.progress import say
from specsweep.core.errors import ConfigError
from specsweep.core.results import atomic_write_json, read_json, read_jsonl
from specsweep.grid import repeats
from specsweep.grid.cells import Grid, stable_hash
from specsweep.plan import residency
from specsweep.verdicts import sequential, spending, stats

ANSWERED, BUDGET, TIME, FIXED = "answered", "budget", "time", "fixed"   # why a comparison stopped
GROUP = "with its group"      # an A/A comparison not answered where the others were


def k_pairs(grid: Grid, sids: list[str]) -> list[tuple[str, str]]:
    """Each two speculative cells among `sids` that differ only in K (num_speculative_tokens, k_schedule), as
    (larger, smaller): fixed Ks by K, a schedule cell (sweep.k_schedule) after them, compared with each."""
    families: dict[str, list[str]] = {}
    for sid in sids:
        if not grid.servers[sid].is_baseline:
            rest = {k: v for k, v in grid.servers[sid].spec.items() if k not in ("num_speculative_tokens", "k_schedule")}
            families.setdefault(stable_hash(rest), []).append(sid)
    out = []
    for family in families.values():
        family = sorted(family, key=lambda s: (bool(grid.servers[s].spec.get("k_schedule")),
                                               grid.servers[s].spec["num_speculative_tokens"]))
        out += [(hi, lo) for lo, hi in itertools.combinations(family, 2)]
    return out


def comparisons(grid: Grid, members: list[str]) -> list[tuple[str, str]]:
    """A group's comparisons, (cell, reference): each member against its baseline, then the K comparisons."""
    return [(m, grid.baseline_of[m]) for m in members if m in grid.baseline_of] + k_pairs(grid, members)


def by_setting(grid: Grid, sid: str) -> dict[str, dict[int, str]]:
    """A server cell's bench cells by setting (the bench spec without its repeat: a hash), then by repeat."""
    out: dict[str, dict[int, str]] = {}
    for bid, cell in grid.benches[sid].items():
        setting = stable_hash({k: v for k, v in cell.spec.items() if k != "repeat"})
        out.setdefault(setting, {})[int(cell.spec["repeat"])] = bid
    return out


def setting_text(spec: dict) -> str:
    out = f"{spec['dataset']['name']} think={spec['thinking']} c={spec['concurrency']} out={spec['max_tokens']}"
    return out + (f" prompt={spec['prompt_length']}" if spec.get("prompt_length") is not None else "")


def rule(sweep: dict):
    """The module whose `look` and `comparison` a study's looks go through: spending (planned) or sequential."""
    return spending if repeats.looks(sweep) == repeats.PLANNED else sequential


def check_plan(grid: Grid, lead: str) -> None:
    """Refuse a group whose first looks were planned by another budget, or under the planned rule where the
    study now looks after every repeat (module doc), in one line."""
    path = grid.server_dir(lead) / layout.LOOK_PLAN
    if not path.exists():
        return
    b, first = repeats.budget(grid.configs[lead]["sweep"]), read_json(path)
    if b.get("looks") != repeats.PLANNED or first["plan"] != list(spending.plan(b["max_repeats"])):
        raise ConfigError(
            f"config: group {lead} looked by the plan {first['plan']} of sweep.max_repeats="
            f"{first['budget']['max_repeats']}, whose last look spent its alpha: keep sweep.looks=planned and that "
            "sweep.max_repeats, or start a new results_dir (sweep.looks=every: a sequence any budget continues)")


def group_record(grid: Grid, lead: str) -> dict | None:
    """The group's last stopping look (layout.LOOKS), or None where it has not stopped under this budget."""
    path = grid.server_dir(lead) / layout.LOOKS
    record = read_json(path) if path.exists() else None
    return record if record and record.get("budget") == repeats.budget(grid.configs[lead]["sweep"]) else None


class Looks:
    """A group job's looks, one before each repeat (stop_before) and one after its last (finish)."""

    def __init__(self, grid: Grid, members: list[str]):
        self.grid, self.members, self.lead = grid, members, residency.group_of(grid, members[0])
        self.budget = repeats.budget(grid.configs[members[0]]["sweep"])
        self.rule = rule(grid.configs[members[0]]["sweep"])
        check_plan(grid, self.lead)
        self.started, self.last, self.stopped = time.monotonic(), None, False
        self.said: set[str] = set()          # the comparisons whose answer the console was told
        self._rows: dict[tuple[str, str], list[dict]] = {}
        self.cell_of: dict[str, str] = {}           # a comparison's name -> its cell

    @classmethod
    def of(cls, grid: Grid, members: list[str]) -> "Looks | None":
        """The group's looks where its study asks for `auto` and it has a comparison; None for a fixed number of
        repeats, and for a group with nothing to compare (it runs its budget: a lone baseline)."""
        auto = repeats.is_auto(grid.configs[members[0]]["sweep"]) and comparisons(grid, members)
        return cls(grid, members) if auto else None

    def stop_before(self, repeat: int) -> bool:
        """Look before repeat `repeat` (0-based: `repeat` repeats are done) starts, once per repeat: True where the
        group stops here (its records written)."""
        if self.stopped or repeat == self.last:
            return self.stopped
        self.last = repeat
        return self._look(repeat)

    def finish(self) -> None:
        """The look after the job's last turn: the budget's end, or a repeat that failed and is left to a rerun."""
        if not self.stopped and self.last is not None:
            self._look(self.last + 1)

    def short(self, name: str) -> str:
        """A comparison as the console names it: `K=3 vs baseline at <setting>`, `A/A vs baseline at ...`."""
        spec = self.grid.servers[self.cell_of[name]].spec
        who = "A/A" if spec.get("aa") else f"K={spec.get('num_speculative_tokens')}"
        vs, at = name.split(" vs ", 1)[1].split(" at ", 1)
        ref = self.grid.servers[vs].spec if vs in self.grid.servers else {}
        return f"{who} vs {'baseline' if ref.get('method') == 'none' else 'K=' + str(ref.get('num_speculative_tokens'))}" \
               f" at {at.rsplit(' (', 1)[0]}"

    def blocks(self, done: int) -> dict[str, list[float]]:
        """Each comparison's blocks (sequential.block_log_ratios) over repeats 0 .. done - 1."""
        out = {}
        for cell, ref in comparisons(self.grid, self.members):
            mine, theirs = by_setting(self.grid, cell), by_setting(self.grid, ref)
            for setting in sorted(mine.keys() & theirs.keys()):
                spec = self.grid.benches[cell][next(iter(mine[setting].values()))].spec
                name = f"{cell} vs {ref} at {setting_text(spec)} ({setting[:6]})"
                self.cell_of[name] = cell
                out[name] = sequential.block_log_ratios(
                    [self._requests(cell, mine[setting].get(r)) for r in range(done)],
                    [self._requests(ref, theirs[setting].get(r)) for r in range(done)])
        return out

    def _requests(self, sid: str, bid: str | None) -> list[dict]:
        """A finished, valid bench cell's request rows (read once: a finished cell does not change); else none."""
        if bid is None or not self.grid.metrics_path(sid, bid).exists():
            return []
        if (sid, bid) not in self._rows:
            valid = read_json(self.grid.metrics_path(sid, bid)).get("valid")
            self._rows[sid, bid] = read_jsonl(self.grid.bench_dir(sid, bid) / layout.REQUESTS) if valid else []
        return self._rows[sid, bid]

    def _look(self, done: int) -> bool:
        b, blocks = self.budget, self.blocks(done)
        checks = {n for n in blocks if self.grid.servers[self.cell_of[n]].spec.get("aa")}
        stop, records = self.rule.look({n: v for n, v in blocks.items() if n not in checks}, b["max_repeats"],
                                       b["equivalence"], repeats=done)
        # the A/A check holds no group: it is read wherever the group stops (either rule holds at any stop)
        records.update({n: self.rule.comparison(blocks[n], b["max_repeats"], b["equivalence"], repeats=done)
                        for n in checks})
        path = self.grid.server_dir(self.lead) / layout.LOOK_PLAN
        if self.rule is spending and done in spending.plan(b["max_repeats"]) and not path.exists():
            atomic_write_json(path, {"plan": list(spending.plan(b["max_repeats"])), "budget": b, "first_look": done,
                                     "written_at": time.time()})
        late = bool(b["max_minutes"]) and time.monotonic() - self.started > 60 * b["max_minutes"]
        answered = sum(r["verdict"] not in (None, sequential.UNRESOLVED) for r in records.values())
        for n, r in sorted(records.items()):          # each comparison once, at the look that answers it
            if r["verdict"] not in (None, sequential.UNRESOLVED) and n not in self.said:
                self.said.add(n)
                say(f"[specsweep] group {self.lead}: answered after {done} repeat(s): {self.short(n)}: "
                    f"{stats.format_ratio(r.get('ratio'), r.get('ci_low'), r.get('ci_high'))} {r['verdict']}")
        if not (stop or late):
            say(f"[specsweep] group {self.lead}: after {done} repeat(s) {answered} of {len(records)} comparisons "
                "answered: the group goes on")
            return False
        if done >= b["max_repeats"]:
            why, stopped = f"the budget of {b['max_repeats']} repeats is spent", BUDGET
        elif stop:
            why, stopped = f"answered at repeat {done}", ANSWERED
        else:
            why, stopped = f"the time budget of {b['max_minutes']:g} min was spent at repeat {done}", TIME
        for r in records.values():      # those still open are read at the group's stop, its budget
            if r["verdict"] is None:
                r.update(verdict=sequential.UNRESOLVED, stopped=GROUP if stopped == ANSWERED else stopped)
        skipped = [(sid, bid) for sid in self.members for bid in residency.pending(self.grid, sid)
                   if int(self.grid.benches[sid][bid].spec["repeat"]) >= done]
        for sid, bid in skipped:
            atomic_write_json(repeats.record_path(self.grid, sid, bid),
                              {"not_needed": True, "why": why, "repeats_done": done, "group": self.lead,
                               "budget": b, "written_at": time.time()})
        atomic_write_json(self.grid.server_dir(self.lead) / layout.LOOKS,
                          {"budget": b, "repeats": done, "stopped": stopped, "why": why, "not_needed": len(skipped),
                           "comparisons": records, "minutes": (time.monotonic() - self.started) / 60,
                           "written_at": time.time()})
        say(f"[specsweep] group {self.lead}: {answered} of {len(records)} comparisons answered after {done} "
            f"repeat(s): {why}; {len(skipped)} bench cell(s) recorded not needed")
        self.stopped = True
        return True


def sequence_columns(grid: Grid, sid: str, cell_runs: list[list[dict]], ref_runs: list[list[dict]]) -> dict:
    """A comparison's `looks` and `stopped`, and in an `auto` study its interval and verdict from its stopping rule
    (rule: planned looks or the confidence sequence) over its repeat blocks (cell_runs[r], ref_runs[r]: repeat r of each side, [] where it has none), the
    rule its group stopped by; a fixed study's is read once, at its budget (`fixed`)."""
    sweep = grid.configs[sid]["sweep"]
    b = repeats.budget(sweep)
    if b is None:
        return {"looks": 1, "stopped": FIXED}
    record = group_record(grid, residency.group_of(grid, sid))
    cap = record["repeats"] if record else b["max_repeats"]      # where the group stopped: each comparison's budget
    blocks = sequential.block_log_ratios(cell_runs, ref_runs)
    if rule(sweep) is spending:       # the plan stays the budget's; a comparison open at the group's stop is closed
        rec = spending.comparison(blocks, b["max_repeats"], b["equivalence"], repeats=min(cap, len(cell_runs)))
        if rec["verdict"] is None:
            rec.update(verdict=sequential.UNRESOLVED, stopped=BUDGET)
    else:
        rec = sequential.comparison(blocks, cap, b["equivalence"], repeats=len(cell_runs))
    stopped = {ANSWERED: f"answered at repeat {rec['answered_at']}", BUDGET: BUDGET}.get(rec["stopped"])
    if rec["stopped"] == BUDGET and record and record["stopped"] != BUDGET:    # the group stopped before its budget
        stopped = TIME if record["stopped"] == TIME else f"{GROUP} at repeat {cap}"
    return {"speedup_e2e_ci_low": rec["ci_low"], "speedup_e2e_ci_high": rec["ci_high"],
            "verdict": stats.verdict_text(rec["verdict"], b["equivalence"]) if rec["verdict"] else None,
            "looks": rec["looks"], "stopped": stopped}
