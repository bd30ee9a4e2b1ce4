"""The package's shape: no import circle (imports inside functions count), backends that are peers, and which
rules a cluster runs as jobs."""
import ast
import re
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
    [local] = re.findall(r"^localrules: (.+)$", (repo / "Snakefile").read_text(), re.M)
    assert rules - {r.strip() for r in local.split(",")} == {"serve_and_bench", "tiny_tokenizer", "tiny_target",
                                                              "tiny_drafter"}


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
    from specsweep import layout

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
    """Every file and folder under results/ is named by specsweep.layout; the library, the rules and the scripts
    ask it (tests may spell the names, to check what is on disk)."""
    found = [f"{path}:{line}: {sorted(names)} in {text!r}" for path, strings in workflow_code()
             for line, text, joined in strings if (names := spelled_names(text, joined))]
    assert not found, "results/ names spelled outside specsweep.layout:\n" + "\n".join(found)
