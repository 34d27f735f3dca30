"""Dynamic shapes, capture stage (backend="eager"): the program table of tests/dynamic_programs.py.

For each program called with its sequence of sizes: outputs equal eager, ember's graph count is at most
torch.compile's (dynamic=None, counted with a counting backend) and nothing falls back to eager.
"""
import sys
from pathlib import Path

import pytest
import torch

import ember

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dynamic_programs import PROGRAMS, same, torch_graph_count  # noqa: E402


def _ember_run(prog, **kw):
    ember.reset()
    model = prog.make()
    c = ember.compile(model, backend="eager", **kw)
    for s in prog.sizes:
        torch.manual_seed(s)
        args = prog.inputs(s)
        same(c(*args), model(*args))
    return ember.stats()


@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_program_graph_count_at_most_torch_compile(prog):
    stats = _ember_run(prog)
    assert stats["fallbacks_to_eager"] == 0
    assert stats["graphs_compiled"] <= torch_graph_count(prog.name), stats
    if len(set(prog.sizes)) > 2:
        assert stats["symbolic_graphs"] >= 1, stats


def test_table_has_at_least_40_programs():
    assert len(PROGRAMS) >= 40


def test_mlp_batch_sizes_compile_two_graphs():
    prog = next(p for p in PROGRAMS if p.name == "mlp_two_layers")
    stats = _ember_run(prog)
    assert stats["graphs_compiled"] == 2 and stats["symbolic_graphs"] == 1, stats


def test_kv_cache_never_falls_back():
    prog = next(p for p in PROGRAMS if p.name == "kv_cache_grows")
    stats = _ember_run(prog)
    assert stats["fallbacks_to_eager"] == 0 and stats["graphs_compiled"] <= 2, stats
