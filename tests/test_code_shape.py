"""The code's shape for the next person (issue 43): development.md's module tour names every module under
src/specsweep/ once, and no module grows past 460 lines. Pure file reading."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "specsweep"
MAX_LINES = 460
ENTRY = re.compile(r"^- (`[^`]+`.*?): ")       # a tour line: its names, up to the first ": "


def modules() -> set[str]:
    """Every module, as the tour names it: `config`, `metrics/answers`, `backends/vllm/launch`; a package's
    __init__ and __main__ are the package's own entry."""
    out = set()
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("").as_posix()
        if path.stem in ("__init__", "__main__"):
            continue
        out.add(rel)
    return out


def tour_names(text: str) -> list[str]:
    """The modules the tour names, in order, once per naming: a line `- `name`: ...` names one module, a line
    `- `pkg/` [`a`, `b`]: ...` (wrapped lines joined) names pkg/a and pkg/b."""
    section = text.split("\n## Module tour\n", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"\n(?=- |\n|\*\*)", section)
    names = []
    for item in items:
        m = ENTRY.match(" ".join(line.strip() for line in item.splitlines()))
        if not m:
            continue
        head = re.findall(r"`([^`]+)`", m.group(1))
        if head[0].endswith("/"):
            names += [head[0] + name for name in head[1:]]
        else:
            assert len(head) == 1, f"a module's tour line names one module before its ':': {item!r}"
            names.append(head[0])
    return names


def test_tour_reads_modules_and_packages():
    text = ("# x\n\n## Module tour\n\nintro\n\n**A**\n- `config`: composes, `not_a_name` after the colon.\n"
            "- `metrics/` [`answers`,\n  `throughput`]: pure figures.\n\n## Next\n- `later`: not the tour.\n")
    assert tour_names(text) == ["config", "metrics/answers", "metrics/throughput"]


def test_the_module_tour_names_every_module_once():
    named = tour_names((REPO / "docs" / "development.md").read_text())
    twice = sorted(name for name, n in Counter(named).items() if n > 1)
    missing, unknown = sorted(modules() - set(named)), sorted(set(named) - modules())
    assert not (twice or missing or unknown), \
        f"docs/development.md's module tour: named twice {twice}, missing {missing}, no such module {unknown}"


def test_no_module_is_over_460_lines():
    long = {str(p.relative_to(REPO)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split along a seam the code names): {long}"


def test_the_checkout_fits_one_transfer_to_the_gpu_host_beside_a_bundle_part():
    """A GPU host receives the checkout and one 33 MiB part of vLLM's bundle in one 64 MiB transfer, measured as a
    tar of what travels, a 512-byte header and padding a file (docs/gpu-hosts.md says what was refused): the tar of
    the tracked files stays under 28 MiB. Archive request rows slimmed, and few files a study
    (bench/archive/README.md)."""
    import io
    import subprocess
    import tarfile

    import pytest

    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = [f for f in listed.stdout.decode().split("\0") if f and (REPO / f).is_file()]
    sink = io.BytesIO()
    with tarfile.open(fileobj=sink, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for f in files:
            tar.add(REPO / f, arcname=f, recursive=False)
    assert sink.tell() < 28 * 2 ** 20, f"the tracked files make a {sink.tell() / 2 ** 20:.1f} MiB tar"
