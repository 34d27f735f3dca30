"""Functions of ``torch._C`` that read process state, called inside compiled code the way model libraries call
them (transformers' ``is_tracing()``: ``torch._C._is_tracing()`` and friends behind try/except, ``|=`` on a
flag, aliases kept in a module global).

Two defects of one class: such a function bound by pybind11 (``__self__`` is pybind11's function record, not a
module) was taken for a bound method of that record, and the glue rebuilt it as ``record._is_tracing``
(AttributeError in the user's program, or an internal error and an eager fallback); and every such query was
recorded as a graph node whose answer the trace baked in without a guard (toggling the state later ran the
branch of the old answer). Each case: compiled == eager, no graph break, no fallback, no ``torch._C`` node
left in the graph, and a changed answer is a recompile, not a stale branch.
"""
from __future__ import annotations

import pytest
import torch

import ember

QUERIES = [torch._C._is_tracing, torch._C._get_tracing_state, torch._C._are_functorch_transforms_active,
           torch._C._get_cudnn_enabled, torch._C._get_mkldnn_enabled, torch._C._is_torch_function_enabled,
           torch._C._get_deterministic_algorithms]

_alias = None       # a module global holding the query (a library's ``is_jit = torch._C._is_tracing``)


def _direct(fn):
    def f(x):
        return x + 1 if fn() else x - 1
    return f


def _via_global(fn):
    def f(x):
        return x * 2 if _alias() else x * 3
    return f


def _transformers_style(fn):
    def probe():
        try:
            return fn()
        except Exception:       # noqa: BLE001
            return False

    def f(x):
        tracing = False
        tracing |= bool(probe())
        tracing |= x.dim() > 5
        return x * 5 if not tracing else x * 7
    return f


SHAPES = {"direct": _direct, "global": _via_global, "transformers": _transformers_style}


def _graphs(out: list):
    def backend(gm, example_inputs):
        out.append(gm)
        return gm.forward
    return backend


def test_premise_some_queries_are_bound_by_pybind11():
    kinds = {type(q.__self__).__name__ for q in QUERIES}
    assert any(k.startswith("pybind11") or k == "PyCapsule" for k in kinds), kinds


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.__name__)
def test_state_query_is_a_guarded_constant(query, shape, requires_grad):
    global _alias
    _alias = query
    ember.reset()
    fn = SHAPES[shape](query)
    graphs: list = []
    cf = ember.compile(fn, backend=_graphs(graphs))
    for _ in range(2):
        x = torch.randn(4, 3, requires_grad=requires_grad)
        x2 = x.detach().clone().requires_grad_(requires_grad)
        out, ref = cf(x), fn(x2)
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        if requires_grad:
            out.sum().backward()
            ref.sum().backward()
            torch.testing.assert_close(x.grad, x2.grad, rtol=0, atol=0)
    st = ember.stats()
    assert st["graph_breaks"] == 0 and st["fallbacks_to_eager"] == 0, st
    assert st["frames_compiled"] == 1, st
    for gm in graphs:
        left = [n for n in gm.graph.nodes if getattr(n.target, "__module__", None) == "torch._C"]
        assert not left, left


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_changed_state_recompiles(shape):
    """The answer is re-asked on every call: mkldnn switched off between calls runs the other branch."""
    global _alias
    _alias = torch._C._get_mkldnn_enabled
    ember.reset()
    fn = SHAPES[shape](torch._C._get_mkldnn_enabled)
    cf = ember.compile(fn)
    before = torch._C._get_mkldnn_enabled()
    try:
        for on in (before, not before, before):
            torch._C._set_mkldnn_enabled(on)
            x = torch.randn(5)
            torch.testing.assert_close(cf(x), fn(x), rtol=0, atol=0)
    finally:
        torch._C._set_mkldnn_enabled(before)
    st = ember.stats()
    assert st["fallbacks_to_eager"] == 0 and st["graph_breaks"] == 0, st
    assert st["graphs_compiled"] == 2, st        # one per answer; the third call hits the first entry
