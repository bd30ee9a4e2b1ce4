"""SPEED-Bench (conf/dataset/speed-bench.yaml) offline: a small file in its hub format (nvidia/SPEED-Bench, config
qualitative, split test; the dataset card's features) read through hub_rows, and the one-line hub failure."""
import json

import pytest

from specsweep.core.errors import ConfigError
from specsweep.grid import datasets
from specsweep.grid.config import compose_jobs

# the dataset card's features of the qualitative config, in its order
ROWS = [
    {"question_id": "q-coding-0", "category": "coding", "sub_category": "python", "turns": ["Write a sort."],
     "source": "x", "src_id": "1", "difficulty": "easy", "multiturn": False},
    {"question_id": "q-writing-0", "category": "writing", "sub_category": "essay",
     "turns": ["Write a poem.", "Now shorter."], "source": "y", "src_id": "2", "difficulty": "medium", "multiturn": True},
    {"question_id": "q-math-0", "category": "math", "sub_category": "algebra", "turns": ["Solve x + 1 = 2."],
     "source": "z", "src_id": "3", "difficulty": "hard", "multiturn": False},
]


@pytest.fixture
def speed_bench_file(tmp_path, monkeypatch):
    """The hub's load_dataset pointed at a local JSONL of the same rows (the datasets library's own loader)."""
    import datasets as hf

    path = tmp_path / "qualitative-test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    real = hf.load_dataset
    asked = []

    def offline(repo, name=None, split=None, **kw):
        asked.append((repo, name, split))
        return real("json", data_files=str(path), split="train")
    monkeypatch.setattr(hf, "load_dataset", offline)
    return asked


def test_speed_bench_loads_turns_and_categories(speed_bench_file, tmp_path):
    [job] = compose_jobs(["dataset=speed-bench", f"results_dir={tmp_path}"])
    cfg = job["dataset"]
    out = tmp_path / "speed.jsonl"
    assert datasets.materialise(cfg, out) == {"prompts": 3, "skipped_lines": 0}
    assert speed_bench_file == [("nvidia/SPEED-Bench", "qualitative", "test")]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[1] == {"turns": ["Write a poem.", "Now shorter."], "category": "writing"}
    assert [r["category"] for r in rows] == ["coding", "writing", "math"]


def test_an_unreachable_hub_is_one_line_naming_the_dataset_and_the_fix(monkeypatch, tmp_path):
    import datasets as hf

    def down(*a, **kw):
        raise ConnectionError("no route to host")
    monkeypatch.setattr(hf, "load_dataset", down)
    [job] = compose_jobs(["dataset=speed-bench", f"results_dir={tmp_path}"])
    with pytest.raises(ConfigError) as e:
        datasets.materialise(job["dataset"], tmp_path / "x.jsonl")
    text = str(e.value)
    assert "\n" not in text and "speed-bench" in text and "nvidia/SPEED-Bench" in text
    assert "dataset=jsonl dataset.path=FILE" in text
