"""The package's shape: no import circle (imports inside functions count, and the backend registry's names),
backends that are peers and that nothing outside backends/ imports, and which rules a cluster runs as jobs."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "specsweep"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, by_name: bool = True) -> set[str]:
    """Every specsweep module a file imports, anywhere in it (a `from . import x` counts x when it is a module), and
    with `by_name` what the registry imports by name."""
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
    return {m for m in out | (registry_imports(name) if by_name else set()) if m in known and m != name}


def registry_imports(name: str) -> set[str]:
    """What the registry imports by name (importlib): registry -> each backend package's facts, parts -> each
    package's parts."""
    from specsweep.core import parts, registry

    if name == "specsweep.core.registry":
        return set(registry.BACKENDS.values())
    if name == "specsweep.core.parts":
        return {f"{package}.{part}" for package in registry.BACKENDS.values() for part in parts.PARTS}
    if name == "specsweep.core.machines":
        return {f"{package}.machine" for package in registry.BACKENDS.values()}
    return set()


def backend_of(module: str) -> str | None:
    """The backend package a module belongs to (specsweep.backends.vllm.launch: specsweep.backends.vllm), or None
    for the registry and everything outside backends/."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["specsweep", "backends"] and len(parts) > 2 else None


def graph(by_name: bool = True) -> dict[str, set[str]]:
    return {module_name(p): imports_of(p, by_name) for p in PKG.rglob("*.py")}


# The floors of the house, lowest first (docs/development.md's module tour): a package imports only its own floor
# and those below it. The registry's imports by name (a backend's facts and parts, loaded on use) are its plug-ins,
# not arrows.
FLOORS = ("core", "metrics", "verdicts", "grid", "models", "plan", "run", "diagnose", "backends", "read", "cli")
ENTRY_MODULES = {"snakejob"}     # besides the packages, src/specsweep's top level holds these (three at most)


def floor(module: str) -> int:
    """A module's floor: its package's place in FLOORS; an entry module stands above them all."""
    top = module.split(".")[1]
    return len(FLOORS) if top in ENTRY_MODULES else FLOORS.index(top)


def test_the_top_level_holds_only_packages_and_entry_modules():
    modules = {p.stem for p in PKG.glob("*.py")} - {"__init__"}
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    assert modules == ENTRY_MODULES and len(ENTRY_MODULES) <= 3, f"top-level modules {sorted(modules)}: move them"
    assert packages == set(FLOORS), f"packages {sorted(packages)} against the floors {FLOORS}"


def test_each_package_imports_only_its_floor_and_those_below():
    up = sorted(f"{m} -> {d}" for m, deps in graph(by_name=False).items() if m != "specsweep"
                for d in deps if floor(d) > floor(m))
    assert not up, "imports that run up a floor (FLOORS): " + "; ".join(up)


def test_the_floor_check_finds_an_arrow_up():
    assert floor("specsweep.core.table") < floor("specsweep.read.summary") < floor("specsweep.snakejob")
    assert floor("specsweep.grid.cells") > floor("specsweep.verdicts.stats")


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


def collapsed(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph with each backend package's modules (backends/vllm, backends/sglang, backends/local) as one node,
    `specsweep.backends.vllm.*`. Two parts of a package stay nodes of their own: its facts (its `__init__`, standard
    library only: see test_a_backends_facts_are_standard_library_only), which the registry's `registry.get` imports
    and nothing else of the package, so cells and checks reading a backend's facts is no cycle; and its machine
    part (`machine` and what it imports of its own package, `*.machine*`), which the planner asks (core.machines),
    so a backend's checks reading the planner is no cycle."""
    def machine_side(own: str) -> set[str]:
        seen, todo = set(), [own + ".machine"]
        while todo:
            m = todo.pop()
            if m in seen or m not in g:
                continue
            seen.add(m)
            todo += [d for d in g[m] if backend_of(d) == own and d != own]
        return seen

    sides = {own: machine_side(own) for own in {backend_of(m) for m in g} - {None}}

    def node(m):
        own = backend_of(m)
        if own is None or own == m:
            return m
        return own + (".machine*" if m in sides[own] else ".*")

    out: dict[str, set[str]] = {}
    for module, deps in g.items():
        out.setdefault(node(module), set()).update(node(d) for d in deps)
    return {m: deps - {m} for m, deps in out.items()}


def cycle_in(g: dict[str, set[str]]) -> list[str] | None:
    """One cycle of a graph as a path (a -> b -> a), or None."""
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for dep in sorted(g.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep, path + [dep])):
                return found
        state[node] = 2
        return None

    for start in sorted(g):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_cycle_with_each_backend_as_one_node():
    """Read a backend package as one piece: nothing it imports may lead back into it."""
    found = cycle_in(collapsed(graph()))
    assert found is None, "import cycle with backends collapsed: " + " -> ".join(found)


def test_only_entry_points_import_config():
    """config composes jobs and asks the registry about every backend: it sits above the rest. `aslist` lives in
    nested, `ConfigError` in errors, REPO and user_cache in paths, so a module below config never imports it
    (once cells, checks, datasets, tracking and two backend files did: config -> backends -> vllm -> config)."""
    bad = sorted(m for m, deps in graph().items() if "specsweep.grid.config" in deps
                 and m != "specsweep.cli" and not m.startswith("specsweep.cli."))     # the CLI: the one entry point
    assert not bad, f"{bad} import specsweep.grid.config: take aslist from nested, ConfigError from errors"


def test_the_collapsed_check_finds_a_cycle():
    assert cycle_in(collapsed({"specsweep.grid.config": {"specsweep.backends.vllm.launch"},
                               "specsweep.backends.vllm.known_issues": {"specsweep.grid.config"}})) == \
        ["specsweep.backends.vllm.*", "specsweep.grid.config", "specsweep.backends.vllm.*"]
    assert cycle_in(collapsed({"specsweep.grid.cells": {"specsweep.backends.vllm"},
                               "specsweep.backends.vllm.session": {"specsweep.grid.cells"}})) is None
    assert cycle_in(collapsed({"specsweep.a": {"specsweep.b"}, "specsweep.b": set()})) is None


def test_the_graph_sees_imports_inside_functions():
    """The check is only worth something if it reads lazy imports (config asks the registry inside a function)
    and the registry's names: the runner reaches a backend's session through them."""
    g = graph()
    assert "specsweep.core.registry" in g["specsweep.grid.config"]
    assert "specsweep.backends.vllm" in g["specsweep.core.registry"]
    assert "specsweep.backends.vllm.session" in g["specsweep.core.parts"]
    assert "specsweep.core.parts" in g["specsweep.run.runner"]


def test_backends_import_only_neutral_modules():
    """A backend knows no other backend, nor the registry, the CLI, the Snakemake glue, the runner or preflight."""
    forbidden = ("specsweep.core.registry", "specsweep.core.parts", "specsweep.core.machines", "specsweep.cli", "specsweep.snakejob", "specsweep.run.runner",
                 "specsweep.plan.preflight")
    for module, deps in graph().items():
        own = backend_of(module)
        if own is None:
            continue
        bad = {m for m in deps if m in forbidden or m.startswith("specsweep.cli.")
               or backend_of(m) not in (None, own)}
        assert not bad, f"{module} imports {sorted(bad)}"


def test_nothing_outside_backends_imports_a_backend():
    """Everything else asks the registry (registry.get for a backend's facts, parts.session and
    parts.checks for its parts); the workflow's scripts too."""
    for module, deps in graph().items():
        if backend_of(module) is None and module not in ("specsweep.core.registry", "specsweep.core.parts", "specsweep.core.machines"):
            bad = sorted(m for m in deps if backend_of(m))
            assert not bad, f"{module} imports {bad}: ask the registry (specsweep.core.registry)"
    for script in (PKG.parents[1] / "workflow" / "scripts").glob("*.py"):
        for node in ast.walk(ast.parse(script.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(backend_of(n) for n in names), f"workflow/scripts/{script.name} imports {names}"


def test_a_backends_facts_are_standard_library_only():
    """config and cells read them, and vLLM's own process imports the guard through them: each package's
    __init__ imports nothing but the standard library."""
    from specsweep.core import registry

    for package in registry.BACKENDS.values():
        init = PKG.parent.joinpath(*package.split(".")) / "__init__.py"
        for node in ast.walk(ast.parse(init.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not getattr(node, "level", 0) and all(n.split(".")[0] in sys.stdlib_module_names
                                                             for n in names), f"{init} imports {names}"


def test_the_vllm_guard_imports_only_the_standard_library():
    """`--middleware specsweep.backends.vllm.guard.RequireKey` is imported by vLLM's Python, with src/ first on
    its path (backends/vllm/launch.py): on the way it must meet no specsweep module that imports a third party."""
    from specsweep.backends.vllm import launch

    module, _, attr = launch.GUARD.rpartition(".")
    code = (f"import sys; sys.path.insert(0, {launch.GUARD_PATH!r}); import importlib; "
            f"getattr(importlib.import_module({module!r}), {attr!r}); "
            "print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names) - {'__main__'}))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['specsweep']", out.stdout + out.stderr


def test_a_vllm_job_imports_no_torch():
    """The registry is lazy: a vLLM server cell's job reaches vLLM's session and checks without torch."""
    code = ("import sys; from specsweep.grid import cells; from specsweep.plan import preflight; from specsweep.run import runner; from specsweep.core import parts; "
            "parts.session('vllm'); parts.checks('vllm'); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PKG.parent)})
    assert out.stdout.strip() == "False", out.stderr


def test_on_a_cluster_only_server_cells_and_training_are_jobs():
    """profiles/slurm submits every rule that is not a localrule: a new light rule left off the list would
    become a SLURM job of its own (the report's pages once did)."""
    import re

    repo = PKG.parents[1]
    rules = {m for f in (repo / "workflow" / "rules").glob("*.smk")
             for m in re.findall(r"^\s*(?:rule|checkpoint) (\w+):", f.read_text(), re.M)}
    # snakefmt writes the list one rule a line
    [local] = re.findall(r"^localrules:\n((?:[ \t]+\w+,?\n)+)", (repo / "Snakefile").read_text(), re.M)
    assert rules - {r.strip() for r in local.split(",")} - {""} == {"serve_and_bench", "diagnose", "tiny_tokenizer",
                                                              "tiny_target", "tiny_drafter"}
    # the shipped pair's copies (the tiny rules' other branch) are local by their own `localrule: True`
    models = (repo / "workflow" / "rules" / "models.smk").read_text()
    assert models.count("localrule: True") == 3 and models.count("shell:") == 3


# ---- the results tree has one owner: layout -------------------------------------------------------------------
def _strings(tree: ast.AST):
    """(line, text, in a path join) of every string in the code: literals and f-string parts, docstrings left out.
    In a path join means the right side of `/` (`dir / "plots"`), where a bare folder name is a path."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    joined = {id(n.right) for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value, id(node) in joined


def spelled_names(text: str, in_join: bool) -> set[str]:
    """The results tree's names a string spells: a file name anywhere in it, a folder name as a part of a path
    (`a/plots/`, or the right side of a join), or a marker's, plot's or log's suffix (`{todo}.done`)."""
    from specsweep.core import layout

    out = {n for n in layout.FILE_NAMES if re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-])", text)}
    out |= {n for n in layout.DIR_NAMES if (in_join and text == n) or re.search(rf"(^|/){re.escape(n)}/|/{re.escape(n)}($|/)", text)}
    out |= {s for s in layout.SUFFIXES if re.search(rf"{re.escape(s)}(?![\w-])", text)}
    return out


def _smk_strings(text: str):
    """(line, text, False) of every string in a Snakemake file, by Python's tokenizer, leaving out those that are a
    statement of their own (docstrings); an f-string's text is read as it is written."""
    import io
    import tokenize

    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type != tokenize.COMMENT]
    for i, t in enumerate(tokens):
        if t.type != tokenize.STRING:
            continue
        alone = tokens[i - 1].type in (tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE, tokenize.NL) and \
            tokens[i + 1].type in (tokenize.NEWLINE, tokenize.NL)
        if not alone:
            body = re.sub(r"^[rRbBfFuU]*", "", t.string)
            quote = 3 if body[:3] in ('"""', "'''") else 1
            yield t.start[0], body[quote:-quote], False


def workflow_code():
    """(path, its strings) for every Python and Snakemake file in src/ and workflow/ and the Snakefile."""
    repo = PKG.parents[1]
    files = [p for p in PKG.rglob("*.py") if p.name != "layout.py"] + sorted((repo / "workflow").rglob("*.py"))
    out = [(str(p.relative_to(repo)), list(_strings(ast.parse(p.read_text())))) for p in files]
    for smk in sorted((repo / "workflow" / "rules").glob("*.smk")) + [repo / "Snakefile"]:
        out.append((str(smk.relative_to(repo)), list(_smk_strings(smk.read_text()))))
    return out


def test_the_name_check_reads_paths_joins_and_rules():
    """The check below is only worth something if it reads rules, f-strings and bare folder names in joins."""
    assert spelled_names("results/{study}/summary.csv", False) == {"summary.csv"}
    assert spelled_names("no summary.csv here", False) == {"summary.csv"}
    assert spelled_names("plots", True) == {"plots"} and spelled_names("plots", False) == set()
    assert spelled_names("the DAG runs them", False) == set() and spelled_names("a/runs/b", False) == {"runs"}
    assert spelled_names("{todo}.done", False) == {".done"}
    assert list(_smk_strings('rule a:\n    """doc: summary.csv"""\n    output:\n        f"{R}/x/{{s}}.done",\n')) \
        == [(4, "{R}/x/{{s}}.done", False)]


def test_no_results_file_name_is_spelled_outside_layout():
    """Every file and folder under results/ is named by specsweep.core.layout; the library, the rules and the scripts
    ask it (tests may spell the names, to check what is on disk)."""
    found = [f"{path}:{line}: {sorted(names)} in {text!r}" for path, strings in workflow_code()
             for line, text, joined in strings if (names := spelled_names(text, joined))]
    assert not found, "results/ names spelled outside specsweep.core.layout:\n" + "\n".join(found)
