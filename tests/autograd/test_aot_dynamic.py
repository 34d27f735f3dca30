"""AOT autograd with symbolic sizes: one compile (traced at the hints) serves every size.

Graphs are built by hand as capture hands them over (docs/dynamic-contract.md): ``torch.fx.symbolic_trace``, a
``SymbolTable`` in ``gm.meta["ember_symbols"]``, ``ember_shape`` on tensor placeholders and ``ember_int`` on
int placeholders. Each program is compiled once with ``aot_compile`` and called with several other sizes:
outputs, gradients and side effects equal eager, and the compiled graphs carry symbolic sizes."""
from __future__ import annotations

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F

from ember.autograd.aot import aot_compile
from ember.autograd.fake import FakeMode, FakeTensor
from ember.autograd.runtime import CompiledGraphs
from ember.shapes import SymbolicUnsupported, SymbolTable, hint_of, is_symbolic


def symbolic_graph(fn, inputs, specs):
    """``fn`` traced to a torch-level graph whose inputs have symbolic sizes: ``specs[i]`` is None (static), a
    tuple of symbol names / ints per dim (tensor) or a symbol name (int input)."""
    gm = fx.symbolic_trace(fn)
    table, syms = SymbolTable(), {}
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for ph, x, spec in zip(phs, inputs, specs):
        if spec is None:
            continue
        if isinstance(spec, str):
            ph.meta["ember_int"] = table.new_symbol(x, f"L['{ph.name}']", lo=None, size=False)
            continue
        shape = []
        for d, name in enumerate(spec):
            if isinstance(name, str):
                if name not in syms:
                    syms[name] = table.new_symbol(x.shape[d], f"L['{ph.name}'].size()[{d}]")
                shape.append(syms[name])
            else:
                shape.append(x.shape[d])
        ph.meta["ember_shape"] = tuple(shape)
        if x.is_contiguous():
            from ember.autograd.symbolic import dense_strides
            ph.meta["ember_stride"] = tuple(dense_strides(shape, list(range(len(shape)))))
    gm.meta["ember_symbols"] = table
    return gm, table


torch.manual_seed(0)
W1, W2 = torch.randn(16, 8, requires_grad=True), torch.randn(4, 16, requires_grad=True)
LN_W, LN_B = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
WQ = torch.randn(8, 24, requires_grad=True)
CONV_W = torch.randn(4, 3, 3, 3, requires_grad=True)


def mlp(x, w1, w2):
    return F.linear(F.relu(F.linear(x, w1)), w2).softmax(-1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (8,), w, b) * 2


def causal_attention(x, wq):
    q, k, v = (x @ wq).split(8, dim=-1)
    t = x.size(1)
    mask = x.new_ones(t, t, dtype=torch.bool).tril()
    s = (q @ k.transpose(-2, -1)) * 8 ** -0.5
    return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v


def conv(x, w):
    return F.relu(F.conv2d(x, w, padding=1)).mean((2, 3))


def cat_pieces(x, y):
    return torch.cat([x, y * 2, x[: x.size(0) // 2]], 0).sin()


def slice_by_size(x):
    n = x.size(1)
    return x[:, : n // 2] * x[:, n - n // 2:]


def view_by_sizes(x):
    b, t = x.size(0), x.size(1)
    return x.reshape(b * t, -1).t().view(-1, b, t).sum(0).exp()


def kv_cache(cache, new, wq):
    kv = torch.cat([cache, new @ wq[:, :8]], dim=1)
    return kv, (new @ wq[:, 8:16]) @ kv.transpose(1, 2)


def int_arg(x, n):
    return x[:n].cos() * 2


def broadcast(x, y):
    return (x[:, None, :] + y[None, :, None]).amax(1)


def view_out(x):
    return x.t(), x[1:]


def inplace(x, y):
    x.mul_(2)
    y[:, 0].add_(1)
    return x + y


def pad_flatten_stack(x):
    return torch.stack([F.pad(x, (1, 1)), F.pad(x, (2, 0))]).flatten(1).tanh()


# name, fn, make(size) -> inputs (params shared), specs, sizes (first: hints), training
CASES = [
    ("mlp", mlp, lambda n: [torch.randn(n, 8), W1, W2], [("b", 8), None, None], [5, 3, 9], True),
    ("layer_norm", layer_norm, lambda n: [torch.randn(n, 3, 8, requires_grad=True), LN_W, LN_B],
     [("b", 3, 8), None, None], [4, 2, 7], True),
    ("causal_attention", causal_attention, lambda n: [torch.randn(2, n, 8, requires_grad=True), WQ],
     [(2, "t", 8), None], [6, 3, 11], True),
    ("conv", conv, lambda n: [torch.randn(n, 3, n + 3, n + 3, requires_grad=True), CONV_W],
     [("b", 3, "h", "h"), None], [3, 2, 5], True),
    ("cat", cat_pieces, lambda n: [torch.randn(n, 3, requires_grad=True), torch.randn(n + 2, 3)],
     [("a", 3), ("c", 3)], [4, 6, 9], True),
    ("slice_by_size", slice_by_size, lambda n: [torch.randn(3, n, requires_grad=True)], [(3, "n")],
     [6, 4, 9], True),
    ("view_by_sizes", view_by_sizes, lambda n: [torch.randn(n, n + 1, 2, requires_grad=True)],
     [("b", "t", 2)], [3, 2, 5], True),
    ("kv_cache", kv_cache, lambda n: [torch.randn(2, n, 8), torch.randn(2, 1, 8, requires_grad=True), WQ],
     [(2, "t", 8), None, None], [4, 5, 6, 9], True),
    ("int_arg", int_arg, lambda n: [torch.randn(n + 3, 4, requires_grad=True), n], [("a", 4), "n"],
     [3, 2, 5], True),
    ("broadcast", broadcast, lambda n: [torch.randn(n, 5, requires_grad=True), torch.randn(n + 1)],
     [("a", 5), ("c",)], [3, 4, 8], True),
    ("pad_flatten_stack", pad_flatten_stack, lambda n: [torch.randn(n, 3, requires_grad=True)], [("a", 3)],
     [3, 2, 6], True),
    ("mlp_inference", mlp, lambda n: [torch.randn(n, 8), W1.detach(), W2.detach()], [("b", 8), None, None],
     [5, 3, 9], False),
    ("view_out", view_out, lambda n: [torch.randn(n, 4)], [("a", 4)], [3, 5, 8], False),
    ("inplace", inplace, lambda n: [torch.randn(n, 3), torch.randn(n, 3)], [("a", 3), ("a", 3)], [3, 5, 7],
     False),
]


def _clone(xs):
    return [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x for x in xs]


def _run(fn, inputs, training):
    out = fn(*inputs)
    flat = list(out) if isinstance(out, tuple) else [out]
    grads = []
    if training:
        leaves = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
        loss = sum((o * torch.randn_like(o, generator=torch.Generator().manual_seed(1))).sum() for o in flat)
        grads = torch.autograd.grad(loss, leaves)
    return flat, grads


def _sources(gm, table):
    from ember.autograd.symbolic import symbol_binder
    return symbol_binder(gm, table).sources.items()


def _symbolic_vals(compiled):
    graphs = []
    for built, *_ in compiled.__ember_aot__.values():
        graphs += [built.fwd, built.bwd] if isinstance(built, CompiledGraphs) else [built.fwd]
    return graphs


@pytest.mark.parametrize("name,fn,make,specs,sizes,training", CASES, ids=[c[0] for c in CASES])
def test_one_compile_serves_every_size(name, fn, make, specs, sizes, training):
    example = make(sizes[0])
    gm, table = symbolic_graph(fn, example, specs)
    with torch.set_grad_enabled(training):
        compiled = aot_compile(gm, example)
    graphs = _symbolic_vals(compiled)
    assert graphs and all(g.meta.get("ember_symbols") is table for g in graphs), name
    fwd_in = [n for n in graphs[0].graph.nodes if n.op == "placeholder"][0]
    assert any(is_symbolic(d) for d in fwd_in.meta["val"].shape), f"{name}: the graph was traced static"
    relations = list(table.relations)
    for n in sizes[1:] + sizes[:1]:
        inputs = make(n)
        values = {s: (inputs[i] if d is None else inputs[i].shape[d]) for s, (i, d) in _sources(gm, table)}
        assert table.check(values), f"{name}: size {n} breaks a relation the compile relied on: {relations}"
        ours, ref = _clone(inputs), _clone(inputs)
        with torch.set_grad_enabled(training):
            got, got_g = _run(compiled, ours, training)
            want, want_g = _run(fn, ref, training)
        for g, w in zip(got + list(got_g), want + list(want_g)):
            torch.testing.assert_close(g, w, msg=f"{name} at size {n}")
        for a, b in zip(ours, ref):     # side effects (in-place updates of inputs)
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a, b, msg=f"{name}: input mutation at size {n}")
        if name == "view_out":          # outputs that view the input share its memory, as in eager
            assert got[1].data_ptr() == ours[0].data_ptr() + 4 * 4 and got[0]._base is not None
    assert len(compiled.__ember_aot__) == 1, f"{name}: one variant for every size"


def _table(*hints):
    t = SymbolTable()
    return t, [t.symint(t.new_symbol(h, f"L['x'].size()[{i}]")) for i, h in enumerate(hints)]


# ops whose PyTorch meta kernel fails on symbolic sizes: ember's rules must give eager's metadata at the hints
SYMBOLIC_OPS = [
    ("expand", lambda x, y, s0, s1: x[:, None].expand(s0, 3, s1)),
    ("view", lambda x, y, s0, s1: x.view(s0 * s1)),
    ("view_infer", lambda x, y, s0, s1: x.view(-1, s1)),
    ("reshape_t", lambda x, y, s0, s1: x.t().reshape(-1)),
    ("add_broadcast", lambda x, y, s0, s1: x + y),
    ("permute", lambda x, y, s0, s1: x.permute(1, 0)),
    ("slice", lambda x, y, s0, s1: x[1:, : s1 // 2]),
    ("slice_neg", lambda x, y, s0, s1: x[-3:, 2:]),
    ("slice_step", lambda x, y, s0, s1: x[::2]),
    ("pad", lambda x, y, s0, s1: F.pad(x, (1, 2))),
    ("stack", lambda x, y, s0, s1: torch.stack([x, x], 1)),
    ("flatten", lambda x, y, s0, s1: x.flatten()),
    ("triu", lambda x, y, s0, s1: x.triu()),
    ("layer_norm", lambda x, y, s0, s1: F.layer_norm(x, (s1,))),
    ("batch_norm", lambda x, y, s0, s1: F.batch_norm(x[:, :3], None, None, training=True)),
    ("view_transposed", lambda x, y, s0, s1: x.t()[:, None].view(s1, s0)),
    ("split", lambda x, y, s0, s1: x.split(2, 1)),
    ("narrow", lambda x, y, s0, s1: x.narrow(1, 1, s1 - 2)),
    ("sdpa", lambda x, y, s0, s1: F.scaled_dot_product_attention(x[None], x[None], x[None], is_causal=True)),
    ("inplace_broadcast", lambda x, y, s0, s1: x.clone().add_(y)),
]


@pytest.mark.parametrize("name,op", SYMBOLIC_OPS, ids=[c[0] for c in SYMBOLIC_OPS])
def test_symbolic_meta_matches_concrete(name, op):
    table, (s0, s1) = _table(5, 7)
    mode = FakeMode()
    x = FakeTensor(torch.empty(s0, s1, device="meta"), torch.device("cpu"), mode)
    y = FakeTensor(torch.empty(s1, device="meta"), torch.device("cpu"), mode)
    with mode:
        out = op(x, y, s0, s1)
    want = op(torch.empty(5, 7, device="meta"), torch.empty(7, device="meta"), 5, 7)
    outs, wants = (out, want) if isinstance(out, (tuple, list)) else ([out], [want])
    assert any(is_symbolic(d) for o in outs for d in o.shape), f"{name}: sizes were specialized"
    for o, w in zip(outs, wants):
        assert [hint_of(d) for d in o.shape] == list(w.shape), name
        assert [hint_of(d) for d in o.stride()] == list(w.stride()) or w.numel() <= 1, name
    assert table.check({table.symbols[0]: 5, table.symbols[1]: 7})


def test_no_symbolic_rule_is_unsupported():
    """An op whose meta kernel and decomposition both fail on symbolic sizes: SymbolicUnsupported (the caller
    compiles static), not a wrong shape."""
    def f(x):
        return torch.nonzero(x) if False else x.unfold(0, 2, 1).sum()   # unfold: a view without a rule
    x = torch.randn(5, 3)
    gm, _ = symbolic_graph(f, [x], [("a", 3)])
    with pytest.raises(SymbolicUnsupported):
        aot_compile(gm, [x])


def test_static_graph_unchanged():
    """Without symbols nothing symbolic happens: the graphs hold plain int sizes."""
    gm = fx.symbolic_trace(mlp)
    x = torch.randn(5, 8)
    compiled = aot_compile(gm, [x, W1, W2])
    for g in _symbolic_vals(compiled):
        for n in g.graph.nodes:
            v = n.meta.get("val")
            if isinstance(v, torch.Tensor):
                assert all(type(d) is int for d in v.shape)


def test_decompose_symbolic_is_unsupported():
    """A prim graph holds its sizes as sympy constants, so decomposed graphs with symbolic sizes run only through
    the kernel compiler (backend "ember"); without one: SymbolicUnsupported, so the caller compiles static,
    never a graph with sizes baked in."""
    x = torch.randn(5, 8)
    gm, _ = symbolic_graph(mlp, [x, W1, W2], [("b", 8), None, None])
    with pytest.raises(SymbolicUnsupported):
        aot_compile(gm, [x, W1, W2], decompose=True)


# ops whose meta kernel fails on symbolic sizes on some releases (torch 2.11's masked_fill/where reference
# expands with plain ints) run ember's decomposition for their metadata; its decisions on sizes (two sizes that
# broadcast must be equal) become relations of the graph's table. Before, they were asked with no table active
# and failed, and the frame compiled with static sizes: transformers' GPT-2 decode on the H100 compiled one
# graph per token (the attention mask of the second layer against the first layer's cache length).
DECOMPOSED_META_OPS = [
    ("masked_fill", torch.ops.aten.masked_fill.Scalar, lambda x, m: (x, m, -1.0)),
    ("where", torch.ops.aten.where.self, lambda x, m: (m, x, x[:1])),
    ("add", torch.ops.aten.add.Tensor, lambda x, m: (x, m.to(torch.float32))),
]


@pytest.mark.parametrize("name,op,args", DECOMPOSED_META_OPS, ids=[c[0] for c in DECOMPOSED_META_OPS])
def test_decomposed_meta_decides_sizes_through_the_table(name, op, args):
    from ember.autograd.symbolic import symbolic_meta
    table, (s0, s1) = _table(5, 5)
    mode = FakeMode()
    x = FakeTensor(torch.empty(s0 + 1, 4, device="meta"), torch.device("cpu"), mode)
    m = FakeTensor(torch.empty(s1 + 1, 4, dtype=torch.bool, device="meta"), torch.device("cpu"), mode)
    out = symbolic_meta(op, args(x, m), {}, RuntimeError("the meta kernel failed on symbolic sizes"))
    assert [hint_of(d) for d in out.shape] == [6, 4] and is_symbolic(out.shape[0]), name
    assert table.check({table.symbols[0]: 5, table.symbols[1]: 5})
    assert not table.check({table.symbols[0]: 5, table.symbols[1]: 6}), f"{name}: no relation s0 == s1 recorded"
