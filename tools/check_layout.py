"""The repository's structure rules, checked in CI (``tests/test_layout.py``) and by hand:

    python -m tools.check_layout            # prints every violation; exit status 1 if there is any

1. **Layers.** ember's packages import one way: a module may import its own package and the packages of lower
   layers only (``LAYERS``, lowest first; packages in one layer do not import each other). Imports inside
   functions count: deferring an import hides a dependency, it does not remove it.
2. **No import cycles** between modules (strongly connected components of the module import graph), except
   the ones listed in ``KNOWN_CYCLES`` with the reason each is still there.
3. **Sizes.** Files of ``ember/``, ``tools/`` and ``benchmarks/`` stay under ``MAX_FILE_LINES`` lines and
   their functions under ``MAX_FUNCTION_LINES``.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80
SIZED = ("ember", "tools", "benchmarks")

# lowest first; a package may import the packages of earlier layers (and the stand-alone base modules)
LAYERS: list[set[str]] = [
    {"errors", "logs", "options", "heuristics", "emit", "dynamo_free", "gcpause", "diskcache", "shapes", "counters",
     "cache_artifacts", "__init__"},
    {"decomp"},
    {"autograd", "loopir"},
    {"codegen"},
    {"runtime"},
    {"backends", "capture"},
    {"api", "explain", "deploy", "graphcache", "demo", "bench"},
]

FLAT = {0, len(LAYERS) - 1}     # layers whose members may import each other (base utilities, entry points)

# module cycles that exist today, each with why it is still there (a new one fails the check)
_C = "ember.capture."
KNOWN_CYCLES: dict[frozenset, str] = {
    frozenset(_C + m for m in ("builtins_sym", "containers", "objects", "operators", "resume", "setattrs",
                               "symbolic")):
        "the interpreter's value handlers call each other (a container's method calls back into the "
        "interpreter's generic call); to break: handlers register into a table in a module below them",
    frozenset({_C + "torch.hookguard", _C + "torch.modules"}):
        "module calls guard hooks and hook guards inline module calls; to break: move the shared helpers down",
}


def _layer(pkg: str) -> int:
    for i, layer in enumerate(LAYERS):
        if pkg in layer:
            return i
    raise KeyError(pkg)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, mod: str, known: set[str]) -> list[tuple[str, int]]:
    """(imported ember module, line) for every import in ``path``, at any depth."""
    is_pkg = path.name == "__init__.py"
    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = pkg[:len(pkg) - node.level + 1] if node.level else []
            target = ".".join(base + (node.module.split(".") if node.module else []))
            for alias in node.names:     # ``from ember import logs`` imports the module ember.logs
                sub = f"{target}.{alias.name}"
                out.append((sub if sub in known else target, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
    return [(t, ln) for t, ln in out if t == "ember" or t.startswith("ember.")]


def _package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _resolve(target: str, known: set[str]) -> str | None:
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def import_graph() -> tuple[nx.DiGraph, dict]:
    files = {module_name(p): p for p in (ROOT / "ember").rglob("*.py")}
    known = set(files)
    g = nx.DiGraph()
    where: dict[tuple[str, str], str] = {}
    for mod, path in files.items():
        g.add_node(mod)
        for target, line in _imports(path, mod, known):
            t = _resolve(target, known)
            if t and t != mod and not mod.startswith(t + ".") or t and mod == "ember" and t != mod:
                g.add_edge(mod, t)
                where.setdefault((mod, t), f"{path.relative_to(ROOT)}:{line}")
    return g, where


def layer_violations(g: nx.DiGraph, where: dict) -> list[str]:
    out = []
    for a, b in g.edges:
        pa, pb = _package(a), _package(b)
        if pa == pb or pb == "__init__":
            continue
        la, lb = _layer(pa), _layer(pb)
        if lb > la or lb == la and la not in FLAT:
            out.append(f"{where[(a, b)]}: {a} (layer {la}: {pa}) imports {b} (layer {lb}: {pb}); packages "
                       "import only lower layers")
    return out


def cycles(g: nx.DiGraph) -> list[str]:
    g = g.copy()
    g.remove_nodes_from([n for n in list(g) if n == "ember"])     # the lazy top-level package
    out = []
    for comp in nx.strongly_connected_components(g):
        if len(comp) > 1 and frozenset(comp) not in KNOWN_CYCLES:
            out.append("import cycle: " + " <-> ".join(sorted(comp)))
    return out


def size_violations() -> list[str]:
    out = []
    for top in SIZED:
        for path in sorted((ROOT / top).rglob("*.py")):
            src = path.read_text()
            rel = path.relative_to(ROOT)
            n = src.count("\n")
            if n > MAX_FILE_LINES:
                out.append(f"{rel}: {n} lines (at most {MAX_FILE_LINES}): split it")
            for node in ast.walk(ast.parse(src, str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        out.append(f"{rel}:{node.lineno}: function {node.name} has {length} lines (at most "
                                   f"{MAX_FUNCTION_LINES}): split it")
    return out


def violations() -> list[str]:
    g, where = import_graph()
    return layer_violations(g, where) + cycles(g) + size_violations()


def main() -> int:
    found = violations()
    for v in found:
        print(v)
    print(f"{len(found)} violation(s)" if found else "layout ok")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
