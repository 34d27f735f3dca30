"""AOT autograd with symbolic sizes, second round: the classes of programs the first round compiled static.

Each program is compiled once through ``aot_compile`` with symbolic sizes (graphs built as capture hands them
over, see ``test_aot_dynamic.symbolic_graph``) and called at other sizes: values, gradients and side effects
equal eager's, the compiled graphs are symbolic, and one variant serves every size."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ember.autograd.aot import aot_compile
from ember.shapes import is_symbolic

from tests.autograd.test_aot_dynamic import _clone, _run, _symbolic_vals, symbolic_graph


def check_one_compile(name, fn, make, specs, sizes, training):
    example = make(sizes[0])
    gm, table = symbolic_graph(fn, example, specs)
    with torch.set_grad_enabled(training):
        compiled = aot_compile(gm, example)
    graphs = _symbolic_vals(compiled)
    fwd_in = [n for n in graphs[0].graph.nodes if n.op == "placeholder"]
    assert any(is_symbolic(d) for p in fwd_in if isinstance(p.meta.get("val"), torch.Tensor)
               for d in p.meta["val"].shape), f"{name}: the graph was traced static"
    for n in sizes[1:] + sizes[:1]:
        inputs = make(n)
        values = symbol_values(table, specs, inputs)
        assert table.check(values), f"{name}: size {n} breaks a relation: {table.relations}"
        ours, ref = _clone(inputs), _clone(inputs)
        with torch.set_grad_enabled(training):
            got, got_g = _run(compiled, ours, training)
            want, want_g = _run(fn, ref, training)
        for g, w in zip(got + list(got_g), want + list(want_g)):
            torch.testing.assert_close(g, w, msg=f"{name} at size {n}")
        for a, b in zip(ours, ref):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a, b, msg=f"{name}: input mutation at size {n}")
    assert len(compiled.__ember_aot__) == 1, f"{name}: one variant for every size"
    return table


def symbol_values(table, specs, inputs):
    """Each symbol's value for a call (symbols are made in order of first appearance in ``specs``)."""
    names, values = {}, {}
    for spec, x in zip(specs, inputs):
        for d, name in enumerate([spec] if isinstance(spec, str) else spec or ()):
            if isinstance(name, str) and name not in names:
                names[name] = table.symbols[len(names)]
                values[names[name]] = x if isinstance(spec, str) else x.shape[d]
    return values


def _tri(x):
    t = x.size(-1)
    return x.new_ones(t, t, dtype=torch.bool).tril()


# pointwise ops broadcasting two different symbols that are equal at run time (x: [2, s0, s1], s0 == s1)
BROADCAST_EQUAL = [
    ("masked_fill_scalar", lambda x: x.masked_fill(~_tri(x), -1e4).softmax(-1)),
    ("add_tensor", lambda x: x + _tri(x).float()),
    ("mul_tensor", lambda x: (x * _tri(x)).sum(-1)),
    ("where", lambda x: torch.where(_tri(x), x, torch.zeros(())).exp()),
    ("sub_rsub", lambda x: 1 - x * x.new_ones(x.size(-1), x.size(-1))),
]


@pytest.mark.parametrize("training", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("name,fn", BROADCAST_EQUAL, ids=[c[0] for c in BROADCAST_EQUAL])
def test_broadcast_of_equal_symbols(name, fn, training):
    """The broadcast of ``[s1, s1]`` against ``[2, s0, s1]`` holds when ``s0 == s1``: a relation decided
    through the table (and the symbols unified), not a structural check that fails."""
    table = check_one_compile(name, fn, lambda n: [torch.randn(2, n, n, requires_grad=training)],
                              [(2, "a", "b")], [5, 3, 8], training)
    s0, s1 = table.symbols
    assert table.simplify(s1) == table.simplify(s0), table.relations
    assert not table.check({s0: 4, s1: 5}), "the entry must not serve s0 != s1"


# scans: cumsum/cumprod's meta kernels fail on symbolic sizes and their decompositions are not shape-generic
# (logcumsumexp, cummax: the meta kernel works; kept as the rest of the class). cumprod's C++ backward formula
# reads a concrete size, so its training graph is specialized: inference only
SCANS = [
    ("cumsum_flat", lambda x: x.reshape(-1).cumsum(0)),
    ("cumsum_dim", lambda x: x.cumsum(1) * 2),
    ("cumprod", lambda x: (x.sigmoid() + 0.5).cumprod(1)),
    ("logcumsumexp", lambda x: x.logcumsumexp(1)),
    ("cummax", lambda x: x.cummax(0)[0] + x.cummin(1)[0]),
]


SCAN_CASES = [(n, f, t) for n, f in SCANS for t in (False, True) if not (t and n == "cumprod")]


@pytest.mark.parametrize("name,fn,training", SCAN_CASES,
                         ids=[f"{n}-{'train' if t else 'infer'}" for n, _, t in SCAN_CASES])
def test_scan_over_symbolic_size(name, fn, training):
    check_one_compile(name, fn, lambda n: [torch.randn(n, n + 2, requires_grad=training)], [("a", "b")],
                      [4, 3, 7], training)


def test_relation_names_the_user_line():
    """A relation AOT autograd records while tracing a node says which user line (``ember_loc``) needed it."""
    gm, table = symbolic_graph(BROADCAST_EQUAL[0][1], [torch.randn(2, 5, 5)], [(2, "a", "b")])
    for n in gm.graph.nodes:
        n.meta["ember_loc"] = f"model.py:{10 + len(n.name)}"
    fill = next(n for n in gm.graph.nodes if n.target == "masked_fill")
    aot_compile(gm, [torch.randn(2, 5, 5)])
    eq = [r for r in table.relations if r.expr.func.__name__ == "Equality"]
    assert eq and eq[0].where == fill.meta["ember_loc"], table.relations


def _bn_inputs(shape, affine=True):
    def make(n):
        full = [n if d == "c" else d for d in shape]
        xs = [torch.randn(*full, requires_grad=True), torch.randn(n) * 0.1, torch.rand(n) + 0.5]
        return xs + ([torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)] if affine else [])
    return make


def _bn_train(x, rm, rv, w, b):
    return F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3).tanh()


def _bn_eval(x, rm, rv, w, b):
    return F.batch_norm(x, rm, rv, w, b, training=False) * 2


def _bn_plain(x, rm, rv):
    return F.batch_norm(x, rm, rv, training=True)


# batch norm over a symbolic channel count: the running statistics (mutated inputs) are [c] too
BATCH_NORMS = [
    ("train_2d", _bn_train, _bn_inputs((4, "c")), [(4, "c"), ("c",), ("c",), ("c",), ("c",)]),
    ("train_3d", _bn_train, _bn_inputs((3, "c", 5)), [(3, "c", 5), ("c",), ("c",), ("c",), ("c",)]),
    ("train_4d", _bn_train, _bn_inputs((2, "c", 3, 3)), [(2, "c", 3, 3), ("c",), ("c",), ("c",), ("c",)]),
    ("eval_3d", _bn_eval, _bn_inputs((3, "c", 5)), [(3, "c", 5), ("c",), ("c",), ("c",), ("c",)]),
    ("no_affine", _bn_plain, _bn_inputs((3, "c", 2), affine=False), [(3, "c", 2), ("c",), ("c",)]),
]


@pytest.mark.parametrize("training", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("name,fn,make,specs", BATCH_NORMS, ids=[c[0] for c in BATCH_NORMS])
def test_batch_norm_symbolic_channels(name, fn, make, specs, training):
    check_one_compile(name, fn, make, specs, [5, 3, 8], training)


# through capture: a symbolic int used as a scalar operand stays symbolic; inputs whose storage starts at an
# offset get fakes with that (symbolic) offset. These passed before this round; kept as the class's guard.
CAPTURED = [
    ("int_add", lambda x, n: x + n, lambda n: [torch.randn(n, 3), n]),
    ("int_mul_div", lambda x, n: (x * n).sum(0) / n, lambda n: [torch.randn(4, 3), n]),
    ("size_scalar", lambda x: x * x.size(0) - x.size(1), lambda n: [torch.randn(n, n + 1)]),
    ("offset_rows", lambda x: x.sin() * 2, lambda n: [torch.randn(n + 3, 4)[2:]]),
    ("offset_view", lambda x: x.cumsum(1), lambda n: [torch.randn(n * 4 + 5)[5:].view(n, 4)]),
]


@pytest.mark.parametrize("name,fn,make", CAPTURED, ids=[c[0] for c in CAPTURED])
def test_captured_scalars_and_offsets(name, fn, make):
    import ember
    ember.reset()
    compiled = ember.compile(fn, backend="aot_eager", dynamic=True)
    for n in (3, 5, 6, 8):
        args = make(n)
        torch.testing.assert_close(compiled(*args), fn(*args), msg=f"{name} at {n}")
    stats = ember.stats()
    assert stats["graphs_compiled"] == 1 and stats["symbolic_graphs"] == 1, stats
