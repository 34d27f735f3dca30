"""Dynamic shapes, capture stage: policy (dynamic=None/True/False, mark_dynamic/mark_static), relation
guards that reject calls violating them, the static fallback of backends without symbols, and the logs."""
import logging
import math

import pytest
import torch

import ember


def _run(fn, calls, **kw):
    ember.reset()
    c = ember.compile(fn, backend=kw.pop("backend", "eager"), **kw)
    for args in calls:
        out = c(*args)
        torch.testing.assert_close(out, fn(*args))
    return ember.stats()


def _f(x):
    return x[: x.shape[0] // 2] * 2


def _rows(*ns):
    return [(torch.randn(n, 4),) for n in ns]


@pytest.mark.parametrize("dynamic,sizes,graphs,symbolic", [
    (None, (4, 6, 10, 8), 2, 1),      # static first, automatic dynamic on the recompile
    (True, (4, 6, 10, 8), 1, 1),      # symbolic from the first call
    (False, (4, 6, 10, 8), 4, 0),     # always specialized
    (None, (1, 4, 6, 1), 2, 1),      # size 1 stays specialized
])
def test_policy_graph_counts(dynamic, sizes, graphs, symbolic):
    s = _run(_f, _rows(*sizes), dynamic=dynamic)
    assert (s["graphs_compiled"], s["symbolic_graphs"], s["fallbacks_to_eager"]) == (graphs, symbolic, 0), s


def test_mark_dynamic_makes_first_call_symbolic_and_checks_range():
    ember.reset()
    c = ember.compile(_f, backend="eager")
    x = torch.randn(6, 4)
    ember.mark_dynamic(x, 0, min=2, max=10)
    torch.testing.assert_close(c(x), _f(x))
    assert ember.stats()["symbolic_graphs"] == 1
    for n in (4, 9):
        y = torch.randn(n, 4)
        torch.testing.assert_close(c(y), _f(y))
    assert ember.stats()["graphs_compiled"] == 1
    big = torch.randn(12, 4)            # outside [2, 10]: the guard rejects it, a new entry is correct
    torch.testing.assert_close(c(big), _f(big))
    assert ember.stats()["graphs_compiled"] == 2


def test_mark_static_pins_a_dim():
    ember.reset()
    c = ember.compile(_f, backend="eager", dynamic=True)
    for n in (4, 6, 8):
        x = torch.randn(n, 4)
        ember.mark_static(x, 0)
        torch.testing.assert_close(c(x), _f(x))
    assert ember.stats()["graphs_compiled"] == 3       # dim 0 pinned: one entry per size (dim 1 symbolic)


def _torch_mark_dynamic(x, **kw):
    import torch._dynamo        # the reference's own marking function (tests may import Dynamo)
    torch._dynamo.mark_dynamic(x, 0, **kw)


def _torch_maybe_mark_dynamic(x, **kw):
    import torch._dynamo
    torch._dynamo.maybe_mark_dynamic(x, 0)


@pytest.mark.parametrize("mark", [_torch_mark_dynamic, _torch_maybe_mark_dynamic])
def test_torch_dynamo_markings_make_first_call_symbolic(mark):
    """Code written for torch.compile marks dims with ``torch._dynamo.mark_dynamic``; ember reads the marking
    (before: ignored, so every batch size compiled its own graph until automatic dynamic)."""
    ember.reset()
    c = ember.compile(_f, backend="eager")
    for n in (6, 4, 9):
        x = torch.randn(n, 4)
        mark(x)
        torch.testing.assert_close(c(x), _f(x))
        assert ember.stats()["symbolic_graphs"] == 1 and ember.stats()["graphs_compiled"] == 1, ember.stats()


def test_torch_dynamo_mark_dynamic_range_and_mark_static():
    import torch._dynamo
    ember.reset()
    c = ember.compile(_f, backend="eager")
    x = torch.randn(6, 4)
    torch._dynamo.mark_dynamic(x, 0, min=2, max=10)
    torch.testing.assert_close(c(x), _f(x))
    big = torch.randn(12, 4)            # outside [2, 10]: a new entry
    torch.testing.assert_close(c(big), _f(big))
    assert ember.stats()["graphs_compiled"] == 2
    ember.reset()
    c = ember.compile(_f, backend="eager", dynamic=True)
    for n in (4, 6, 8):
        x = torch.randn(n, 4)
        torch._dynamo.mark_static(x, 0)
        torch.testing.assert_close(c(x), _f(x))
    assert ember.stats()["graphs_compiled"] == 3


def _branch(x):
    if x.shape[0] > 4:
        return x * 2
    return x - 1


def _parity(x):
    return x.view(2, -1) if x.size(0) % 2 == 0 else x + 1


def _square(x, y):
    return x @ y


@pytest.mark.parametrize("fn,make,ok,bad", [
    (_branch, lambda n: (torch.randn(n, 3),), (6, 8), 3),            # s0 > 4
    (_parity, lambda n: (torch.randn(n, 3),), (6, 8), 5),            # s0 % 2 == 0
    (_square, lambda n: (torch.randn(n, n), torch.randn(n, 2)), (5, 6), None),
])
def test_guards_reject_a_violated_relation_and_recompile_correctly(fn, make, ok, bad):
    ember.reset()
    c = ember.compile(fn, backend="eager", dynamic=True)
    for n in ok:
        args = make(n)
        torch.testing.assert_close(c(*args), fn(*args))
    assert ember.stats()["graphs_compiled"] == 1
    if bad is not None:
        args = make(bad)
        torch.testing.assert_close(c(*args), fn(*args))
        assert ember.stats()["graphs_compiled"] == 2


def test_unequal_sizes_after_unification_are_rejected():
    """``x @ y`` unifies y's first dim with x's second: a call where they differ must not hit the entry."""
    ember.reset()
    c = ember.compile(_square, backend="eager", dynamic=True)
    c(torch.randn(4, 5), torch.randn(5, 2))
    with pytest.raises(RuntimeError):
        c(torch.randn(4, 5), torch.randn(6, 2))      # eager raises too: the guard did not let it through


def _int_arg(x, k):
    return x[:k] * k


def test_int_argument_automatic_dynamic():
    calls = [(torch.randn(10, 2), k) for k in (3, 5, 7, 4)]
    s = _run(_int_arg, calls)
    assert s["graphs_compiled"] == 2 and s["symbolic_graphs"] == 1, s


def test_backend_without_symbols_falls_back_static_not_eager():
    def no_symbols(gm, example_inputs):
        from ember.shapes import SymbolicUnsupported
        if gm.meta.get("ember_symbols") is not None and gm.meta["ember_symbols"].symbols:
            raise SymbolicUnsupported("this backend takes static graphs only")
        return gm.forward
    s = _run(_f, _rows(4, 6, 8), backend=no_symbols)
    assert s["fallbacks_to_eager"] == 0 and s["symbolic_graphs"] == 0 and s["graphs_compiled"] == 3, s


def test_aot_eager_compiles_one_symbolic_graph():
    s = _run(_f, _rows(4, 6, 8, 10), backend="aot_eager")
    assert s["fallbacks_to_eager"] == 0 and s["symbolic_graphs"] == 1 and s["graphs_compiled"] == 2, s


def test_dynamic_log_prints_symbols_relations_and_specializations(caplog):
    def g(x):
        n = x.shape[0]
        if n > 4:
            return x * math.factorial(n)    # needs a Python constant: specialized (float(n) would not be)
        return x
    ember.set_logs(dynamic=True)
    try:
        with caplog.at_level(logging.INFO, logger="ember"):
            _run(g, _rows(5, 6), dynamic=True)
    finally:
        ember.set_logs(dynamic=False)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "symbol s0 = x.size()[0]" in text
    assert "relation (s0 > 4)" in text and "test_dynamic_policy.py" in text
    assert "specialized" in text


def test_guards_log_shows_the_symbol_binding(caplog):
    ember.set_logs(guards=True)
    try:
        with caplog.at_level(logging.INFO, logger="ember"):
            _run(_branch, _rows(5), dynamic=True)
    finally:
        ember.set_logs(guards=False)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "__sym_s0 := " in text and "(__sym_s0 > 4)" in text
