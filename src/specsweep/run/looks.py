"""`sweep.repeats: auto` in a group's job (runner.run_cells; docs/methods.md#sweeprepeats-auto-in-a-groups-job).

Before each repeat the group looks at its comparisons (comparisons: each member against the lead, its baseline,
which holds the speculative cells and the A/A cell; each two speculative members that differ only in K; each at
every bench setting) through the study's rule (spending.comparison or sequential.comparison) on the blocks of the
repeats done. A comparison is answered once its verdict is decided and, where the study asks for one
(sweep.precision), its interval is that narrow. Each setting (schedule.settings: everything in the bench spec but
the repeat) stops apart, once its own comparisons are answered: its bench cells of the repeats left get not-needed
records (repeats.py: they count as done). Within an open setting, a member that no open comparison needs (the A/A
cell: once its baseline is not needed) stops taking turns there, its cells left recorded not needed too, and the
turns left rotate among the members still needed (schedule.turns). The A/A comparison (sweep.aa) holds nothing: it
is a check of the others, read wherever its baseline stops. The group ends once no setting is open, or its budget
is spent (sweep.max_repeats; sweep.max_minutes, this job's time): every setting still open then stops, its open
comparisons `unresolved`. The group's record (layout.LOOKS, in the lead's folder, written at every look) holds the
budget, each setting's stop, and each comparison's record: why and when it stopped (`stopped`, `stopped_at`,
`stopped_s`) and when it was answered (`answered_at`, the repeat; `answered_s`, wall seconds since the group's
first turn).

A look is a function of the repeats on disk: a job that starts on a group with repeats done (a rerun) replays the
looks of those repeats in order, so each member and setting stops where the first job stopped it (the seconds come
from the earlier record).

Under `sweep.looks: planned` (spending.py) the looks that count are the plan's (6, 10, 14, 20 for max_repeats 20):
the looks between them change nothing. The plan is fixed by the budget the group first looked by (layout.LOOK_PLAN,
written at its first planned look, with its spending function and the boundaries it used): a rerun under another
budget, or under sweep.looks=every, is refused, since the first budget's alpha is spent by its last look (a new
results_dir starts afresh); a group planned by an older design (before the boundaries were calibrated, or under
O'Brien-Fleming-type spending at 6, 10, 14, 20: issue 54) keeps its own looks, spending and boundaries
(calibration).

The summary reads each comparison again from its finished repeats (sequence_columns), with the same rule, up to the
repeat its record says it stopped at.
"""
from __future__ import annotations

import itertools
import socket
import time

from specsweep.core import layout
from specsweep.core.errors import ConfigError
from specsweep.core.labels import k_label
from specsweep.core.progress import say
from specsweep.core.results import atomic_write_json, read_json, read_jsonl
from specsweep.grid import repeats, schedule
from specsweep.grid.cells import Grid, stable_hash
from specsweep.run import launch_record
from specsweep.verdicts import launches, sequential, spending, stats
from specsweep.verdicts.sequential import ANSWERED, BUDGET, FIXED, TIME  # why a comparison stopped

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


def setting_comparisons(grid: Grid, members: list[str]) -> list[tuple[str, str, str]]:
    """The group's comparisons at each setting both sides run: (cell, ref, setting)."""
    out = []
    for cell, ref in comparisons(grid, members):
        mine, theirs = schedule.settings(grid, cell), schedule.settings(grid, ref)
        out += [(cell, ref, s) for s in sorted(mine.keys() & theirs.keys())]
    return out


def comparison_name(grid: Grid, cell: str, ref: str, setting: str, by_repeat: dict[int, str]) -> str:
    """A comparison's name in the group's record: its sides and setting."""
    spec = grid.benches[cell][next(iter(by_repeat.values()))].spec
    return f"{cell} vs {ref} at {setting_text(spec)} ({setting[:6]})"


def comparison_label(grid: Grid, cell: str, ref: str) -> str:
    """`K=7 vs K=3`, `K=3 vs baseline`, `A/A vs baseline`: a comparison as a reader (and doctor) names it."""
    def side(sid: str) -> str:
        spec = grid.servers[sid].spec
        if spec.get("aa"):
            return "A/A"
        return "baseline" if grid.servers[sid].is_baseline else k_label(spec["num_speculative_tokens"],
                                                                         spec.get("k_schedule"))
    return f"{side(cell)} vs {side(ref)}"


def setting_text(spec: dict) -> str:
    """A setting as its records and lines name it (`synthetic think=False c=4 out=64`), and how its turns ran where
    that is not the default (waves, the warm-up once, exact lengths): the forecast matches recorded spreads on it,
    so a study in waves is never forecast from closed-loop blocks."""
    out = f"{spec['dataset']['name']} think={spec['thinking']} c={spec['concurrency']} out={spec['max_tokens']}"
    return out + "".join([f" prompt={spec['prompt_length']}" if spec.get("prompt_length") is not None else "",
                          f" waves={spec['waves']}" if spec.get("waves") else "",
                          " warm-up once" if spec.get("warmup_turns", "every") != "every" else "",
                          " exact length" if spec.get("ignore_eos") else ""])


def rule(sweep: dict):
    """The module whose `look` and `comparison` a study's looks go through: spending (planned) or sequential."""
    return spending if repeats.looks(sweep) == repeats.PLANNED else sequential


def check_plan(grid: Grid, lead: str) -> None:
    """Refuse a group whose first looks were planned by another budget, or under the planned rule where the
    study now looks after every repeat (module doc), in one line. A plan of the same budget made by an older
    design (another spending function or look fractions) is no refusal: the group keeps it (calibration)."""
    path = grid.server_dir(lead) / layout.LOOK_PLAN
    if not path.exists():
        return
    b, first = repeats.budget(grid.configs[lead]["sweep"]), read_json(path)
    if b.get("looks") != repeats.PLANNED or first["budget"]["max_repeats"] != b["max_repeats"]:
        raise ConfigError(
            f"config: group {lead} looked by the plan {first['plan']} of sweep.max_repeats="
            f"{first['budget']['max_repeats']}, whose last look spent its alpha: keep sweep.looks=planned and that "
            "sweep.max_repeats, or start a new results_dir (sweep.looks=every: a sequence any budget continues)")


def calibration(grid: Grid, lead: str) -> dict:
    """A planned group's design (spending.comparison's keywords), as its plan record says: its looks, spending
    function and boundaries. A group first planned before issue 54's calibration (no `boundaries` in its record)
    keeps issue 46's (spending.NOMINAL_T), one planned before issue 54's look design (no `spending`) its
    O'Brien-Fleming-type spending, each its recorded looks; a group not yet planned, today's design."""
    path = grid.server_dir(lead) / layout.LOOK_PLAN
    plan = read_json(path) if path.exists() else {}
    if not plan:
        return {"calibration": spending.CALIBRATED, "spending": spending.SPENDING, "looks": None}
    return {"calibration": plan.get("boundaries", spending.NOMINAL_T), "spending": plan.get("spending", spending.OBF),
            "looks": tuple(plan["plan"])}


def group_record(grid: Grid, lead: str) -> dict | None:
    """The group's record after its last look (layout.LOOKS), or None where none was written under this budget."""
    path = grid.server_dir(lead) / layout.LOOKS
    record = read_json(path) if path.exists() else None
    return record if record and record.get("budget") == repeats.budget(grid.configs[lead]["sweep"]) else None


class Looks:
    """A group job's looks, one before each repeat (stop_before) and one after its last (finish)."""

    def __init__(self, grid: Grid, members: list[str]):
        self.grid, self.members, self.lead = grid, members, schedule.group_of(grid, members[0])
        sweep = grid.configs[members[0]]["sweep"]
        self.budget, self.precision = repeats.budget(sweep), repeats.precision(sweep)
        self.rule = rule(sweep)
        check_plan(grid, self.lead)
        self.started, self.first_turn, self.stopped = time.monotonic(), None, False
        self.at = 0                                 # the repeats the looks so far have seen
        self.dropped = False                        # a look wrote not-needed records: the turns left change
        self._rows: dict[tuple[str, str], list[dict]] = {}
        path = grid.server_dir(self.lead) / layout.LOOKS
        self.earlier = read_json(path) if path.exists() else {}    # an earlier job's record: its seconds
        self.offset = float(self.earlier.get("seconds") or 0.0)
        self.comparisons = self._comparisons()
        self.settings = {c["setting"]: c["setting_text"] for c in self.comparisons.values()}
        self.live = {s: {m for m in members if s in schedule.settings(grid, m)} for s in self.settings}
        self.closed: dict[str, dict] = {}           # setting -> its stop (repeat, why)
        self.records: dict[str, dict] = {}
        self.not_needed = 0

    @classmethod
    def of(cls, grid: Grid, members: list[str]) -> "Looks | None":
        """The group's looks where its study asks for `auto` and it has a comparison; None for a fixed number of
        repeats, and for a group with nothing to compare (it runs its budget: a lone baseline)."""
        auto = repeats.is_auto(grid.configs[members[0]]["sweep"]) and comparisons(grid, members)
        return cls(grid, members) if auto else None

    def _comparisons(self) -> dict[str, dict]:
        """Each comparison of the group at each setting both sides run: its name, sides, setting, and whether it is
        the A/A check."""
        out = {}
        for cell, ref, setting in setting_comparisons(self.grid, self.members):
            mine, theirs = schedule.settings(self.grid, cell)[setting], schedule.settings(self.grid, ref)[setting]
            out[comparison_name(self.grid, cell, ref, setting, mine)] = {
                "cell": cell, "ref": ref, "setting": setting, "by_repeat": (mine, theirs),
                "label": comparison_label(self.grid, cell, ref),
                "setting_text": setting_text(self.grid.benches[cell][next(iter(mine.values()))].spec),
                "aa": bool(self.grid.servers[cell].spec.get("aa")),
                "launch_sd": launch_record.pinned(self.grid, cell, ref, setting)["launch_sd"]}
        return out

    def turn_starts(self) -> None:
        """The runner's word that a turn starts: the first one starts the clock of `answered_s`."""
        if self.first_turn is None:
            self.first_turn = time.monotonic()

    def seconds(self) -> float:
        """Wall seconds since the group's first turn (an earlier job's, for a rerun, counted in)."""
        return self.offset + (time.monotonic() - self.first_turn if self.first_turn is not None else 0.0)

    def stop_before(self, repeat: int) -> bool:
        """Look before repeat `repeat` (0-based: `repeat` repeats are done) starts: the looks of every repeat not yet
        looked at, in order (a rerun replays those its earlier job took: each look before this job's first turn reads
        its seconds from the earlier record). True where the group stops here (its
        records written); `dropped` says whether a setting or member stopped, so the turns left change."""
        while not self.stopped and self.at < repeat:
            self.at += 1
            self._look(self.at, live=self.first_turn is not None)   # before this job's first turn: a replay
        return self.stopped

    def finish(self) -> None:
        """The look after the job's last turn: the budget's end, or a repeat that failed and is left to a rerun."""
        if not self.stopped and self.at:
            self.stop_before(self.at + 1)

    def _blocks(self, c: dict, done: int) -> list[float]:
        return [v for _, v in self._repeat_blocks(c, done)]

    def _repeat_blocks(self, c: dict, done: int) -> list[tuple[int, float]]:
        """(repeat, block) of each repeat 0 .. done - 1 that gives a block (sequential.block_log_ratios)."""
        mine, theirs = c["by_repeat"]
        return [(r, v) for r in range(done) for v in sequential.block_log_ratios(
            [self._requests(c["cell"], mine.get(r))], [self._requests(c["ref"], theirs.get(r))])]

    def blocks(self, done: int) -> dict[str, list[float]]:
        """Each comparison's blocks (sequential.block_log_ratios) over repeats 0 .. done - 1."""
        return {name: self._blocks(c, done) for name, c in self.comparisons.items()}

    def _requests(self, sid: str, bid: str | None) -> list[dict]:
        """A finished, valid bench cell's request rows (read once: a finished cell does not change); else none."""
        if bid is None or not self.grid.metrics_path(sid, bid).exists():
            return []
        if (sid, bid) not in self._rows:
            valid = read_json(self.grid.metrics_path(sid, bid)).get("valid")
            self._rows[sid, bid] = read_jsonl(self.grid.bench_dir(sid, bid) / layout.REQUESTS) if valid else []
        return self._rows[sid, bid]

    def short(self, name: str) -> str:
        """A comparison as the console names it: `K=3 vs baseline at <setting>`, `A/A vs baseline at ...`."""
        c = self.comparisons[name]
        spec, ref = self.grid.servers[c["cell"]].spec, self.grid.servers[c["ref"]].spec
        who = "A/A" if spec.get("aa") else f"K={spec.get('num_speculative_tokens')}"
        vs = "baseline" if ref.get("method") == "none" else f"K={ref.get('num_speculative_tokens')}"
        return f"{who} vs {vs} at {c['setting_text']}"

    def _running(self, name: str) -> bool:
        """A comparison still taking blocks: its setting open and both its sides taking turns there."""
        c = self.comparisons[name]
        return c["setting"] not in self.closed and {c["cell"], c["ref"]} <= self.live[c["setting"]]

    def _answered_s(self, name: str, rec: dict, live: bool) -> float | None:
        """The seconds at which a comparison was first answered: kept from an earlier look, now at a live one, else
        (a look replayed on a rerun) the earlier job's record's where it says the same repeat."""
        before = self.records.get(name) or {}
        if before.get("answered_s") is not None or rec["answered_at"] is None:
            return before.get("answered_s")
        if live:
            return round(self.seconds(), 3)
        earlier = self.earlier.get("comparisons", {}).get(name) or {}
        return earlier.get("answered_s") if earlier.get("answered_at") == rec["answered_at"] else None

    def _look(self, done: int, live: bool) -> None:
        b = self.budget
        for name, c in self.comparisons.items():
            if self._running(name):
                kept = self._repeat_blocks(c, done)
                rec = self.rule.comparison([v for _, v in kept], b["max_repeats"], b["equivalence"], repeats=done,
                                           precision=self.precision, launch_sd=c["launch_sd"], **self._calibration())
                # the block values themselves, for a replay (issue 54 item 6): repeat and mean log(ref / cell) e2e
                rec.update(cell=c["cell"], ref=c["ref"], setting=c["setting_text"], label=c["label"], answered_s=None,
                           block_repeats=[r for r, _ in kept], block_values=[v for _, v in kept])
                rec["answered_s"] = self._answered_s(name, rec, live)
                if live and rec["stopped"] == ANSWERED and (self.records.get(name) or {}).get("stopped") != ANSWERED:
                    say(f"[specsweep] group {self.lead}: answered after {done} repeat(s): {self.short(name)}: "
                        f"{stats.format_ratio(rec.get('ratio'), rec.get('ci_low'), rec.get('ci_high'))} {rec['verdict']}")
                self.records[name] = rec
        self._plan_record(done)
        late = live and bool(b["max_minutes"]) and time.monotonic() - self.started > 60 * b["max_minutes"]
        for setting in self.settings:
            if setting in self.closed:
                continue
            mine = [n for n, c in self.comparisons.items() if c["setting"] == setting and self._running(n)]
            open_ = [n for n in mine if not self.comparisons[n]["aa"] and self.records[n]["stopped"] != ANSWERED]
            if not open_:
                self._close(setting, done, ANSWERED, f"answered at repeat {done}", live)
            elif done >= b["max_repeats"]:
                self._close(setting, done, BUDGET, f"the budget of {b['max_repeats']} repeats is spent", live)
            elif late:
                self._close(setting, done, TIME, f"the time budget of {b['max_minutes']:g} min was spent at repeat "
                                                 f"{done}", live)
            else:
                needed = {m for n in open_ for m in (self.comparisons[n]["cell"], self.comparisons[n]["ref"])}
                needed |= {c["cell"] for n, c in self.comparisons.items() if c["setting"] == setting and c["aa"]
                           and c["ref"] in needed}
                for member in sorted(self.live[setting] - needed):
                    self._drop(setting, member, done, f"not needed after repeat {done}: no open comparison at "
                                                      f"{self.settings[setting]} needs it", live)
        if len(self.closed) == len(self.settings):
            self.stopped = True
        self._write(done)

    def _stop(self, name: str, done: int, why: str, stopped: str, live: bool) -> None:
        """A comparison takes no more blocks: its record says why and when; one still open is `unresolved`."""
        rec = self.records.get(name)
        if rec is None or rec.get("stopped_at") is not None:
            return
        if rec["stopped"] != ANSWERED:
            rec.update(verdict=rec["verdict"] or sequential.UNRESOLVED, stopped=stopped)
        earlier = self.earlier.get("comparisons", {}).get(name) or {}
        rec.update(stopped_at=done, stopped_s=round(self.seconds(), 3) if live else
                   earlier.get("stopped_s") if earlier.get("stopped_at") == done else None,
                   why=f"answered at repeat {rec['answered_at']}" if rec["stopped"] == ANSWERED else why)

    def _close(self, setting: str, done: int, why_kind: str, why: str, live: bool) -> None:
        for name, c in self.comparisons.items():
            if c["setting"] == setting and self._running(name):
                self._stop(name, done, why, GROUP if c["aa"] and why_kind == ANSWERED else why_kind, live)
        for member in sorted(self.live[setting]):
            self._skip(setting, member, done, why)
        self.closed[setting] = {"stopped": why_kind, "at": done, "why": why}

    def _drop(self, setting: str, member: str, done: int, why: str, live: bool) -> None:
        for name, c in self.comparisons.items():
            if c["setting"] == setting and member in (c["cell"], c["ref"]) and self._running(name):
                self._stop(name, done, why, GROUP, live)
        self._skip(setting, member, done, why)
        self.live[setting].discard(member)

    def _skip(self, setting: str, member: str, done: int, why: str) -> None:
        """Not-needed records for a member's pending bench cells at a setting, from repeat `done` on."""
        pending = set(schedule.pending(self.grid, member))
        for rep, bid in schedule.settings(self.grid, member).get(setting, {}).items():
            if rep >= done and bid in pending:
                atomic_write_json(repeats.record_path(self.grid, member, bid),
                                  {"not_needed": True, "why": why, "repeats_done": done, "group": self.lead,
                                   "budget": self.budget, "written_at": time.time()})
                self.not_needed += 1
                self.dropped = True

    def _calibration(self) -> dict:
        return calibration(self.grid, self.lead) if self.rule is spending else {}

    def _plan_record(self, done: int) -> None:
        b, path = self.budget, self.grid.server_dir(self.lead) / layout.LOOK_PLAN
        if self.rule is spending and done in spending.plan(b["max_repeats"]) and not path.exists():
            atomic_write_json(path, {"plan": list(spending.plan(b["max_repeats"])), "budget": b, "first_look": done,
                                     "boundaries": spending.CALIBRATED, "spending": spending.SPENDING,
                                     "written_at": time.time()})

    def _write(self, done: int) -> None:
        """The group's record after this look; one line of what it says."""
        real = [r for n, r in self.records.items() if not self.comparisons[n]["aa"]]
        answered = sum(r["stopped"] == ANSWERED for r in self.records.values())
        if self.stopped:
            kinds = {s["stopped"] for s in self.closed.values()}
            stopped = BUDGET if BUDGET in kinds else TIME if TIME in kinds else ANSWERED
            why = next(s["why"] for s in self.closed.values() if s["stopped"] == stopped) if stopped != ANSWERED \
                else f"answered at repeat {max(s['at'] for s in self.closed.values())}"
        else:
            stopped, why = None, f"{len(self.settings) - len(self.closed)} of {len(self.settings)} setting(s) open"
        atomic_write_json(self.grid.server_dir(self.lead) / layout.LOOKS,
                          {"budget": self.budget, "repeats": done, "stopped": stopped, "why": why,
                           "host": socket.gethostname(),
                           "not_needed": self.not_needed, "seconds": round(self.seconds(), 3),
                           "settings": {s: {"setting": self.settings[s], **self.closed.get(s, {}),
                                            "members": sorted(self.live[s]) if s not in self.closed else []}
                                        for s in self.settings},
                           "comparisons": self.records, "minutes": (time.monotonic() - self.started) / 60,
                           "written_at": time.time()})
        if self.stopped:
            say(f"[specsweep] group {self.lead}: {answered} of {len(self.records)} comparisons answered after {done} "
                f"repeat(s): {why}; {self.not_needed} bench cell(s) recorded not needed")
        else:
            say(f"[specsweep] group {self.lead}: after {done} repeat(s) "
                f"{sum(r['stopped'] == ANSWERED for r in real)} of {len(real)} comparisons answered, {why}: "
                "the group goes on")


def sequence_columns(grid: Grid, sid: str, ref: str, bids: list[str], cell_runs: list[list[dict]],
                     ref_runs: list[list[dict]], paired: dict | None = None) -> dict:
    """A comparison's `looks` and `stopped`, and in an `auto` study its interval and verdict from its stopping rule
    (planned looks or the confidence sequence) over its repeat blocks (cell_runs[r], ref_runs[r]: repeat r of each
    side, [] where it has none), up to the repeat its record in the group's record says it stopped at (older
    records: where the group stopped), with the repeat at which it was answered and the record's seconds to that
    look (`answered_repeat`, `answered_s`); a fixed study's is read once, at its budget (`fixed`). Each carries the
    launch SD its group pinned (launch_record; `launch_sd`, `launch_sd_launches`): an `auto` comparison through its
    rule, a fixed one as `paired`'s e2e interval widened (launches.widen_ratio) and its verdict read again."""
    sweep = grid.configs[sid]["sweep"]
    b = repeats.budget(sweep)
    setting = next((s for s, by in schedule.settings(grid, sid).items() if set(by.values()) & set(bids)), None)
    carried = launch_record.pinned(grid, sid, ref, setting) if setting else {"launch_sd": 0.0, "launches": None}
    tau = carried["launch_sd"]
    launch = {"launch_sd": tau, "launch_sd_launches": carried.get("launches")}
    if b is None:
        out = {"looks": 1, "stopped": FIXED, "answered_repeat": None, "answered_s": None, **launch}
        if tau and paired and paired.get("speedup_e2e_ci_low") is not None:
            e = repeats.equivalence(sweep)
            low, high = launches.widen_ratio(paired["speedup_e2e_ci_low"], paired["speedup_e2e_ci_high"],
                                             paired["speedup_e2e_geomean"], tau)
            v = stats.verdict(low, high, e)
            out.update(speedup_e2e_ci_low=low, speedup_e2e_ci_high=high, verdict=stats.verdict_text(v, e) if v else None)
        return out
    record = group_record(grid, schedule.group_of(grid, sid))
    name = comparison_name(grid, sid, ref, setting, schedule.settings(grid, sid)[setting]) if setting else None
    mine = (record or {}).get("comparisons", {}).get(name) or {}
    cap = mine.get("repeats") or (record["repeats"] if record else b["max_repeats"])   # where it stopped
    blocks = sequential.block_log_ratios(cell_runs, ref_runs)
    precision = repeats.precision(sweep)
    if rule(sweep) is spending:       # the plan stays the budget's; a comparison open at its stop is closed
        rec = spending.comparison(blocks, b["max_repeats"], b["equivalence"], repeats=min(cap, len(cell_runs)),
                                  precision=precision, launch_sd=tau, **calibration(grid, schedule.group_of(grid, sid)))
        if rec["verdict"] is None:
            rec.update(verdict=sequential.UNRESOLVED, stopped=BUDGET)
    else:
        rec = sequential.comparison(blocks, cap, b["equivalence"], repeats=len(cell_runs), precision=precision,
                                    launch_sd=tau)
    stopped = {ANSWERED: f"answered at repeat {rec['answered_at']}", BUDGET: BUDGET}.get(rec["stopped"])
    why = mine.get("stopped") or (record or {}).get("stopped")
    if rec["stopped"] == BUDGET and why and why not in (BUDGET, ANSWERED):    # it stopped before its budget
        stopped = TIME if why == TIME else f"{GROUP} at repeat {cap}"
    elif rec["stopped"] == BUDGET and record and not mine and record["stopped"] == ANSWERED:   # an older record
        stopped = f"{GROUP} at repeat {cap}"
    answered = rec["answered_at"] if rec["stopped"] == ANSWERED else None
    return {"speedup_e2e_ci_low": rec["ci_low"], "speedup_e2e_ci_high": rec["ci_high"],
            "verdict": stats.verdict_text(rec["verdict"], b["equivalence"]) if rec["verdict"] else None,
            "looks": rec["looks"], "stopped": stopped, "answered_repeat": answered,
            "answered_s": mine.get("answered_s") if answered is not None and mine.get("answered_at") == answered
            else None, **launch}


def answered_text(row: dict) -> str:
    """`answered at 64 s, repeat 10` (issue 54's time to answer), `answered at repeat 10` without its seconds, or
    nothing for a comparison not answered or a fixed study."""
    if row.get("answered_repeat") is None:
        return ""
    seconds = f"{row['answered_s']:.0f} s, " if row.get("answered_s") is not None else ""
    return f"answered at {seconds}repeat {row['answered_repeat']}"
