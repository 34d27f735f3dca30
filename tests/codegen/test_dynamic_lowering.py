"""Symbolic sizes through decompositions, loop IR, the C++ kernels and the wrapper (docs/dynamic-contract.md).

Each case is an ATen FX graph built by hand with symbolic metadata: a ``SymbolTable`` with hinted symbols,
placeholders whose ``meta["val"]`` are ember fake tensors with ``torch.SymInt`` sizes, ``sym_size.int`` nodes and
``operator`` arithmetic on them. The graph is decomposed (as AOT autograd does), compiled once by
``compile_graph`` with those symbols, and run with several sizes against eager ATen execution of the same graph.
A case passes only if the graph really compiled symbolically (C++ kernels taking ``int64_t`` size arguments,
or ATen externs bound to run-time sizes) and every run satisfies the relations the compile recorded.
"""
from __future__ import annotations

import operator
import re

import pytest
import sympy
import torch
import torch.fx as fx

from ember.autograd.aot import decompose_graph
from ember.autograd.fake import FakeMode, FakeTensor
from ember.codegen import compile_graph
from ember.decomp import meta_decomposition
from ember.decomp.meta import meta_of
from ember.loopir.indexing import fold_divmod
from ember.options import CompileOptions
from ember.shapes import SymbolTable, SymbolicUnsupported

aten = torch.ops.aten
OPTS = {b: CompileOptions(cpu_backend=b) for b in ("cpp", "python")}
F32, I64 = torch.float32, torch.int64


def _sym(x, d):
    return aten.sym_size.int(x, d)


def build(fn, specs, hints, fake=False):
    """An ATen graph of ``fn`` whose inputs are ``specs`` (``(shape, dtype)`` with symbol names for symbolic
    dims, or ``("int", name)`` for an int input). Placeholders hold ember fake tensors with ``torch.SymInt``
    sizes over a fresh table; each op's ``meta["val"]`` comes from ember's decomposition meta rules (sympy
    sizes), ``sym_size``/``operator`` nodes hold ``SymInt``s. With ``fake`` every op runs on the fake tensors
    instead, as AOT autograd traces (``meta["val"]`` fake tensors with ``SymInt`` sizes)."""
    table, mode = SymbolTable(), FakeMode()
    syms = {}

    def sym(name, size=True):
        if name not in syms:
            syms[name] = table.symint(table.new_symbol(hints[name], f"L['{name}']", size=size))
        return syms[name]
    vals = []
    for spec in specs:
        if spec[0] == "int":
            vals.append(sym(spec[1], size=False))
            continue
        shape, dt = spec
        meta = torch.empty([sym(d) if isinstance(d, str) else d for d in shape], dtype=dt, device="meta")
        vals.append(FakeTensor(meta, torch.device("cpu"), mode))
    gm = fx.symbolic_trace(fn)
    if fake:
        _annotate_fake(gm, vals, mode)
        gm.meta["ember_symbols"] = table
        return gm, table
    args = iter(vals)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            n.meta["val"] = next(args)
        elif n.op == "get_attr":        # a constant tensor
            n.meta["val"] = getattr(gm, n.target)
        elif n.op == "call_function":
            a, kw = fx.map_arg((n.args, n.kwargs), lambda m: m.meta["val"])
            n.meta["val"] = _meta(n.target, a, kw, table)
    gm.meta["ember_symbols"] = table
    return gm, table


def _annotate_fake(gm, vals, mode):
    class Annotate(fx.Interpreter):
        def run_node(self, n):
            v = super().run_node(n)
            n.meta["val"] = v
            return v
    # PyTorch's composite meta kernels take SymInts through their Python registrations (the Python dispatcher)
    from torch._dispatch.python import enable_python_dispatcher
    with mode, enable_python_dispatcher():
        Annotate(gm).run(*vals)


def _meta(target, args, kwargs, table):
    if target is aten.sym_size.int:
        return table.symint(meta_of(args[0]).shape[args[1]])
    if target is operator.getitem or getattr(target, "__module__", "") == "_operator":
        return target(*args)
    return meta_decomposition(target, *args, **kwargs)


def real_inputs(specs, sizes, gen):
    out = []
    for spec in specs:
        if spec[0] == "int":
            out.append(sizes[spec[1]])
            continue
        shape, dt = spec
        shape = [sizes[d] if isinstance(d, str) else d for d in shape]
        if dt == I64:
            out.append(torch.randint(0, 10, shape, generator=gen))
        else:
            out.append(torch.randn(shape, generator=gen, dtype=dt))
    return out


def compiled(fn, specs, hints, backend="cpp", kind="inference", fake=False, decompose=True):
    gm, table = build(fn, specs, hints, fake)
    prims = decompose_graph(gm) if decompose else fx.GraphModule(gm, gm.graph)
    prims.meta["ember_symbols"] = table
    return gm, table, compile_graph(prims, kind, OPTS[backend])


def _causal_softmax(x):
    t = _sym(x, 1)
    pos = aten.arange.default(t, dtype=I64, device="cpu")
    future = aten.gt.Tensor(aten.unsqueeze.default(pos, 0), aten.unsqueeze.default(pos, 1))
    masked = aten.where.self(future, aten.full.default([], float("-inf"), dtype=F32, device="cpu"), x)
    return aten._softmax.default(masked, -1, False)


def _mm_chain(x, w):
    """sin's buffer dies at the first matmul; the softmax's output (same symbolic size; a reduction, so not
    stored in place) takes its memory."""
    a = aten.mm.default(aten.sin.default(x), w)
    return aten.mm.default(aten._softmax.default(a, -1, False), w)


def _attention(q, k, v):
    """Scaled dot-product attention by hand over a symbolic sequence length, with a causal mask."""
    scores = aten.mul.Tensor(aten.bmm.default(q, aten.transpose.int(k, 1, 2)), 0.25)
    return aten.bmm.default(_causal_softmax(scores), v)


def _split_heads(x):
    """(b, t, 8) -> (b, 2, t, 4) by symbolic sizes, and back."""
    b, t = _sym(x, 0), _sym(x, 1)
    h = aten.permute.default(aten.view.default(x, [b, t, 2, 4]), [0, 2, 1, 3])
    return aten.reshape.default(aten.permute.default(aten.exp.default(h), [0, 2, 1, 3]), [b * t, 8])


def _conv_block(x, w1, w2):
    """Four convolutions (``channels_last_min_convs``: the graph computes channels-last), ReLUs, a residual add and a
    mean over the spatial dims."""
    conv = lambda a, w: aten.convolution.default(a, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)  # noqa: E731
    y = aten.relu.default(conv(x, w1))
    z = aten.add.Tensor(conv(y, w2), y)
    return aten.mean.dim(conv(aten.relu.default(conv(z, w2)), w2), [2, 3])


def _triu_mask(x):
    t = _sym(x, 0)
    ones = aten.ones.default([t, t], dtype=F32, device="cpu")
    return aten.mul.Tensor(x, aten.triu.default(ones, 1))


# name: (fn, input specs, hints, sizes of later runs)
CASES = {
    "pointwise": (lambda x, y: aten.exp.default(aten.mul.Tensor(aten.add.Tensor(x, y), 2.0)),
                  [(("s0", 3), F32), (("s0", 3), F32)], {"s0": 5}, [{"s0": 2}, {"s0": 19}, {"s0": 64}]),
    "broadcast_row": (lambda x, y: aten.sub.Tensor(x, y),
                      [(("s0", "s1"), F32), (("s1",), F32)], {"s0": 5, "s1": 7}, [{"s0": 3, "s1": 33}]),
    "broadcast_outer": (lambda x, y: aten.mul.Tensor(x, y),
                        [(("s0", 1), F32), ((1, "s1"), F32)], {"s0": 4, "s1": 9}, [{"s0": 17, "s1": 2}]),
    "sum_symbolic_dim": (lambda x: aten.sum.dim_IntList(x, [0]),
                         [(("s0", 6), F32)], {"s0": 5}, [{"s0": 2}, {"s0": 70}]),
    "sum_static_dim": (lambda x: aten.sum.dim_IntList(x, [1]),
                       [(("s0", 24), F32)], {"s0": 5}, [{"s0": 2}, {"s0": 70}]),
    "mean_last_symbolic": (lambda x: aten.mean.dim(x, [-1], True),
                           [((3, "s0"), F32)], {"s0": 20}, [{"s0": 7}, {"s0": 33}]),
    "amax_both": (lambda x: aten.amax.default(x, [0, 1]),
                  [(("s0", "s1"), F32)], {"s0": 5, "s1": 9}, [{"s0": 2, "s1": 40}]),
    "softmax_symbolic_dim": (lambda x: aten._softmax.default(x, -1, False),
                             [((4, "s0"), F32)], {"s0": 20}, [{"s0": 3}, {"s0": 45}]),
    "softmax_static_dim": (lambda x: aten._softmax.default(x, 1, False),
                           [(("s0", 16), F32)], {"s0": 6}, [{"s0": 2}, {"s0": 33}]),
    "mm": (lambda x, w: aten.mm.default(x, w),
           [(("s0", 8), F32), ((8, 5), F32)], {"s0": 6}, [{"s0": 2}, {"s0": 31}]),
    "addmm_relu": (lambda b, x, w: aten.relu.default(aten.addmm.default(b, x, w)),
                   [((5,), F32), (("s0", "s1"), F32), (("s1", 5), F32)], {"s0": 6, "s1": 4},
                   [{"s0": 3, "s1": 9}]),
    "view_by_sizes": (lambda x: aten.view.default(x, [_sym(x, 0) * 2, _sym(x, 2)]),
                      [(("s0", 2, "s1"), F32)], {"s0": 3, "s1": 5}, [{"s0": 7, "s1": 2}]),
    "reshape_merge_add": (lambda x, y: aten.add.Tensor(aten.reshape.default(x, [-1]), y),
                          [(("s0", 4), F32), (("s1",), F32)], {"s0": 3, "s1": 12}, [{"s0": 5, "s1": 20}]),
    "cat": (lambda x, y: aten.cat.default([x, aten.neg.default(y)], 0),
            [(("s0", 3), F32), (("s1", 3), F32)], {"s0": 4, "s1": 6}, [{"s0": 9, "s1": 2}]),
    "cat_dim1": (lambda x, y: aten.cat.default([x, y], 1),
                 [((3, "s0", 2), F32), ((3, "s1", 2), F32)], {"s0": 4, "s1": 5}, [{"s0": 7, "s1": 2}]),
    "slice_computed": (lambda x: aten.slice.Tensor(x, 1, 0, operator.floordiv(_sym(x, 1), 2)),
                       [((3, "s0"), F32)], {"s0": 8}, [{"s0": 5}, {"s0": 20}]),
    "slice_int_input": (lambda x, n: aten.mul.Tensor(aten.slice.Tensor(x, 0, 1, n), 3.0),
                        [(("s0", 4), F32), ("int", "i0")], {"s0": 10, "i0": 4}, [{"s0": 12, "i0": 7}]),
    "arange_of_size": (lambda x: aten.add.Tensor(x, aten.arange.default(_sym(x, 1), dtype=F32, device="cpu")),
                       [(("s0", "s1"), F32)], {"s0": 3, "s1": 5}, [{"s0": 6, "s1": 11}]),
    "layer_norm": (lambda x, w, b: aten.native_layer_norm.default(x, [16], w, b, 1e-5)[0],
                   [(("s0", 16), F32), ((16,), F32), ((16,), F32)], {"s0": 5}, [{"s0": 2}, {"s0": 40}]),
    "layer_norm_symbolic_width": (lambda x: aten.native_layer_norm.default(x, [_sym(x, 1)], None, None, 1e-5)[0],
                                  [((3, "s0"), F32)], {"s0": 24}, [{"s0": 7}, {"s0": 65}]),
    "causal_softmax": (_causal_softmax, [((2, "s0", "s0"), F32)], {"s0": 6}, [{"s0": 3}, {"s0": 17}]),
    "triu_mask": (_triu_mask, [(("s0", "s0"), F32)], {"s0": 5}, [{"s0": 9}]),
    "mm_chain_reuse": (_mm_chain, [(("s0", 8), F32), ((8, 8), F32)], {"s0": 6}, [{"s0": 2}, {"s0": 41}]),
    "conv2d_batch_and_spatial": (
        lambda x, w, b: aten.convolution.default(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
        [(("s0", 3, "s1", "s1"), F32), ((4, 3, 3, 3), F32), ((4,), F32)], {"s0": 2, "s1": 6},
        [{"s0": 3, "s1": 9}]),
    "conv_block_channels_last": (_conv_block, [(("s0", 4, "s1", "s2"), F32), ((8, 4, 3, 3), F32), ((8, 8, 3, 3), F32)],
                                 {"s0": 2, "s1": 6, "s2": 5}, [{"s0": 3, "s1": 9, "s2": 4}]),
    "attention_causal": (_attention, [((2, "s0", 4), F32)] * 3, {"s0": 5}, [{"s0": 2}, {"s0": 19}]),
    "split_heads": (_split_heads, [(("s0", "s1", 8), F32)], {"s0": 2, "s1": 5}, [{"s0": 3, "s1": 11}]),
    "var_mean": (lambda x: aten.var_mean.correction(x, [1], correction=1, keepdim=True)[0],
                 [(("s0", "s1"), F32)], {"s0": 3, "s1": 10}, [{"s0": 5, "s1": 2}, {"s0": 2, "s1": 37}]),
    "expand": (lambda x, y: aten.add.Tensor(aten.expand.default(x, [_sym(y, 0), _sym(x, 1)]), y),
               [((1, "s0"), F32), (("s1", "s0"), F32)], {"s0": 4, "s1": 3}, [{"s0": 9, "s1": 5}]),
    "pad": (lambda x: aten.constant_pad_nd.default(x, [1, 2], 0.5),
            [(("s0", "s1"), F32)], {"s0": 3, "s1": 4}, [{"s0": 6, "s1": 2}]),
    "select_last": (lambda x: aten.select.int(x, 1, -1),
                    [(("s0", "s1"), F32)], {"s0": 3, "s1": 4}, [{"s0": 6, "s1": 2}]),
    "split": (lambda x: aten.mul.Tensor(aten.split.Tensor(x, 4, 1)[0], aten.split.Tensor(x, 4, 1)[1]),
              [(("s0", 8), F32)], {"s0": 3}, [{"s0": 7}]),
    "int_scalar_operand": (lambda x, n: aten.add.Tensor(aten.mul.Tensor(x, n), _sym(x, 0)),
                           [(("s0", 3), F32), ("int", "i0")], {"s0": 4, "i0": 3}, [{"s0": 7, "i0": 10}]),
    "pointwise_threads": (lambda x: aten.sigmoid.default(aten.mul.Tensor(x, x)),
                          [(("s0", 1024), F32)], {"s0": 128}, [{"s0": 3}, {"s0": 200}]),
    "column_sum_tiled": (lambda x: aten.sum.dim_IntList(aten.exp.default(x), [0]),
                         [(("s0", "s1"), F32)], {"s0": 30, "s1": 40}, [{"s0": 2, "s1": 17}, {"s0": 9, "s1": 100}]),
    "long_rows_threads": (lambda x: aten.amax.default(x, [1]),
                          [((2, "s0"), F32)], {"s0": 100_000}, [{"s0": 5}, {"s0": 70_001}]),
    "full_of_sizes": (lambda x: aten.add.Tensor(x, aten.full.default([_sym(x, 0), 1], 2.5, dtype=F32, device="cpu")),
                      [(("s0", "s1"), F32)], {"s0": 3, "s1": 4}, [{"s0": 8, "s1": 2}]),
    "cumsum": (lambda x: aten.cumsum.default(x, 1), [(("s0", "s1"), F32)], {"s0": 3, "s1": 4},
               [{"s0": 8, "s1": 2}]),
    "index_select": (lambda x, i: aten.index_select.default(x, 0, i),
                     [(("s0", 4), F32), (("s1",), I64)], {"s0": 10, "s1": 3}, [{"s0": 12, "s1": 7}]),
    "gather": (lambda x, i: aten.gather.default(x, 1, i),
               [((3, "s0"), F32), ((3, "s1"), I64)], {"s0": 10, "s1": 5}, [{"s0": 11, "s1": 2}]),
    "scatter_add": (lambda x, i, src: aten.scatter_add.default(x, 1, i, src),
                    [((3, "s0"), F32), ((3, "s1"), I64), ((3, "s1"), F32)], {"s0": 10, "s1": 5},
                    [{"s0": 12, "s1": 3}]),
    "adaptive_pool": (lambda x: aten._adaptive_avg_pool2d.default(x, [2, 2]),
                      [((1, 3, "s0", "s0"), F32)], {"s0": 6}, [{"s0": 7}, {"s0": 12}]),
    "sdpa_cpu": (lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, True)[0],
                 [((1, 2, "s0", 8), F32)] * 3, {"s0": 5}, [{"s0": 2}, {"s0": 37}]),
    "max_pool": (lambda x: aten.max_pool2d_with_indices.default(x, [2, 2], [2, 2])[0],
                 [(("s0", 3, "s1", "s1"), F32)], {"s0": 2, "s1": 8}, [{"s0": 3, "s1": 6}]),
    "topk_computed_k": (lambda x: aten.topk.default(x, operator.floordiv(_sym(x, 1), 2))[0],
                        [((3, "s0"), F32)], {"s0": 8}, [{"s0": 5}, {"s0": 21}]),
    "embedding": (lambda w, idx: aten.embedding.default(w, idx),
                  [((10, 4), F32), (("s0",), I64)], {"s0": 5}, [{"s0": 2}, {"s0": 33}]),
}


def _run_case(fn, specs, hints, runs, backend="cpp", kind="inference", fake=False, decompose=True):
    gm, table, c = compiled(fn, specs, hints, backend, kind, fake, decompose)
    src = c.source + "".join(c.kernel_sources)
    assert "s0" in c.source, f"not compiled symbolically:\n{src}"
    gen = torch.Generator().manual_seed(0)
    for sizes in [hints, *runs]:
        values = {s: sizes[s.name] for s in table.symbols}
        assert table.check(values), f"relations {table.relations} exclude {sizes}: a size was pinned"
        args = real_inputs(specs, sizes, gen)
        want = gm(*args)
        got = c(*args)[0]
        assert got.shape == want.shape and got.dtype == want.dtype, sizes
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m: f"{sizes}: {m}")
    return c


@pytest.mark.parametrize("backend", ["cpp", "python"])
@pytest.mark.parametrize("name", list(CASES))
def test_symbolic_graph_equals_eager_for_every_size(name, backend):
    _run_case(*CASES[name], backend=backend)


FAKE_CASES = ["pointwise", "broadcast_row", "softmax_symbolic_dim", "mm", "addmm_relu", "layer_norm",
              "view_by_sizes", "slice_computed", "arange_of_size", "causal_softmax", "embedding", "attention_causal",
              "conv2d_batch_and_spatial", "cat", "split_heads", "mean_last_symbolic", "adaptive_pool",
              "sdpa_cpu", "max_pool", "topk_computed_k",
              "conv_block_channels_last"]


@pytest.mark.parametrize("name", FAKE_CASES)
def test_fake_tensor_metadata(name):
    """The same graphs with every ``meta["val"]`` a fake tensor with ``SymInt`` sizes, as AOT autograd gives."""
    _run_case(*CASES[name], fake=True)


@pytest.mark.parametrize("name", ["pointwise", "mm", "view_by_sizes", "slice_int_input", "layer_norm", "topk_computed_k"])
def test_undecomposed_aten_graph(name):
    """compile_graph also takes the ATen graph itself (AOT autograd without decompositions): each op runs as
    its ATen call, with sizes computed from the bound symbols."""
    _run_case(*CASES[name], fake=True, decompose=False)


@pytest.mark.parametrize("name", ["layer_norm", "slice_int_input", "mm_chain_reuse"])
def test_backward_kind_binds_symbols_from_its_inputs(name):
    """A backward graph's wrapper takes its inputs as a list it empties (``steal``): symbols are bound first."""
    _run_case(*CASES[name], kind="backward")


def test_kernels_take_sizes_as_arguments():
    """The C++ kernels take each size symbol as an ``int64_t`` after the buffers; the wrapper binds it."""
    fn, specs, hints, _ = CASES["softmax_symbolic_dim"]
    c = compiled(fn, specs, hints)[2]
    ksrc = "".join(c.kernel_sources)
    assert "int64_t s0, int nthreads" in ksrc and "s0 = arg0.size(1)" in c.source


def test_symbolic_buffers_reuse_memory_of_equal_size():
    """Memory planning compares symbolic sizes by expression: the softmax reuses sin's dead buffer."""
    c = _run_case(*CASES["mm_chain_reuse"])
    assert "reuses" in c.source, c.source


@pytest.mark.parametrize("name, hints", [("softmax_symbolic_dim", ({"s0": 20}, {"s0": 23})),
                                         ("long_rows_threads", ({"s0": 100_000}, {"s0": 260_000}))])
def test_one_library_serves_every_size(name, hints):
    """The C++ source (the compile cache key) holds no hint nor anything computed from one (a thread chunk):
    compiling with other hints (same decisions) gives the same translation unit, and calls at new sizes
    compile nothing."""
    from ember.codegen import cpp_build
    fn, specs, _, _ = CASES[name]
    srcs = []
    for h in hints:
        c = compiled(fn, specs, h)[2]
        srcs.append("".join(c.kernel_sources))
    assert srcs[0] == srcs[1], "\n".join(srcs)
    builds = []
    real = cpp_build.CppCache.start
    try:
        cpp_build.CppCache.start = lambda self, *a, **k: builds.append(a) or real(self, *a, **k)
        for n in (3, 50, 7):
            c(torch.randn(specs[0][0][0], n))
    finally:
        cpp_build.CppCache.start = real
    assert builds == []


def test_symbol_solved_from_a_linear_size():
    """A size symbol only seen in a linear input size (``2*s0 + 1``) is solved from it by the wrapper."""
    table, mode = SymbolTable(), FakeMode()
    s0 = table.symint(table.new_symbol(3, "L['n']"))
    x = FakeTensor(torch.empty(s0 * 2 + 1, device="meta"), torch.device("cpu"), mode)
    gm = fx.symbolic_trace(lambda x: aten.cat.default([x, aten.exp.default(x)]))
    _annotate_fake(gm, [x], mode)
    prims = decompose_graph(gm)
    prims.meta["ember_symbols"] = table
    fn = compile_graph(prims, "inference", OPTS["cpp"])
    for n in (7, 11):
        y = torch.randn(n)
        out = fn(y)
        torch.testing.assert_close(out[0] if isinstance(out, (tuple, list)) else out, torch.cat([y, y.exp()]))


def test_unbindable_symbol_raises_symbolic_unsupported():
    """A size symbol the wrapper cannot read from any input (here only ``s0**2`` is an input's size) is not
    guessed: compile_graph raises SymbolicUnsupported with the reason (the caller compiles static)."""
    table, mode = SymbolTable(), FakeMode()
    s0 = table.symint(table.new_symbol(3, "L['n']"))
    x = FakeTensor(torch.empty(s0 * s0, device="meta"), torch.device("cpu"), mode)
    gm = fx.symbolic_trace(lambda x: aten.exp.default(x))
    _annotate_fake(gm, [x], mode)
    prims = decompose_graph(gm)
    prims.meta["ember_symbols"] = table
    with pytest.raises(SymbolicUnsupported, match="s0"):
        compile_graph(prims, "inference", OPTS["cpp"])


_X = sympy.Symbol("xindex", integer=True, nonnegative=True)
_S0, _S1 = (sympy.Symbol(n, integer=True, positive=True) for n in ("s0", "s1"))


@pytest.mark.parametrize("expr, folded", [
    (sympy.Mod(_X, _S1) + _S1 * sympy.floor(_X / _S1), _X),
    (3 * sympy.Mod(_X, _S0) + 3 * _S0 * sympy.floor(_X / _S0), 3 * _X),
    (8 * sympy.Mod(sympy.floor(_X / 8), _S1) + 8 * _S1 * sympy.floor(_X / (8 * _S1)) + sympy.Mod(_X, 8), _X),
    (sympy.Mod(_X, _S0 * _S1) + _S0 * _S1 * sympy.floor(_X / (_S0 * _S1)), _X),
])
def test_symbolic_divmod_folds(expr, folded):
    """A reshape that splits and merges dims of symbolic sizes leaves ``a % m + m * (a // m)``: folded back to
    ``a`` (the identity holds for every positive ``m``), so the kernel's load is contiguous again."""
    assert sympy.expand(fold_divmod(sympy.expand(expr)) - folded) == 0


def test_symbolic_head_split_and_merge_is_a_vector_copy():
    fn, specs, hints, _ = CASES["split_heads"]
    ksrc = "".join(compiled(fn, specs, hints)[2].kernel_sources)
    assert "ember_vload(p_arg0 + xindex)" in ksrc, ksrc


@pytest.mark.parametrize("name, hints", [("broadcast_row", {"s0": 64, "s1": 512}), ("pad", {"s0": 64, "s1": 300}),
                                         ("expand", {"s0": 256, "s1": 8})])
def test_symbolic_rows_run_row_by_row(name, hints):
    """A pointwise kernel whose rows have a symbolic length and whose loads take the row position from the
    flat index (``x % s1``: a broadcast row, a padded row) loops over rows, then along each row (``rindex``),
    where a vector loop can run; the values are right for other sizes too."""
    fn, specs, _, runs = CASES[name]
    c = _run_case(fn, specs, hints, runs)
    assert "// x=s" in "".join(c.kernel_sources) and " r=s" in "".join(c.kernel_sources), c.kernel_sources


@pytest.mark.parametrize("name", ["cat", "cat_dim1"])
def test_concatenation_bounds_are_not_divided(name):
    """The bound of a concatenation's part along the flat index is ``x < 3*s0``, not ``x / 3 < s0``: a compiler
    splits the loop at the first and vectorizes it (not the second: 9x slower at 150000 elements)."""
    fn, specs, hints, runs = CASES[name]
    ksrc = "".join(_run_case(fn, specs, hints, runs).kernel_sources)
    assert not re.search(r"/ \d+\) [<>]=? ", ksrc), ksrc
