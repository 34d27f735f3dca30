"""Triton kernels over symbolic sizes (dynamic shapes): one generated kernel serves every size.

Loop IR graphs are built here directly with symbolic ranges (size symbols of an ``ember.shapes.SymbolTable``),
scheduled, generated once, and launched under Triton's interpreter (tests/codegen/conftest.py) with several
sizes (``kernel(*tensors, *sizes)``, the launcher API in ``ember.codegen.triton``), each compared with eager.
Sizes outside the class the kernel recorded in the table (``table.check``) are the guard's to reject.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import sympy
import torch

from ember.loopir.expr import Const, IndexValue, Load, Op, rvars, xvars
from ember.loopir.ir import BufferRef, InputBuffer, Layout, LoopGraph, Pointwise, Reduction
from ember.shapes import SymbolicUnsupported, SymbolTable

HAVE_TRITON = importlib.util.find_spec("triton") is not None
pytestmark = [
    pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed"),
    pytest.mark.skipif(HAVE_TRITON and torch.cuda.is_available(), reason="CUDA machine: Triton compiles there"),
]

CPU = torch.device("cpu")
F32 = torch.float32


def _table(hi: dict | None = None, **hints: int) -> tuple[SymbolTable, dict[str, sympy.Symbol]]:
    """Symbols with these hints; ``hi`` bounds some of them (``mark_dynamic(..., max=)``)."""
    t = SymbolTable()
    syms = {}
    for name, h in hints.items():
        syms[name] = t.new_symbol(h, f"L['{name}']", size=name[0] == "s", lo=2 if name[0] == "s" else None,
                                  hi=(hi or {}).get(name))
    assert list(syms) == [s.name for s in syms.values()], "name the symbols in creation order (s0, s1, i0)"
    return t, syms


def _ld(buf: str, lay: Layout, idx: tuple, mask=None) -> Load:
    return Load(buf, lay.index(idx), lay.dtype, mask)


def _contig(*shape) -> Layout:
    return Layout.contiguous(shape, F32, CPU)


def _kernels(graph: LoopGraph, table: SymbolTable) -> list:
    """(body, kernel) per kernel of ``graph``, each generated once."""
    from ember.codegen import triton as tb
    from ember.loopir.kernel import kernel_body
    from ember.loopir.schedule import Kernel, schedule
    from ember.shapes import using
    out = []
    with using(table):          # as compile_graph does: the scheduler's size decisions use the hints
        for step in schedule(graph).steps:
            if isinstance(step, Kernel):
                body = kernel_body(step, persistent=tb.persistent(step, None, symbols=table))
                out.append((body, tb.compile_kernel(body, None, symbols=table)))
    return out


def _launch(kernels: list, inputs: dict[str, torch.Tensor], outs: dict[str, tuple], sizes: dict[str, int]) -> dict:
    """Run every kernel on ``inputs`` with fresh output buffers (name -> (shape, stride)) at ``sizes``."""
    bufs = dict(inputs)
    for name, (shape, stride) in outs.items():
        bufs[name] = torch.empty_strided(shape, stride, dtype=F32).fill_(float("nan"))
    for body, k in kernels:
        k(*[bufs[b] for b in body.buffers], *[sizes[s] for s in k.symbols])
    return bufs


@dataclass
class Case:
    hints: dict[str, int]
    graph: Callable[[dict], tuple[LoopGraph, dict]]   # symbols -> (graph, {output: its symbolic layout})
    inputs: Callable[[dict], dict]                     # sizes -> input tensors
    eager: Callable[[dict], dict]                      # inputs -> expected outputs
    sizes: list[dict[str, int]]
    expect: tuple[str, ...] = ()                       # in the generated source


def _graph(inputs: list[InputBuffer], nodes: list, outs: list) -> tuple[LoopGraph, dict]:
    g = LoopGraph([*inputs, *nodes], [i.name for i in inputs], [BufferRef(n.name, n.layout) for n in outs])
    return g, {n.name: n.layout for n in outs}


def _pointwise_tail(s):
    (s0,) = s.values()
    lay = _contig(s0)
    x0, = xvars(1)
    body = Op("mul", (Op("sin", (_ld("x", lay, (x0,)),), F32), Const(2.0, F32)), F32)
    return _graph([InputBuffer("x", lay, 0)], [Pointwise("out", lay, ranges=(s0,), body=body)],
                  [Pointwise("out", lay, ranges=(s0,), body=body)])


def _broadcast(s):
    s0, s1 = s["s0"], s["s1"]
    xl, yl, zl = _contig(s0, s1), _contig(s1), _contig(s0, 1)
    x0, x1 = xvars(2)
    body = Op("add", (Op("mul", (_ld("x", xl, (x0, x1)), _ld("y", yl, (x1,))), F32), _ld("z", zl, (x0, 0))), F32)
    n = Pointwise("out", xl, ranges=(s0, s1), body=body)
    return _graph([InputBuffer("x", xl, 0), InputBuffer("y", yl, 1), InputBuffer("z", zl, 2)], [n], [n])


def _row_reduction(reduce_type: str, exp: bool = False):
    def build(s):
        s0, s1 = s["s0"], s["s1"]
        xl = _contig(s0, s1)
        x0, = xvars(1)
        r0, = rvars(1)
        v = _ld("x", xl, (x0, r0))
        n = Reduction("out", _contig(s0), ranges=(s0,), reduction_ranges=(s1,), reduce_type=reduce_type,
                      body=Op("exp", (v,), F32) if exp else v)
        return _graph([InputBuffer("x", xl, 0)], [n], [n])
    return build


def _static_row_symbolic_outer(s):
    (s0,) = s.values()
    xl = _contig(s0, 50)
    x0, = xvars(1)
    r0, = rvars(1)
    n = Reduction("out", _contig(s0), ranges=(s0,), reduction_ranges=(50,), reduce_type="amax",
                  body=_ld("x", xl, (x0, r0)))
    return _graph([InputBuffer("x", xl, 0)], [n], [n])


def _column_sum(s):
    """A reduction over the outer (strided) dim: sum over s0 of an [s0, s1] tensor, s1 outer."""
    s0, s1 = s["s0"], s["s1"]
    xl = _contig(s0, s1)
    x0, = xvars(1)
    r0, = rvars(1)
    n = Reduction("out", _contig(s1), ranges=(s1,), reduction_ranges=(s0,), reduce_type="sum",
                  body=_ld("x", xl, (r0, x0)))
    return _graph([InputBuffer("x", xl, 0)], [n], [n])


def _transposed(s):
    """out[i, j] = x[j, i] + x[j, 2*i] (x is [s1, 2*s0]: a transposed and a strided read)."""
    s0, s1 = s["s0"], s["s1"]
    xl = _contig(s1, 2 * s0)
    x0, x1 = xvars(2)
    body = Op("add", (_ld("x", xl, (x1, x0)), _ld("x", xl, (x1, 2 * x0))), F32)
    n = Pointwise("out", _contig(s0, s1), ranges=(s0, s1), body=body)
    return _graph([InputBuffer("x", xl, 0)], [n], [n])


def _causal(s):
    """Causal attention scores: p = softmax(where(j <= i, x, -inf)) over rows of [s0, s0], the masked values
    read through a masked load (and -inf outside the mask)."""
    (s0,) = s.values()
    xl = _contig(s0, s0)
    x0, x1 = xvars(2)
    r0, = rvars(1)
    keep = sympy.Le(r0, x0)
    masked = Op("where", (IndexValue(keep, torch.bool), _ld("x", xl, (x0, r0), mask=keep),
                          Const(float("-inf"), F32)), F32)
    mx = Reduction("mx", _contig(s0), ranges=(s0,), reduction_ranges=(s0,), reduce_type="amax", body=masked)
    keep2 = sympy.Le(x1, x0)
    e = Op("exp", (Op("sub", (Op("where", (IndexValue(keep2, torch.bool), _ld("x", xl, (x0, x1), mask=keep2),
                                             Const(float("-inf"), F32)), F32),
                              Load("mx", x0, F32)), F32),), F32)
    ex = Pointwise("ex", xl, ranges=(s0, s0), body=e)
    sm = Reduction("sm", _contig(s0), ranges=(s0,), reduction_ranges=(s0,), reduce_type="sum",
                   body=Load("ex", xl.index((x0, r0)), F32))
    p = Pointwise("p", xl, ranges=(s0, s0), body=Op("div", (Load("ex", xl.index((x0, x1)), F32),
                                                           Load("sm", x0, F32)), F32))
    return _graph([InputBuffer("x", xl, 0)], [mx, ex, sm, p], [p])


def _tril(s):
    """A masked load alone: out = tril(x) over a rectangle [s0, s1] (0 where the load's mask is false)."""
    s0, s1 = s["s0"], s["s1"]
    xl = _contig(s0, s1)
    x0, x1 = xvars(2)
    n = Pointwise("out", xl, ranges=(s0, s1), body=_ld("x", xl, (x0, x1), mask=sympy.Le(x1, x0)))
    return _graph([InputBuffer("x", xl, 0)], [n], [n])


def _int_offset(s):
    """out[j] = x[j] + (j + i0): a Python-int symbol in a computed value, next to a size symbol."""
    s0, i0 = s["s0"], s["i0"]
    lay = _contig(s0)
    x0, = xvars(1)
    body = Op("add", (_ld("x", lay, (x0,)), IndexValue(x0 + i0, F32)), F32)
    n = Pointwise("out", lay, ranges=(s0,), body=body)
    return _graph([InputBuffer("x", lay, 0)], [n], [n])


def _rn(*shape):
    return torch.randn(*shape)


def _x(shape: Callable[[dict], tuple]) -> Callable[[dict], dict]:
    return lambda z: {"x": _rn(*shape(z))}


def _causal_eager(i):
    x = i["x"]
    n = x.shape[0]
    return {"p": torch.softmax(x.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf")), -1)}


CASES: dict[str, Case] = {
    "pointwise_tail": Case({"s0": 37}, _pointwise_tail, _x(lambda z: (z["s0"],)),
                           lambda i: {"out": i["x"].sin() * 2}, [{"s0": n} for n in (37, 1000, 5, 1025, 2)]),
    "broadcast": Case({"s0": 7, "s1": 33}, _broadcast,
                      lambda z: {"x": _rn(z["s0"], z["s1"]), "y": _rn(z["s1"]), "z": _rn(z["s0"], 1)},
                      lambda i: {"out": i["x"] * i["y"] + i["z"]},
                      [{"s0": 7, "s1": 33}, {"s0": 3, "s1": 130}, {"s0": 65, "s1": 2}]),
    # a short row at the hint, but unbounded: looped, so rows longer than any block are summed whole
    "row_sum_unbounded_looped": Case({"s0": 9, "s1": 50}, _row_reduction("sum", exp=True), _x(lambda z: (z["s0"],
                                                                                                    z["s1"])),
                                     lambda i: {"out": i["x"].exp().sum(1)},
                                     [{"s0": 9, "s1": 50}, {"s0": 130, "s1": 64}, {"s0": 3, "s1": 2},
                                      {"s0": 2, "s1": 3000}],
                                     expect=("looped", "for roffset in range(0, s1, ")),
    "row_amax_looped": Case({"s0": 3, "s1": 5000}, _row_reduction("amax"), _x(lambda z: (z["s0"], z["s1"])),
                            lambda i: {"out": i["x"].amax(1)},
                            [{"s0": 3, "s1": 5000}, {"s0": 5, "s1": 3}, {"s0": 2, "s1": 9001}],
                            expect=("looped", "for roffset in range(0, s1, ")),
    "row_var_looped": Case({"s0": 2, "s1": 6000}, _row_reduction("welford"), _x(lambda z: (z["s0"], z["s1"])),
                           lambda i: {"out": i["x"].var(1, correction=0) * i["x"].shape[1]},
                           [{"s0": 2, "s1": 6000}, {"s0": 3, "s1": 7}, {"s0": 4, "s1": 2049}]),
    "row_var_short_rows": Case({"s0": 5, "s1": 40}, _row_reduction("welford"), _x(lambda z: (z["s0"], z["s1"])),
                               lambda i: {"out": i["x"].var(1, correction=0) * i["x"].shape[1]},
                               [{"s0": 5, "s1": 40}, {"s0": 70, "s1": 3}, {"s0": 2, "s1": 64}]),
    "static_row_symbolic_outer": Case({"s0": 33}, _static_row_symbolic_outer, _x(lambda z: (z["s0"], 50)),
                                      lambda i: {"out": i["x"].amax(1)},
                                      [{"s0": 33}, {"s0": 2}, {"s0": 300}], expect=("xmask = xindex < s0",)),
    "column_sum": Case({"s0": 40, "s1": 6}, _column_sum, _x(lambda z: (z["s0"], z["s1"])),
                       lambda i: {"out": i["x"].sum(0)},
                       [{"s0": 40, "s1": 6}, {"s0": 3, "s1": 100}, {"s0": 64, "s1": 2}]),
    "transposed_strided": Case({"s0": 6, "s1": 10}, _transposed, _x(lambda z: (z["s1"], 2 * z["s0"])),
                               lambda i: {"out": i["x"][:, :i["x"].shape[1] // 2].T + i["x"][:, ::2].T},
                               [{"s0": 6, "s1": 10}, {"s0": 17, "s1": 3}, {"s0": 2, "s1": 41}]),
    "causal_softmax": Case({"s0": 12}, _causal, _x(lambda z: (z["s0"], z["s0"])), _causal_eager,
                           [{"s0": 12}, {"s0": 5}, {"s0": 16}]),
    "tril_masked_load": Case({"s0": 9, "s1": 14}, _tril, _x(lambda z: (z["s0"], z["s1"])),
                             lambda i: {"out": i["x"].tril()},
                             [{"s0": 9, "s1": 14}, {"s0": 20, "s1": 3}, {"s0": 2, "s1": 2}]),
    "int_symbol": Case({"s0": 10, "i0": 7}, _int_offset, _x(lambda z: (z["s0"],)),
                       lambda i: {"out": i["x"] + torch.arange(i["x"].shape[0]) + i["i0"]},
                       [{"s0": 10, "i0": 7}, {"s0": 300, "i0": -4}, {"s0": 3, "i0": 0}, {"s0": 4, "i0": 1}]),
}


def _shape(lay: Layout, sizes: dict[str, int]) -> tuple[tuple, tuple]:
    subs = {sympy.Symbol(k, integer=True, positive=k[0] == "s") if k[0] == "s" else sympy.Symbol(k, integer=True):
            v for k, v in sizes.items()}

    def ev(e):
        return int(e.xreplace(subs)) if isinstance(e, sympy.Basic) else int(e)
    return tuple(ev(s) for s in lay.shape), tuple(ev(s) for s in lay.stride)


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_kernel_serves_every_size(name: str) -> None:
    case = CASES[name]
    table, syms = _table(**case.hints)
    graph, outs = case.graph(syms)
    kernels = _kernels(graph, table)
    sources = [k.source for _, k in kernels]
    for body, k in kernels:
        assert k.symbols and all(s in table.hints for s in [syms[n] for n in k.symbols]), k.source
        header = k.source.split("def ember_")[1].split(":")[0]
        assert header.endswith(", ".join(k.symbols) + ")"), header     # the sizes come after the pointers
    for needle in case.expect:
        assert any(needle in s for s in sources), (needle, sources)
    for sizes in case.sizes:
        values = {syms[n]: v for n, v in sizes.items()}
        assert table.check(values), (sizes, table.describe())
        inputs = case.inputs(sizes)
        got = _launch(kernels, inputs, {n: _shape(lay, sizes) for n, lay in outs.items()}, sizes)
        want = case.eager({**inputs, **sizes})
        for out, value in want.items():
            torch.testing.assert_close(got[out], value, rtol=1e-4, atol=1e-4, msg=lambda m: f"{sizes}: {m}")
    assert [k.source for _, k in kernels] == sources          # generated once: no source per size


def test_a_persistent_row_needs_a_bounded_row() -> None:
    """The persistent form holds a whole row: a symbolic row is persistent only where its range bounds it, with
    RBLOCK sized for the longest row allowed; an unbounded row is looped. Neither records a relation, so no
    size class splits the entry (a guard per doubling of the row)."""
    table, syms = _table(hi={"s1": 100}, s0=9, s1=50)
    graph, _ = _row_reduction("sum")(syms)
    ((_, k),) = _kernels(graph, table)
    assert "for roffset" not in k.source and "RBLOCK=128" in k.source, k.source
    s1 = syms["s1"]
    assert not any(isinstance(r.expr, sympy.Le) and r.expr.lhs == s1 and r.expr.rhs.is_Integer
                   for r in table.relations), table.describe()      # no RBLOCK class
    table, syms = _table(s0=9, s1=50)
    graph, _ = _row_reduction("sum")(syms)
    ((_, k),) = _kernels(graph, table)
    assert "for roffset" in k.source
    assert table.check({syms["s0"]: 9, syms["s1"]: 10 ** 5})


def test_a_looped_row_records_nothing_about_its_length() -> None:
    table, syms = _table(s0=3, s1=5000)
    graph, _ = _row_reduction("sum")(syms)
    ((_, k),) = _kernels(graph, table)
    assert "for roffset" in k.source
    assert table.check({syms["s0"]: 3, syms["s1"]: 2}) and table.check({syms["s0"]: 3, syms["s1"]: 10 ** 6})


@pytest.mark.parametrize("n0,int64", [(1000, False), (2 ** 20, False), (2 ** 31, True), (3 * 2 ** 30, True)])
def test_64_bit_indexing_only_where_the_hints_need_it(n0: int, int64: bool) -> None:
    """32-bit indices where the hinted sizes allow them, the class recorded (indices below 2**31: a size
    past it fails the guard); 64-bit where the hints need it, with nothing recorded (right for any size)."""
    from ember.codegen import triton as tb
    from ember.loopir.kernel import kernel_body
    from ember.loopir.schedule import Kernel, schedule
    table, syms = _table(s0=n0)
    graph, _ = _pointwise_tail(syms)
    (step,) = [s for s in schedule(graph).steps if isinstance(s, Kernel)]
    src = tb.source(kernel_body(step, persistent=True), symbols=table)
    assert ("tl.int64" in src) == int64, src
    s0 = syms["s0"]
    assert bool(table.relations) != int64, table.describe()
    assert table.check({s0: 2 ** 31 - 2}) == int64 and table.check({s0: 2 ** 30 - 1})


# (index over the flat point x and the row point r, extents, a size whose indices fit, the first that does not)
_QUOTIENT_INDICES = {
    # ResNet-50's global pooling of channels-last (s0, 2048, 7, 7) features: true top 100352*s0 - 1
    "pool_channels_last": (lambda x, r, s0, s1: 100352 * sympy.floor(x / 2048) + sympy.Mod(x, 2048) + 2048 * r,
                           lambda s0, s1: (2048 * s0, 49), 21399, 21400),
    # a transposed read of (64 * s0, 64): 64 * (x % 64) + x // 64; the flat extent bounds it (2 * 4096 * s0)
    "transpose_by_mod": (lambda x, r, s0, s1: 64 * sympy.Mod(x, 64) + sympy.floor(x / 64),
                         lambda s0, s1: (4096 * s0, 1), 262143, 262144),
    # a row of s1 points read by x // s1 and x % s1 (a symbolic divisor): bounded by the flat extent
    "symbolic_divisor": (lambda x, r, s0, s1: 3 * s1 * sympy.floor(x / s1) + sympy.Mod(x, s1),
                         lambda s0, s1: (s0 * s1, 1), 2 ** 19, 2 ** 20),
}


@pytest.mark.parametrize("name", sorted(_QUOTIENT_INDICES))
def test_int64_class_of_a_quotient_index_is_its_value_range(name: str) -> None:
    """The 32-bit class recorded for an index with ``x // c`` or ``x % c`` bounds the index's own values: a
    quotient is bounded by its dividend over the divisor and a remainder by the divisor (before, each by the
    dividend, so ResNet-50's pooling index at batch 11 passed 2**31 on paper and compiled a third graph)."""
    from ember.codegen.triton_sym import needs_int64
    from ember.loopir.indexing import RINDEX, XINDEX
    expr, extents, fits, too_big = _QUOTIENT_INDICES[name]
    table, syms = _table(s0=2, s1=8)
    s0, s1 = syms["s0"], syms["s1"]
    xn, rn = extents(s0, s1)
    assert not needs_int64([expr(XINDEX, RINDEX, s0, s1)], {XINDEX: xn, RINDEX: rn}, table)
    at = {"symbolic_divisor": lambda v: {s0: v, s1: 1024}}.get(name, lambda v: {s0: v, s1: 8})
    assert table.check(at(fits)), table.describe()
    assert not table.check(at(too_big)), table.describe()


def test_block_sizes_come_from_the_hints_and_the_source_holds_no_hint() -> None:
    """Two hints of one block class give one source (one cache entry, one Triton compile); a hint of another
    class picks other block sizes."""
    from ember.codegen import triton as tb
    from ember.loopir.kernel import kernel_body
    from ember.loopir.schedule import Kernel, schedule

    def src(h: int) -> str:
        table, syms = _table(s0=h)
        graph, _ = _pointwise_tail(syms)
        (step,) = [s for s in schedule(graph).steps if isinstance(s, Kernel)]
        return tb.source(kernel_body(step, persistent=True), symbols=table)
    assert src(37) == src(41) and "XBLOCK=64" in src(37) and str(37) not in src(37).split("@triton.jit")[1]
    assert "XBLOCK=1024" in src(5000)


def test_without_a_table_a_symbolic_kernel_is_unsupported() -> None:
    from ember.codegen import triton as tb
    from ember.loopir.kernel import kernel_body
    from ember.loopir.schedule import Kernel, schedule
    table, syms = _table(s0=9, s1=50)
    graph, _ = _row_reduction("sum")(syms)
    (step,) = [s for s in schedule(graph).steps if isinstance(s, Kernel)]
    with pytest.raises(SymbolicUnsupported, match="SymbolTable"):
        tb.persistent(step)
    with pytest.raises(SymbolicUnsupported, match="SymbolTable"):
        tb.compile_kernel(kernel_body(step, persistent=False))


def test_combo_kernel_of_symbolic_parts() -> None:
    """Independent pointwise kernels launched as one combo kernel: its program ranges and grid are
    expressions over the union of the parts' symbols."""
    from ember.codegen import triton as tb
    from ember.loopir.combo import Combo, ComboBody
    from ember.loopir.kernel import kernel_body
    from ember.loopir.schedule import Kernel, schedule
    table, syms = _table(s0=37, s1=5)
    s0, s1 = syms["s0"], syms["s1"]
    a, b = _contig(s0), _contig(s1, 3)
    x0, x1 = xvars(2)
    n1 = Pointwise("o1", a, ranges=(s0,), body=Op("exp", (_ld("x", a, (x0,)),), F32))
    n2 = Pointwise("o2", b, ranges=(s1, 3), body=Op("neg", (_ld("y", b, (x0, x1)),), F32))
    graph, _ = _graph([InputBuffer("x", a, 0), InputBuffer("y", b, 1)], [n1, n2], [n1, n2])
    steps = [s for s in schedule(graph).steps if isinstance(s, Kernel)]
    assert len(steps) == 2
    combo = Combo("combo0", 1, 1, [n for s in steps for n in s.nodes], [n for s in steps for n in s.stores],
                  [n for s in steps for n in s.reads], parts=steps)
    body = ComboBody(combo, [kernel_body(s, persistent=True) for s in steps])
    k = tb.compile_kernel(body, None, symbols=table)
    assert k.symbols == ("s0", "s1"), k.source
    for n, m in ((37, 5), (1500, 2), (2, 700)):
        x, y = _rn(n), _rn(m, 3)
        bufs = {"x": x, "y": y, "o1": torch.empty(n), "o2": torch.empty(m, 3)}
        k(*[bufs[name] for name in body.buffers], n, m)
        torch.testing.assert_close(bufs["o1"], x.exp())
        torch.testing.assert_close(bufs["o2"], -y)


def test_symbolic_matmuls_stay_aten_calls() -> None:
    """Matmul templates are for static shapes: a matmul over symbolic sizes is not eligible, so the ATen call
    (the extern) runs it, for any size."""
    from ember.codegen.triton_mm import eligible
    from ember.loopir.ir import Extern
    table, syms = _table(s0=64)
    s0 = syms["s0"]
    a, w = _contig(s0, 32), _contig(32, 16)
    e = Extern("mm0", _contig(s0, 16), target=torch.ops.aten.mm.default,
               args=(BufferRef("a", a), BufferRef("w", w)), op="mm")
    static = Extern("mm1", _contig(64, 16), target=torch.ops.aten.mm.default,
                    args=(BufferRef("a", _contig(64, 32)), BufferRef("w", w)), op="mm")
    assert eligible(static) and not eligible(e)


def test_every_autotune_candidate_serves_every_size() -> None:
    """max-autotune's candidates of a symbolic reduction (block sizes at the hints; the looped form of a
    persistent one, whose buffers come in another order) all take the sizes after the tensors."""
    from ember.codegen import triton as tb
    from ember.loopir.kernel import kernel_body
    from ember.loopir.schedule import Kernel, schedule
    from ember.shapes import using
    table, syms = _table(hi={"s1": 1024}, s0=3, s1=600)       # a bounded row: persistent and looped candidates
    graph, _ = _row_reduction("sum", exp=True)(syms)
    with using(table):
        (step,) = [s for s in schedule(graph).steps if isinstance(s, Kernel)]
    body = kernel_body(step, persistent=tb.persistent(step, None, symbols=table))
    cands = tb._candidates(body, table)
    labels = [lab for lab, _ in cands]
    assert labels[0].startswith("persistent") and any(lab.startswith("looped") for lab in labels), labels
    for n, m in ((3, 600), (2, 1024), (5, 7)):
        assert table.check({syms["s0"]: n, syms["s1"]: m}), table.describe()
        x = _rn(n, m)
        for label, k in cands:
            out = torch.full((n,), float("nan"))
            k(*[{"x": x, "out": out}[b] for b in body.buffers], n, m)
            torch.testing.assert_close(out, x.exp().sum(1), rtol=1e-4, atol=1e-4, msg=lambda e: f"{label}: {e}")
