"""Every relative link in the README and docs/ (and the archive's index) points at a file that exists, and every
#anchor at a heading of its target, as GitHub renders them. Pure file reading, no server."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "bench" / "README.md", REPO / "bench" / "archive" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks, with inline code spans blanked (links there are text)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped (not - or _), spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page.read_text()):
        m = HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    return [m.group(1) for line in prose(page.read_text()) for m in LINK.finditer(re.sub(r"`[^`]*`", "", line))]


def test_the_slug_is_githubs():
    assert slug("Rounds: `sweep.rounds`") == "rounds-sweeprounds"
    assert slug("The system's ceiling: set-acceptance curves") == "the-systems-ceiling-set-acceptance-curves"
    assert slug("Two cells (`bench/two_gpu.py`, on a 2-GPU host)") == "two-cells-benchtwo_gpupy-on-a-2-gpu-host"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_exists(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):          # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


# A doc reference in code: `docs/<file>.md` or `docs/<file>.md#anchor` in a comment or docstring of the maintained code
# (the frozen scripts under bench/archive/ name the pages as they were).
CODE_REF = re.compile(r"docs/([\w./-]+\.md)(?:#([\w-]+))?")
CODE = [p for root in ("src", "bench", "workflow", "scripts") for p in sorted((REPO / root).rglob("*"))
        if p.suffix in (".py", ".smk", ".sh", ".toml") and "archive" not in p.relative_to(REPO).parts] \
    + [REPO / "Snakefile"]


def code_refs(path: Path) -> list[tuple[int, str, str | None]]:
    return [(i, m.group(1), m.group(2)) for i, line in enumerate(path.read_text().splitlines(), start=1)
            for m in CODE_REF.finditer(line)]


def test_the_code_reference_check_reads_a_reference_and_its_anchor():
    assert CODE_REF.findall("(docs/residency.md#the-kv-cache), docs/table.md") == [("residency.md", "the-kv-cache"),
                                                                                    ("table.md", "")]


def test_every_doc_reference_in_code_points_at_a_page_and_heading():
    """A comment or docstring that names a page (and a section) of docs/ names one that exists: a section that moved
    fails here, with the line that still points at it."""
    broken = []
    for path in CODE:
        for line, page, anchor in code_refs(path):
            dest = REPO / "docs" / page
            if not dest.exists():
                broken.append(f"{path.relative_to(REPO)}:{line}: docs/{page}: no such file")
            elif anchor and anchor not in anchors(dest):
                broken.append(f"{path.relative_to(REPO)}:{line}: docs/{page}#{anchor}: no such heading")
    assert not broken, "\n".join(broken)
