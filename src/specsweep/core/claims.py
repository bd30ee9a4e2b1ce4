"""Ports and GPUs: exclusive flock'd claims, so concurrent jobs and studies never collide.

A claim lives as long as the process that holds it: a killed job's claims vanish with it.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil

from specsweep.core.errors import ServerError


def default_lock_dir() -> Path:
    """Per user, so that another user on a shared node neither blocks nor reads ours: SPECSWEEP_LOCK_DIR, else
    $XDG_RUNTIME_DIR/specsweep-locks (a per-user tmpfs where the login set one up), else the temp dir with the
    uid in the name."""
    if os.environ.get("SPECSWEEP_LOCK_DIR"):
        return Path(os.environ["SPECSWEEP_LOCK_DIR"])
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):   # a SLURM job may inherit one that its node does not have
        return Path(runtime) / "specsweep-locks"
    return Path(tempfile.gettempdir()) / f"specsweep-locks-{os.getuid()}"


LOCK_DIR = default_lock_dir()


def lock_dir() -> Path:
    """LOCK_DIR, created mode 0700, and refused (one line, with the fix) unless it is a real directory of ours
    that only we can use: in a shared temp dir another user could have made it first, to see or hold our locks
    (and the API-key files kept there)."""
    path = LOCK_DIR
    fix = "remove it, or set SPECSWEEP_LOCK_DIR to a directory of your own"
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as e:
        raise ServerError(f"cannot create lock directory {path} ({e.strerror}): set SPECSWEEP_LOCK_DIR to a "
                          "directory of your own") from None
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise ServerError(f"lock directory {path} is a symlink (to {os.readlink(path)}): {fix}")
    if not stat.S_ISDIR(st.st_mode):
        raise ServerError(f"lock directory {path} is not a directory: {fix}")
    if st.st_uid != os.getuid():
        raise ServerError(f"lock directory {path} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}): {fix}")
    if st.st_mode & 0o077:
        raise ServerError(f"lock directory {path} is open to other users (mode {stat.S_IMODE(st.st_mode):o}): "
                          f"run `chmod 700 {path}`, or set SPECSWEEP_LOCK_DIR to a directory of your own")
    return path


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
    fd = os.open(lock_dir() / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
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


def listeners(port: int) -> set[int]:
    """The pids this user can see listening on a TCP port."""
    try:
        return {c.pid for c in psutil.net_connections("tcp")
                if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid}
    except (psutil.Error, OSError):
        return set()


def port_owner(port: int) -> str:
    """Who listens on a port, when this user can see it."""
    for pid in sorted(listeners(port)):
        try:
            return f"pid {pid} ({' '.join(psutil.Process(pid).cmdline()[:3])})"
        except psutil.Error:
            continue
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
    """n GPUs nobody else holds; [] for a CPU cell (n = 0) or on a machine without GPUs."""
    if not n or not inventory:
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


def slurm_step_gpus() -> list[str] | None:
    """Inside a SLURM job step (where Snakemake's SLURM executor runs a rule) SLURM owns the GPUs: the ones it
    gave this step (CUDA_VISIBLE_DEVICES; none when it gave none). None elsewhere, an `salloc` shell or a batch
    script included (no SLURM_STEP_ID there, measured): a local Snakemake run there shares the allocation's GPUs
    among its cells by lock files."""
    if "SLURM_STEP_ID" not in os.environ:
        return None
    return [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]


def take_gpus(n: int) -> tuple[list[str], list[Claim]]:
    """The GPUs a server cell of n (tensor x data parallel) runs on, and the claims that hold them. In a SLURM
    job, exactly the step's GPUs, which must be n (no lock files: another job's GPUs are not ours to skip);
    elsewhere n GPUs claimed by lock files from the visible inventory."""
    given = slurm_step_gpus()
    if given is None:
        claims = claim_gpus(n, gpu_inventory())
        return [c.name.removeprefix("gpu-") for c in claims], claims
    if len(given) != n:
        raise ServerError(f"the server cell needs {n} GPUs (tensor x data parallel) but its SLURM job "
                          f"{os.environ['SLURM_JOB_ID']} got {len(given)} (CUDA_VISIBLE_DEVICES="
                          f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')}): submit it with --gpus={n} "
                          f"(profiles/slurm does), or change the parallel sizes")
    return given, []
