"""Scatters in the loop IR (ember.loopir.scatter): scatter, scatter_add, index_put (with and without
accumulate, so ``x[i] = v`` and ``x[i] += v``) and the embedding's backward become ``Scatter`` nodes whose
kernels store or atomically add at loaded positions. Values and gradients equal eager on fresh inputs (with
repeated indices for the adds), no graph runs them as ATen calls, and the reference interpreter agrees."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.loopir import lower as lower_mod
from ember.loopir.interp import run_loop_graph
from ember.loopir.ir import Pointwise, Scatter

from .backends import CPU_BACKENDS


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _setitem(x: torch.Tensor, where: tuple, v: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[where] += v
    return y


def _distinct(n: int, k: int, cols: int, g: torch.Generator) -> torch.Tensor:
    return torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(cols)], 1)


def _setitem_add(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[i] += v            # index_put of (y[i] + v): repeated indices store one of their sums, so i is distinct
    return y


def _index_add(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return x.index_put((i,), v, accumulate=True).tanh()


CASES = {
    "scatter_add_dim1": (lambda x, i, s: torch.scatter_add(x, 1, i, s) * 2,
                         lambda g: (torch.randn(6, 40, generator=g), torch.randint(0, 40, (6, 55), generator=g),
                                    torch.randn(6, 55, generator=g))),
    "scatter_add_dim0_3d": (lambda x, i, s: torch.scatter_add(x, 0, i, s.exp()),
                            lambda g: (torch.randn(5, 4, 3, generator=g), torch.randint(0, 5, (7, 4, 2), generator=g),
                                       torch.randn(7, 4, 2, generator=g))),
    "scatter_src": (lambda x, i, s: torch.scatter(x, 0, i, s) + 1,
                    lambda g: (torch.randn(10, 6, generator=g), _distinct(10, 4, 6, g), torch.randn(4, 6, generator=g))),
    "scatter_value": (lambda x, i: torch.scatter(x, 1, i, 2.5).sin(),
                      lambda g: (torch.randn(6, 9, generator=g), torch.randint(0, 9, (6, 3), generator=g))),
    "index_put_accumulate": (_index_add,
                             lambda g: (torch.randn(20, 8, generator=g), torch.randint(-20, 20, (50,), generator=g),
                                        torch.randn(50, 8, generator=g))),
    "index_put_broadcast_value": (lambda x, i, v: x.index_put((i,), v, accumulate=True),
                                  lambda g: (torch.randn(12, 5, generator=g), torch.randint(0, 12, (30,), generator=g),
                                             torch.randn(5, generator=g))),
    "index_put_two_dims": (lambda x, i, j, v: x.index_put((i, j), v, accumulate=True) * 2,
                           lambda g: (torch.randn(7, 9, 3, generator=g), torch.randint(0, 7, (4, 5), generator=g),
                                      torch.randint(-9, 9, (5,), generator=g), torch.randn(4, 5, 3, generator=g))),
    "setitem_add": (_setitem_add,
                    lambda g: (torch.randn(15, 4, generator=g), torch.randperm(15, generator=g)[:6],
                               torch.randn(6, 4, generator=g))),
    "setitem_columns": (lambda x, i, v: _setitem(x, (slice(None), i), v),
                        lambda g: (torch.randn(4, 10, generator=g), torch.randperm(10, generator=g)[:3],
                                   torch.randn(4, 3, generator=g))),
    "setitem_split_dims": (lambda x, i, j, v: _setitem(x, (i, slice(None), j), v),
                           lambda g: (torch.randn(4, 5, 6, generator=g), torch.tensor([0, 1, 3]),
                                      torch.tensor([5, 2, 2]), torch.randn(3, 5, generator=g))),
    # repeated and negative positions; the value a scalar, then a 0-d tensor (its gradient sums the filled points)
    "index_fill_scalar": (lambda x, i: x.index_fill(1, i, -1.5) * x,
                          lambda g: (torch.randn(5, 8, 3, generator=g), torch.tensor([0, 3, 3, -1]))),
    "index_fill_tensor": (lambda x, i, v: x.index_fill(0, i, v).sin(),
                          lambda g: (torch.randn(9, 4, generator=g), torch.randint(0, 9, (5,), generator=g),
                                     torch.randn((), generator=g))),
    # sums and means: scatter-adds of the values (and of ones, the counts), into x or into x with the reached
    # positions zeroed (include_self=False); unreached positions keep x
    "scatter_reduce_sum": (lambda x, i, s: x.scatter_reduce(1, i, s, "sum", include_self=False) * 2,
                           lambda g: (torch.randn(4, 9, generator=g), torch.randint(0, 9, (4, 12), generator=g),
                                      torch.randn(4, 12, generator=g))),
    "scatter_reduce_mean": (lambda x, i, s: x.scatter_reduce(0, i, s, "mean").cos(),
                            lambda g: (torch.randn(6, 5, generator=g), torch.randint(0, 6, (9, 4), generator=g),
                                       torch.randn(9, 4, generator=g))),
    "scatter_reduce_mean_no_self": (lambda x, i, s: x.scatter_reduce(0, i, s, "mean", include_self=False),
                                    lambda g: (torch.randn(8, 3, generator=g), torch.randint(0, 5, (7, 3), generator=g),
                                               torch.randn(7, 3, generator=g))),
    "index_reduce_mean": (lambda x, i, s: x.index_reduce(1, i, s, "mean") * x,
                          lambda g: (torch.randn(3, 7, 2, generator=g), torch.randint(0, 7, (9,), generator=g),
                                     torch.randn(3, 9, 2, generator=g))),
    "index_reduce_mean_no_self": (lambda x, i, s: x.index_reduce(0, i, s, "mean", include_self=False),
                                  lambda g: (torch.randn(6, 4, generator=g), torch.tensor([0, 2, 2, 5]),
                                             torch.randn(4, 4, generator=g))),
    "embedding_padding_idx": (lambda w, i: F.embedding(i, w, padding_idx=1).sin(),
                              lambda g: (torch.randn(30, 16, generator=g), torch.randint(0, 30, (7, 9), generator=g))),
}


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_scatter_matches_eager(name, cpu_backend):
    fn, make = CASES[name]
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": cpu_backend})
    before = lower_mod.MISSING_LOWERINGS.copy()
    for seed in (0, 1):
        args = list(make(_g(seed)))
        diff = [a for a in args if a.is_floating_point()]
        for a in diff:
            a.requires_grad_(True)
        out, ref = f(*args), fn(*args)
        torch.testing.assert_close(out, ref)
        w = torch.randn(ref.shape, generator=_g(seed + 7))
        g1 = torch.autograd.grad((out * w).sum(), diff)
        g2 = torch.autograd.grad((ref * w).sum(), diff)
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a, b)
    externs = lower_mod.MISSING_LOWERINGS - before
    assert not externs, f"ran as ATen calls: {dict(externs)}"


def _loop_graph(fn, args):
    from ember.autograd.aot import aot_compile
    from ember.loopir.lower import lower
    graphs = []

    def compile_graph(gm, kind):
        graphs.append(lower(gm, kind))
        return gm
    aot_compile(torch.fx.symbolic_trace(fn), args, decompose=True, compile_graph=compile_graph)
    return graphs[0]


def test_scatter_node_prints_and_interprets():
    """The IR prints the scatter with its target, positions and add; the reference interpreter runs it."""
    x, i, s = torch.randn(4, 10), torch.randint(0, 10, (4, 12)), torch.randn(4, 12)
    graph = _loop_graph(lambda x, i, s: torch.scatter_add(x, 1, i, s), [x, i, s])
    nodes = [n for n in graph.nodes if isinstance(n, Scatter)]
    assert len(nodes) == 1 and nodes[0].accumulate
    target = graph.node(nodes[0].target)
    assert isinstance(target, Pointwise)
    text = graph.python()
    assert f"scatter({target.name}" in text and "+=" in text, text
    torch.testing.assert_close(run_loop_graph(graph, x, i, s)[0], torch.scatter_add(x, 1, i, s))


def test_bfloat16_adds_accumulate_in_float32():
    """16-bit floats add into a float32 target (atomic adds of bfloat16 round at every add), cast back once."""
    x = torch.randn(8, 4).bfloat16()
    i, v = torch.randint(0, 8, (64,)), torch.randn(64, 4).bfloat16()
    graph = _loop_graph(lambda x, i, v: x.index_put((i,), v, accumulate=True), [x, i, v])
    sc = next(n for n in graph.nodes if isinstance(n, Scatter))
    assert sc.dtype == torch.float32
    f = ember.compile(lambda x, i, v: x.index_put((i,), v, accumulate=True))
    exact = x.double().index_put((i,), v.double(), accumulate=True)
    assert (f(x, i, v).double() - exact).abs().max() <= (exact.abs().max() * 2 ** -8)


def test_masked_fill_by_setitem_is_pointwise():
    """``x[mask] = 0`` (one value, a boolean mask) is a ``where`` in the kernel that computes it, no scatter."""
    def fn(x):
        y = x * 2
        y[y > 0] = 0.5
        return y

    def traceable(x, v):
        y = x * 2
        return y.index_put((y > 0,), v)
    x, v = torch.randn(6, 7), torch.tensor(0.5)
    graph = _loop_graph(traceable, [x, v])
    assert not any(isinstance(n, Scatter) for n in graph.nodes)
    torch.testing.assert_close(ember.compile(fn)(x), fn(x))
    torch.testing.assert_close(ember.compile(traceable)(x, v), traceable(x, v))


def test_integer_adds_without_atomics_stay_aten_calls():
    """int16 has no atomic add in Triton or the C++ kernels: the index_put runs as its ATen call (and says so),
    the rest of the graph still compiles."""
    x, i, v = torch.randint(0, 9, (6, 3), dtype=torch.int16), torch.randint(0, 6, (10,)), \
        torch.randint(0, 9, (10, 3), dtype=torch.int16)
    before = lower_mod.MISSING_LOWERINGS["prims.index_put"]
    f = ember.compile(lambda x, i, v: x.index_put((i,), v, accumulate=True) * 2)
    assert torch.equal(f(x, i, v), x.index_put((i,), v, accumulate=True) * 2)
    assert lower_mod.MISSING_LOWERINGS["prims.index_put"] == before + 1


def _cpp_sources(fn, args):
    from ember import codegen
    from ember.autograd.aot import aot_compile
    from ember.options import CompileOptions
    built = []

    def compile_graph(gm, kind):
        out = codegen.compile_graph(gm, kind, CompileOptions(cpu_backend="cpp"))
        built.append(out)
        return out
    compiled = aot_compile(torch.fx.symbolic_trace(fn), args, decompose=True, compile_graph=compile_graph)
    return compiled, "\n".join(s for b in built for s in b.kernel_sources)


@pytest.mark.skipif("cpp" not in CPU_BACKENDS, reason="no C++ compiler")
def test_cpp_adds_are_atomic_across_threads_and_stores_run_in_order():
    """A large scatter-add runs on threads with an atomic add per point, outside ``simd`` lanes; a scatter of
    plain stores runs on one thread in order (a later point's store wins, as in eager's CPU kernel)."""
    n = 1 << 18
    x, i, v = torch.zeros(1000), torch.randint(0, 1000, (n,)), torch.randn(n)
    f, src = _cpp_sources(lambda x, i, v: x.index_put((i,), v, accumulate=True), [x, i, v])
    torch.testing.assert_close(f(x, i, v), x.index_put((i,), v, accumulate=True), rtol=1e-4, atol=1e-3)
    kernel = src[src.index("=scatter_add("):]
    kernel = kernel[:kernel.index("\n}\n")]
    assert "#pragma omp atomic" in kernel and "parallel for num_threads" in kernel and "simd" not in kernel, kernel

    # repeated positions: the last point's value wins (what eager's CPU kernel does when it runs in order;
    # torch documents the result as undefined, and two eager calls on one input may differ)
    j, v = torch.randint(0, 1000, (4000,)), torch.randn(4000)
    f, src = _cpp_sources(lambda x, j, v: x.index_put((j,), v), [x, j, v])
    kernel = src[src.index("=scatter("):]
    body = kernel[:kernel.index("\n}\n")]
    assert "omp parallel" not in body and "simd" not in body, body
    last = x.clone()
    for k in range(len(j)):
        last[j[k]] = v[k]
    assert torch.equal(f(x, j, v), last)


def _wrappers(fn, args, backend="python"):
    from ember import codegen
    from ember.autograd.aot import aot_compile
    from ember.options import CompileOptions
    built = []

    def compile_graph(gm, kind):
        out = codegen.compile_graph(gm, kind, CompileOptions(cpu_backend=backend))
        built.append(out)
        return out
    compiled = aot_compile(torch.fx.symbolic_trace(fn), args, decompose=True, compile_graph=compile_graph)
    return compiled, "\n".join(b.source for b in built)


class _KVCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(2, 64, 16))

    def forward(self, pos, new):
        self.k[:, pos] = new
        return self.k.sum(1)


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_scatter_into_a_mutated_input_writes_it_in_place(cpu_backend):
    """``cache[:, pos] = new`` on a module's buffer: the scatter writes the buffer itself (no copy of the
    cache before it, none back after it); values and the buffer equal eager's over several steps."""
    m, ref = _KVCache(), _KVCache()
    f = ember.compile(m, options={"cpu_backend": cpu_backend})
    for step in range(3):
        pos, new = torch.tensor([step, step + 10]), torch.randn(2, 2, 16)
        torch.testing.assert_close(f(pos, new), ref(pos, new))
        assert torch.equal(m.k, ref.k)

    def add_(x, i, v):
        x.index_add_(0, i, v)
        return x * 2
    x, i, v = torch.randn(10, 4), torch.randint(0, 10, (20,)), torch.randn(20, 4)
    compiled, src = _wrappers(add_, [x.clone(), i, v], cpu_backend)
    assert "=scatter_add(" in src and "new value stored in place" in src and "=copy" not in src, src
    x1, x2 = x.clone(), x.clone()
    out = compiled(x1, i, v)
    torch.testing.assert_close(out[0] if isinstance(out, (list, tuple)) else out, add_(x2, i, v))
    torch.testing.assert_close(x1, x2)


def test_scatter_keeps_its_copy_when_the_old_value_is_read_later():
    """The input's old value read after the scatter (``old + x``) keeps the copy: values equal eager."""
    def fn(x, i, v):
        old = x * 1
        x.index_put_((i,), v)
        return old + x
    x, i, v = torch.randn(10, 4), torch.randperm(10)[:4], torch.randn(4, 4)
    x1, x2 = x.clone(), x.clone()
    out = ember.compile(fn)(x1, i, v)
    torch.testing.assert_close(out, fn(x2, i, v))
    assert torch.equal(x1, x2)
