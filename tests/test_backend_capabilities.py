"""A backend's capabilities and schema fragment live in its package: shared checks refuse by capability, naming the
backends that have it (from the registry), and the config schema's backend list is the registry's. No server."""
import sys

import pytest
import yaml

from specsweep.core import parts, registry
from specsweep.core.errors import ConfigError
from specsweep.grid import config
from specsweep.grid.config import compose_jobs
from specsweep.plan import checks, preflight


def test_each_backend_claims_only_known_features():
    assert {n: sorted(registry.capabilities(n)) for n in registry.names()} == {
        "vllm": ["block_verification", "divergence", "k_schedule", "set_acceptance"],
        "local": ["block_verification", "set_acceptance"],
        "sglang": []}
    assert registry.having("k_schedule") == ("vllm",) and registry.having("set_acceptance") == ("vllm", "local")


def test_a_claim_outside_the_features_is_refused(monkeypatch):
    monkeypatch.setattr(registry.get("sglang"), "CAPABILITIES", frozenset({"telepathy"}), raising=False)
    with pytest.raises(ValueError, match="backend 'sglang' claims \\['telepathy'\\]: not one of"):
        registry.capabilities("sglang")


def test_a_backend_gets_the_shared_refusal_of_each_feature_it_lacks_and_no_other():
    assert checks.refusals("vllm") == []
    assert checks.refusals("local") == [checks.check_k_schedule, checks.check_divergence]
    assert checks.refusals("sglang") == [checks.check_set_acceptance, checks.check_verification,
                                         checks.check_k_schedule, checks.check_divergence]
    for name in registry.names():             # nobody lists a shared refusal itself any more
        assert not set(checks.REFUSALS.values()) & set(parts.checks(name).CHECKS)


def test_refusing_follows_the_capability_not_the_name(monkeypatch):
    cfg = compose_jobs(["server=local", "kernel=local_sdpa", "sweep.k_schedule=[[1,4,7],[5,64,3]]"])[0]
    assert checks.check_k_schedule(cfg, {}).status == "fail"
    monkeypatch.setattr(registry.get("local"), "CAPABILITIES",
                        registry.capabilities("local") | {"k_schedule"})
    assert checks.check_k_schedule(cfg, {}).status == "pass"       # the backend's own check would take over
    assert checks.check_k_schedule not in checks.refusals("local")
    assert "k_schedule" not in [c.name for c in preflight.run_checks([cfg], {"server_env": {}})]


def test_a_divergence_probe_off_vllm_is_one_line():
    cfg = compose_jobs(["server=local", "kernel=local_sdpa", "sweep.divergence=true"])[0]
    assert checks.check_divergence(cfg, {}).message == (
        "sweep.divergence is not implemented on the local backend: run these cells on a backend that has it "
        "(server.backend vllm), or set sweep.divergence=false")
    assert checks.check_divergence(compose_jobs(["server=local", "kernel=local_sdpa"])[0], {}).status == "pass"


def test_a_feature_nobody_has_says_so(monkeypatch):
    monkeypatch.setattr(registry.get("vllm"), "CAPABILITIES", frozenset({"set_acceptance", "block_verification"}))
    cfg = compose_jobs(["server=sglang", f"server.python={sys.executable}", "sweep.k_schedule=[[1,4,7],[5,64,3]]"])[0]
    assert checks.check_k_schedule(cfg, {}).message.endswith(
        "run these cells on a backend that has it (no backend implements it yet), or drop sweep.k_schedule")


def test_the_schemas_backend_list_is_the_registrys(monkeypatch):
    schema = config.schema()
    assert schema["properties"]["server"]["properties"]["backend"] == {"enum": list(registry.names())}
    written = yaml.safe_load(config.SCHEMA.read_text())["properties"]["server"]["properties"]["backend"]
    assert written == {"type": "string"}                                      # no backend is spelt in the file
    with pytest.raises(ConfigError) as e:
        compose_jobs(["server.backend=tgi"])
    assert str(e.value).startswith("config: server.backend: 'tgi' is not one of ['vllm', 'local', 'sglang']")
    monkeypatch.setitem(registry.BACKENDS, "tgi", "specsweep.backends.sglang")   # a registry line is enough
    assert "tgi" in config.schema()["properties"]["server"]["properties"]["backend"]["enum"]


def test_each_backends_fragment_applies_where_it_is_named():
    fragments = [s["then"] for s in config.schema()["allOf"]]
    assert fragments == [registry.schema_fragment(n) for n in registry.names()]
    assert "executable" in registry.schema_fragment("vllm")["properties"]["server"]["required"]
    with pytest.raises(ConfigError, match="config: server: 'executable' is a required property"):
        compose_jobs(["server=sglang", "server.python=python3", "server.backend=vllm", "kernel=cpu"])


def test_every_backend_answers_the_planner_s_machine_questions():
    """plan/machine.py's questions, asked of each backend's machine part: a vLLM and an SGLang GPU member (and the
    local engine) answer the same ones, with the types the planner reads."""
    from specsweep.core import machines
    from specsweep.plan.machine import QUESTIONS

    for name in registry.names():
        m = machines.machine(name)
        missing = [q for q in QUESTIONS if not hasattr(m, q)]
        assert not missing, f"backends/{name}/machine.py does not answer {missing}"
        assert all(isinstance(getattr(m, q), bool) for q in ("IN_PROCESS", "SHARES_GPU", "FIXES_KV"))
        assert isinstance(m.SLEEP_LEVELS, tuple) and set(m.SLEEP_LEVELS) <= {1, 2}
    assert machines.machine("vllm").SHARES_GPU and machines.machine("sglang").SHARES_GPU


def test_no_code_outside_backends_compares_a_backend_s_name():
    """The planner and everything else ask the backends' declared facts and capabilities, never `backend ==
    "vllm"` (issue 51): a grep over src/specsweep outside backends/ for a comparison with a registered name."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "specsweep"
    names = "|".join(map(re.escape, registry.names()))
    compare = re.compile(rf"""(==|!=|\bin\b|\bnot in\b)\s*[(\[{{]?\s*["']({names})["']|["']({names})["']\s*(==|!=)""")
    found = [f"{p.relative_to(src)}:{i}: {line.strip()}" for p in src.rglob("*.py") if "backends" not in p.parts
             for i, line in enumerate(p.read_text().splitlines(), 1) if compare.search(line)]
    assert not found, "backend names compared outside backends/ (ask a capability instead):\n" + "\n".join(found)
