"""The house rules that code review alone would let slip: imports go one way (dataset <- record;
dataset <- model <- play, eval, train.py <- dreamcade) and no module imports itself back through others."""

import ast
from pathlib import Path

from conftest import ROOT

PACKAGES = ("dataset", "record", "model", "play", "eval", "bench", "dreamcade")
# what each layer may import from the project
ALLOWED = {"dataset": {"dataset"}, "record": {"dataset", "record"}, "model": {"dataset", "model"},
           "eval": {"dataset", "model", "eval"}, "play": {"dataset", "model", "record", "eval", "play"},
           "dreamcade": {"dataset", "model", "dreamcade"}}  # its cli reaches the jobs by name (importlib)


def project_imports(path: Path) -> set[str]:
    """Dotted project modules a file imports (top level, in functions, under TYPE_CHECKING)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
        out |= {n for n in names if n.split(".")[0] in PACKAGES + ("train", "demo")}
    return out


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    return {module_name(p): project_imports(p) for p in files}


def test_imports_go_one_way():
    bad = [f"{mod} imports {imp}" for mod, imps in graph().items() for imp in imps
           if mod.split(".")[0] in ALLOWED and imp.split(".")[0] not in ALLOWED[mod.split(".")[0]]]
    assert bad == []


def test_no_import_cycle():
    g = graph()
    resolve = lambda name: name if name in g else ".".join(name.split(".")[:-1])  # from pkg import module
    edges = {m: {resolve(i) for i in imps if resolve(i) in g and resolve(i) != m} for m, imps in g.items()}
    state, cycles = {}, []

    def visit(m, path):
        state[m] = "open"
        for n in edges[m]:
            if state.get(n) == "open":
                cycles.append(" -> ".join(path[path.index(n):] + [n]))
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert cycles == []
