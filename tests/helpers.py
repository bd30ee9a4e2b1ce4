"""Plain helpers of the tests (the fixtures are in conftest.py): paths, commands run as a user runs them, the
DAG's argv, the SGLang stand-in's site, a small random pair, and the process groups the tests start.

Every child a test starts through `run`, `popen_group` or `run_bounded` gets a session (and so a process group)
of its own and is tracked here: when pytest is interrupted (SIGINT, SIGTERM, SIGHUP: conftest installs
`raise_on_signals`) or ends, `stop_all` stops each group still alive, then any process still carrying this
session's mark in its environment (a server that its job started in a group of its own, below a DAG)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DATA = Path(__file__).parent / "data"
FAKE_SGLANG = Path(__file__).parent / "fake_sglang"
TRAIN_SCALE = 0.02
"""The share of the tiny pair's recipe (steps, prompts, held-out prompts) at which the suite's one training runs the
DAG's training rules (`tiny_pair=train@0.02`, conftest.trained_pair_dir): the rules are what it checks, not what
training reaches. The recipe's 600 target and 2000 drafter steps took 406 s of one core in a CI run; this, 12 and
40 steps, 39-51 s with the machine shared (24 s of CPU, mostly the three jobs' imports; 2026-12-06)."""

# --- the process groups the tests start ---------------------------------------------------------------------

MARK = "SPECSWEEP_TEST_SESSION"
"""An environment variable every child inherits, valued per pytest process: how `stop_all` finds what a child
left in a group of its own. A nested pytest sets its own."""
TOKEN = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
os.environ[MARK] = TOKEN
_groups: dict[int, subprocess.Popen] = {}      # pgid (the leader's pid) -> its leader


def popen_group(argv, **kwargs) -> subprocess.Popen:
    """subprocess.Popen in a new session, tracked until its group is stopped or found empty."""
    proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
    _groups[proc.pid] = proc
    return proc


def mlflow_server(port: int, *args: str, **kwargs) -> subprocess.Popen:
    """A real `mlflow server` on 127.0.0.1:port in its own process group, one worker, without MLflow 3's job runner:
    `MLFLOW_SERVER_ENABLE_JOB_EXECUTION` is on by default and starts seven huey consumers beside the server, each
    importing MLflow (14 CPU seconds of a start on this machine idle, /health 19 s against 15 s), for jobs that
    specsweep never submits."""
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    argv = [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1", *args]
    return popen_group(argv, env=env, **kwargs)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(pgid: int, grace_s: float = 10) -> None:
    """SIGTERM the group, wait up to grace_s for it to go, SIGKILL what is left; forget it."""
    proc = _groups.get(pgid)
    try:
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if proc is not None:
                proc.poll()                         # reap the leader, or the group stays alive as its zombie
            if not group_alive(pgid):
                break
            time.sleep(0.1)
        else:
            os.killpg(pgid, signal.SIGKILL)
        if proc is not None:
            proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    _groups.pop(pgid, None)


def forget_if_empty(proc: subprocess.Popen) -> None:
    """A group whose leader has exited and that has no process left is no longer ours: its number may be
    reused. One that still has processes stays tracked (a test may look at them first), stopped at the end."""
    if proc.poll() is not None and not group_alive(proc.pid):
        _groups.pop(proc.pid, None)


def marked_pids(token: str = None) -> list[int]:
    """Processes (other than this one) whose environment at start carried MARK=token."""
    needle = f"{MARK}={token or TOKEN}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                found.append(int(d.name))
        except OSError:
            continue
    return found


def stop_all(grace_s: float = 10) -> None:
    """Stop every group this session started and still tracks, then whatever still carries its mark."""
    for pgid in list(_groups):
        stop_group(pgid, grace_s)
    for pid in marked_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def raise_on_signals() -> None:
    """SIGTERM and SIGHUP raise KeyboardInterrupt, as SIGINT does: pytest then tears its fixtures down and
    ends the session (conftest's pytest_sessionfinish calls stop_all), instead of dying with its children
    left running. A second signal during that clean-up is ignored."""
    def interrupt(signum, frame):
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, interrupt)


def run(argv, cwd=REPO, timeout=900, env=None) -> subprocess.CompletedProcess:
    """Run a command the way a user would; return the completed process (text). On a timeout or an interrupt
    its whole process group is stopped (subprocess.run would kill only the command, not what it started)."""
    proc = popen_group(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env={**os.environ, **(env or {})})
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        stop_group(proc.pid)
        raise
    forget_if_empty(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run_bounded(argv, log: Path, timeout_s: float, env: dict) -> int:
    """A Snakemake run in its own session; on timeout its whole process group is stopped, the test fails."""
    with open(log, "wb") as out:
        proc = popen_group(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env})
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_group(proc.pid, 30)
        raise AssertionError(f"snakemake did not finish within {timeout_s} s:\n{log.read_text()[-3000:]}")
    forget_if_empty(proc)
    return rc


TEST_PORTS = (18400, 18499)
"""Where a test's own server (an `mlflow server`) listens: below the kernel's ephemeral range (32768-60999 here),
so no server's or client's bind(0) in the other session beside this one can take the port between its pick and
the server's bind (CI lost two browser tests to that: a vLLM start took the port an `mlflow server` was still
importing to bind), and apart from the product's own server.port_range (18100-18199)."""


def claim_test_port():
    """A free port in TEST_PORTS and its claim, held under the product's lock files (core.claims) so that two test
    sessions never pick the same one; release the claim when the server has stopped."""
    from specsweep.core.claims import claim_port

    return claim_port({"host": "127.0.0.1", "port": None, "port_range": list(TEST_PORTS)})


def wait_for(predicate, timeout_s, what, interval_s=0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def cell_files(cells) -> dict:
    """Every file under these bench cells' folders and its bytes (links left out): what a fault must leave as it was."""
    return {p: p.read_bytes() for c in cells for p in sorted(c.rglob("*")) if p.is_file() and not p.is_symlink()}


def files_holding(root: Path, text: str) -> list[Path]:
    """The files under root whose bytes contain text."""
    return [f for f in root.rglob("*") if f.is_file() and text.encode() in f.read_bytes()]


# --- the DAG ------------------------------------------------------------------------------------------------

def snakemake_argv(workdir, results, *overrides, study="t", extra=()):
    """`snakemake --cores 2` on this repo's workflow, with Hydra overrides passed as its users pass them. One
    repeat per bench cell unless a test asks for more: the default sweep's ten are for verdicts, not wiring."""
    return [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--cores", "2", *extra,
            "--config", f"study={study}", f"results_dir={results}",
            "overrides=" + " ".join(["sweep.repeats=1", *overrides])]


def snakemake(workdir, *args, timeout=900):
    return run([str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--cores", "2", *args],
               timeout=timeout)


def prebuilt_pair(tiny_results) -> list[str]:
    """Overrides that point a study at the session's tiny pair instead of building another."""
    models = tiny_results / "models" / "tiny"
    return [f"pair.target={models / 'target'}", f"pair.drafter={models / 'drafter'}", "pair.built_by_workflow=false"]


SMOKE_OVERRIDES = ["dataset.num_prompts=4", "sweep.repeats=2"]
SMOKE = ["study=smoke", "sweep=smoke", *SMOKE_OVERRIDES]      # Hydra overrides


def smk_config(results, *extra):
    """The smoke study as `snakemake --config` takes it: two repeats, so that it has two speculative runs to
    compare (the MLflow UI's compare view) at the cost of two 4-prompt bench cells."""
    return ["--config", "study=smoke", "sweep=smoke", f"results_dir={results}",
            "overrides=" + " ".join([*SMOKE_OVERRIDES, *extra])]


# --- the SGLang stand-in ------------------------------------------------------------------------------------

def standin_site(tmp_path, version: str = "0.5.17") -> Path:
    """The SGLang stand-in as an installed SGLang looks to preflight and the launch's probe: its package, version
    and DFLASH worker file. The stand-in answers as 0.5.17 unless STANDIN_SGLANG_VERSION says 0.5.23."""
    site = tmp_path / "site"
    shutil.copytree(FAKE_SGLANG / "sglang", site / "sglang")
    (site / "sglang" / "srt" / "speculative").mkdir(parents=True)
    (site / "sglang" / "srt" / "speculative" / "dflash_worker_v2.py").write_text("")
    (site / f"sglang-{version}.dist-info").mkdir()
    (site / f"sglang-{version}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return site


def standin_study(pair_results, tmp_path, startup_s) -> tuple[Path, Path, list[str]]:
    """Overrides for a study of pair_results' tiny pair on the SGLang stand-in: the folder where it records each
    launch (STANDIN_RECORD_DIR), its site (Snakemake's env_check finds it there too), and the overrides. The stand-in
    loads no weights, so the random pair (random_results) does, and its tests need not wait for the training."""
    records = tmp_path / "records"
    records.mkdir()
    site = standin_site(tmp_path)
    return records, site, [*prebuilt_pair(pair_results), "server=sglang", f"server.python={BIN / 'python'}",
                     "kernel=sglang_fa3", f"+server.env.PYTHONPATH={site}", f"+server.env.STANDIN_RECORD_DIR={records}",
                     f"+server.env.STANDIN_STARTUP_S={startup_s}"]


def standin_k(record: dict) -> int:
    """The K a stand-in launch served (its block less one; 0 for a baseline), from its recorded argv."""
    argv = record["argv"]
    flag = "--speculative-num-draft-tokens"
    return int(argv[argv.index(flag) + 1]) - 1 if flag in argv else 0


# --- a small random pair ------------------------------------------------------------------------------------

RANDOM_INIT_STD = 0.2
"""The random target's weight scale. At transformers' default (0.02) its logits are so flat that greedy decoding
repeats one or two tokens and top-1 and top-2 tie within near_ties.MARGIN at once; at 0.2 a 40-token greedy
answer has 31-35 distinct tokens and its first near-tie comes late or never (measured on the suite's prompts)."""


class ServerlessSession:
    """What runner.run_cells asks of a session beyond `measure`, for a fake one with no server behind it."""
    log_path = None

    def alive(self):
        return True

    def log_tail(self):
        return ""


def served_launches(log_dir: Path) -> list[dict]:
    """A server cell's launch records that became ready. Under xdist a launch whose port another worker's test took
    between its claim and the bind (claims are private to a test) exits and is launched again on another port, as
    designed: its record stays, with no ready_s (a CI run, 2026-12-07)."""
    from specsweep.core.results import launches

    return [entry for entry in launches(log_dir) if "ready_s" in entry]


def last_launch(log_dir: Path) -> dict:
    """The newest launch record of a server cell's logs/server.json (a list: one entry per launch)."""
    from specsweep.core.results import launches

    return launches(log_dir)[-1]


def make_random_pair(root: Path, seed: int = 0) -> Path:
    """An untrained pair laid out as the DAG's models/tiny: tokenizer/, target/ (the tiny target's shape and
    tokenizer, randomly initialised), drafter/ (init_drafter's). Seconds, where training takes minutes: for
    the tests that need a real pair's shapes, files and formats but not its trained answers."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    from specsweep.models.tiny import TARGET_SHAPE, build_tokenizer, init_drafter

    models = Path(root) / "models" / "tiny"
    tok = build_tokenizer(models / "tokenizer", seed)
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), tie_word_embeddings=True, eos_token_id=eos, bos_token_id=pad,
                      pad_token_id=pad, torch_dtype="float32", initializer_range=RANDOM_INIT_STD, **TARGET_SHAPE)
    target = Qwen3ForCausalLM(cfg).eval()
    target.save_pretrained(models / "target", safe_serialization=True)
    tok.save_pretrained(models / "target")
    GenerationConfig(eos_token_id=eos, pad_token_id=pad).save_pretrained(models / "target")
    init_drafter(target.config, tok.convert_tokens_to_ids("<|mask|>"), models / "drafter", seed)
    (models / "target" / "train.json").write_text(json.dumps({"steps": 0, "random": True}) + "\n")
    (models / "drafter" / "train.json").write_text(json.dumps({"steps": 0, "random": True}) + "\n")
    return models


# A stand-in for a server's readiness: /health and /v1/models (model "m") on 127.0.0.1:PORT, bound with SO_REUSEPORT as
# vLLM binds, after STARTUP seconds (argv: PORT [STARTUP]; a negative STARTUP: never ready)
MODELS_SERVER = """
import http.server, json, socket, sys, time

class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

class Shared(http.server.ThreadingHTTPServer):
    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()

if __name__ == "__main__":
    startup = float(sys.argv[2]) if len(sys.argv) > 2 else 0
    time.sleep(startup if startup >= 0 else 3600)
    Shared(("127.0.0.1", int(sys.argv[1])), Models).serve_forever()
"""
