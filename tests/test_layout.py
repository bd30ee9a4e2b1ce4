"""The package's shape: no import circle (imports inside functions count), backends that are peers, and which
rules a cluster runs as jobs."""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "specsweep"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every specsweep module a file imports, anywhere in it (a `from . import x` counts x when it is a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    known = {module_name(p) for p in PKG.rglob("*.py")}
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "specsweep"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "specsweep":
                continue
            subs = {f"{mod}.{a.name}" for a in node.names} & known
            out |= subs or {mod}
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PKG.rglob("*.py")}


def test_the_import_graph_has_no_cycle():
    g = graph()
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for dep in sorted(g.get(node, ())):
            if state.get(dep) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(dep):] + [dep]) if dep in path
                            else f"import cycle through {dep}")
            if dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node, [node])


def test_the_graph_sees_imports_inside_functions():
    """The check is only worth something if it reads lazy imports: runner reaches the backends through one."""
    g = graph()
    assert "specsweep.backends.vllm" in g["specsweep.backends"]
    assert "specsweep.backends" in g["specsweep.runner"]


def test_backends_import_only_neutral_modules():
    """A backend knows no other backend, nor the CLI or the Snakemake glue."""
    forbidden = ("specsweep.backends", "specsweep.cli", "specsweep.snakejob", "specsweep.runner")
    for path in (PKG / "backends").glob("*.py"):
        if path.name == "__init__.py":
            continue
        bad = {m for m in imports_of(path) if any(m == f or m.startswith(f + ".") for f in forbidden)}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_on_a_cluster_only_server_cells_and_training_are_jobs():
    """profiles/slurm submits every rule that is not a localrule: a new light rule left off the list would
    become a SLURM job of its own (the report's pages once did)."""
    import re

    repo = PKG.parents[1]
    rules = {m for f in (repo / "workflow" / "rules").glob("*.smk")
             for m in re.findall(r"^(?:rule|checkpoint) (\w+):", f.read_text(), re.M)}
    # snakefmt writes the list one rule a line
    [local] = re.findall(r"^localrules:\n((?:[ \t]+\w+,?\n)+)", (repo / "Snakefile").read_text(), re.M)
    assert rules - {r.strip() for r in local.split(",")} - {""} == {"serve_and_bench", "tiny_tokenizer", "tiny_target",
                                                              "tiny_drafter"}
