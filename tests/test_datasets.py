"""Bad input files are skipped and counted, or fail clearly, as configured; results are written atomically."""
import json
import os

import pytest

from specsweep.core.errors import ConfigError
from specsweep.core.results import atomic_write_text
from specsweep.grid.config import compose_jobs
from specsweep.grid.datasets import jsonl_rows, load_prompt_rows, materialise, synthetic_rows
from specsweep.plan import checks


def write(tmp_path, data: bytes):
    p = tmp_path / "prompts.jsonl"
    p.write_bytes(data)
    return p


def test_malformed_lines_are_skipped_and_counted(tmp_path):
    p = write(tmp_path, b'{"prompt": "a"}\nnot json\n{"turns": ["b", "c"]}\n{"prompt": ""}\n[1]\n\n{"x": 1}\n')
    rows, bad = jsonl_rows(p, "skip")
    assert rows == [{"turns": ["a"]}, {"turns": ["b", "c"]}] and bad == 4
    [cfg] = compose_jobs(["dataset=jsonl", f"dataset.path={p}"])
    c = checks.check_dataset(cfg, {})
    assert c.status == "warn" and "4 malformed lines will be skipped" in c.message


def test_malformed_lines_fail_clearly_when_configured(tmp_path):
    p = write(tmp_path, b'{"prompt": "a"}\nnot json\n')
    with pytest.raises(ConfigError, match=r"prompts.jsonl:2 is not a JSON object .* set dataset.on_bad_line=skip"):
        jsonl_rows(p, "fail")
    [cfg] = compose_jobs(["dataset=jsonl", f"dataset.path={p}", "dataset.on_bad_line=fail"])
    assert checks.check_dataset(cfg, {}).status == "fail"


def test_an_empty_dataset_is_a_clear_failure(tmp_path):
    p = write(tmp_path, b"\n\n")
    [cfg] = compose_jobs(["dataset=jsonl", f"dataset.path={p}"])
    c = checks.check_dataset(cfg, {})
    assert c.status == "fail" and "has no usable prompts (0 malformed lines)" in c.message
    with pytest.raises(ConfigError, match="no usable prompts"):
        materialise(cfg["dataset"], tmp_path / "out.jsonl")
    [missing] = compose_jobs(["dataset=jsonl", f"dataset.path={tmp_path / 'nope.jsonl'}"])
    assert "does not exist: set dataset.path" in checks.check_dataset(missing, {}).message


def test_non_utf8_text_is_read_with_replacement(tmp_path):
    p = write(tmp_path, '{"prompt": "caf\u00e9 '.encode() + b"\xff\xfe" + b'"}\n')
    rows, bad = load_prompt_rows(p, {"source": "jsonl", "name": "x", "num_prompts": 10})
    prompt = rows[0]["turns"][0]
    assert bad == 0 and prompt.startswith("caf\u00e9 ") and "\ufffd" in prompt


def test_synthetic_set_is_deterministic_and_sized():
    assert synthetic_rows(5, 0) == synthetic_rows(5, 0) and len(synthetic_rows(5, 1)) == 5
    assert synthetic_rows(5, 0) != synthetic_rows(5, 1)


def test_an_interrupted_write_leaves_the_old_file_and_no_debris(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"
    target.write_text(json.dumps({"old": True}))

    def crash(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, json.dumps({"new": True}))
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_hub_loader_formats_prompts_and_turns(tmp_path):
    """The `datasets` path, on a local folder (no hub here): templates, extra inputs and multi-turn sets."""
    gsm = tmp_path / "gsm"
    gsm.mkdir()
    (gsm / "test.jsonl").write_text(json.dumps({"question": "What is 2+2?", "answer": "4"}) + "\n")
    [cfg] = compose_jobs(["dataset=gsm8k", f"dataset.hub.path={gsm}", "dataset.hub.name=null", "dataset.num_prompts=5"])
    info = materialise(cfg["dataset"], tmp_path / "gsm.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "gsm.jsonl").read_text().splitlines()]
    assert info == {"prompts": 1, "skipped_lines": 0}
    assert rows == [{"turns": ["What is 2+2?\nPlease reason step by step, and put your final answer within "
                               "\\boxed{}."]}]
    mt = tmp_path / "mt"
    mt.mkdir()
    (mt / "train.jsonl").write_text(json.dumps({"prompt": ["Write a poem.", "Now shorten it."]}) + "\n")
    [cfg] = compose_jobs(["dataset=mt-bench", f"dataset.hub.path={mt}"])
    materialise(cfg["dataset"], tmp_path / "mt.jsonl")
    assert json.loads((tmp_path / "mt.jsonl").read_text()) == {"turns": ["Write a poem.", "Now shorten it."]}
    al = tmp_path / "al"
    al.mkdir()
    (al / "train.jsonl").write_text(json.dumps({"instruction": "Translate.", "input": "Bonjour", "output": ""}) + "\n")
    [cfg] = compose_jobs(["dataset=alpaca", f"dataset.hub.path={al}"])
    materialise(cfg["dataset"], tmp_path / "al.jsonl")
    assert json.loads((tmp_path / "al.jsonl").read_text()) == {"turns": ["Translate.\n\nBonjour"]}


def test_an_unreachable_hub_dataset_is_one_clear_line(tmp_path):
    """The hub is out of reach: `datasets` is offline for the whole session (conftest's pytest_configure)."""
    [cfg] = compose_jobs(["dataset=gsm8k", "dataset.hub.path=no-such-org/no-such-set"])
    with pytest.raises(ConfigError, match="could not load no-such-org/no-such-set from the hub"):
        materialise(cfg["dataset"], tmp_path / "x.jsonl")
