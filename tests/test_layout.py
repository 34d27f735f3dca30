"""The structure rules of tools/check_layout.py hold: one-way imports between packages, no new import cycle,
files under 800 lines and functions under 80. The checker itself is tested on a small fake tree."""
from __future__ import annotations

import importlib

import networkx as nx

from tools import check_layout


def test_repository_follows_the_layout_rules():
    assert check_layout.violations() == []


def test_known_cycles_still_exist():
    """A cycle that was broken must leave KNOWN_CYCLES (so it cannot come back unnoticed)."""
    g, _ = check_layout.import_graph()
    g.remove_nodes_from([n for n in list(g) if n == "ember"])
    comps = {frozenset(c) for c in nx.strongly_connected_components(g) if len(c) > 1}
    assert set(check_layout.KNOWN_CYCLES) <= comps, set(check_layout.KNOWN_CYCLES) - comps


def test_checker_finds_violations(tmp_path, monkeypatch):
    pkg = tmp_path / "ember"
    for sub in ("decomp", "codegen"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "decomp" / "a.py").write_text("def f():\n    from ember.codegen import b\n")   # backward, hidden
    (pkg / "codegen" / "b.py").write_text("from ember.decomp import a\n")
    (pkg / "codegen" / "c.py").write_text("from . import d\n")
    (pkg / "codegen" / "d.py").write_text("from . import c\n" + "def g():\n" + "    x = 1\n" * 90)
    monkeypatch.setattr(check_layout, "ROOT", tmp_path)
    monkeypatch.setattr(check_layout, "SIZED", ("ember",))
    found = "\n".join(check_layout.violations())
    assert "ember.decomp.a (layer 1: decomp) imports ember.codegen.b" in found
    assert "import cycle: ember.codegen.c <-> ember.codegen.d" in found
    assert "function g has 91 lines" in found
    assert "import cycle: ember.codegen.b <-> ember.decomp.a" in found
    importlib.reload(check_layout)
