"""The house rules that code review alone would let slip: imports go one way (dataset <- record;
dataset <- model <- files <- eval <- play (and record), training and web <- the commands of dreamcade/) and no module
imports itself back through others. Everything is dreamcade.<room>; in a clone the rooms
dataset/, record/, model/, eval/, play/ are top-level folders (dreamcade/__init__ maps them)."""

import ast
from pathlib import Path

from conftest import ROOT

FOLDERS = ("dataset", "record", "model", "play", "eval", "dreamcade")
# what each room may import from the project (dreamcade.<room>); the commands of dreamcade/
# (cli, train, demo, export) sit above them all
ALLOWED = {"dataset": {"dataset"}, "record": {"dataset", "record"}, "model": {"dataset", "model"},
           "files": {"dataset", "model", "files"}, "eval": {"dataset", "model", "files", "eval"},
           "play": {"dataset", "model", "files", "record", "eval", "play"},
           "training": {"dataset", "model", "files", "eval", "training"},
           "web": {"dataset", "model", "files", "record", "eval", "play", "web"}}


def project_imports(path: Path) -> set[str]:
    """Dotted project modules a file imports (top level, in functions, under TYPE_CHECKING)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
        out |= {n for n in names if n.split(".")[0] in FOLDERS + ("train", "demo", "bench")}
    return out


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(parts if parts[0] == "dreamcade" else ("dreamcade", *parts))


def room(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def graph() -> dict[str, set[str]]:
    files = [p for pkg in FOLDERS for p in (ROOT / pkg).rglob("*.py")]
    return {module_name(p): project_imports(p) for p in files}


def test_everything_is_imported_under_one_name():
    bad = [f"{mod} imports {imp}" for mod, imps in graph().items() for imp in imps if not imp.startswith("dreamcade")]
    assert bad == []


def test_imports_go_one_way():
    bad = [f"{mod} imports {imp}" for mod, imps in graph().items() for imp in imps
           if room(mod) in ALLOWED and room(imp) not in ALLOWED[room(mod)]]
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
