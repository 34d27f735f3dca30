"""The wrapper's memory planning (``ember.codegen.wrapper.plan_reuse``): a kernel's output takes the memory of a
dead buffer of the same size instead of a new allocation, and never memory something still holds (a returned
tensor, a buffer stored into in place)."""
from __future__ import annotations

import re

import pytest
import torch

import ember

from .backends import CPU_BACKENDS


def chain(x, w):
    a = x.sin() @ w          # sin's buffer dies at the first matmul ...
    b = a.cos() @ w          # ... and cos's output takes its memory
    return (b.exp() @ w).relu()


def returned(x, w):
    s = x.sin()              # returned: its memory is never reused
    y = s @ w
    return s, (y.cos() @ w).tanh(), (y.exp() @ w).sigmoid()


def in_place(x, w):
    a = x.sin() @ w
    a.mul_(2)                # a new value stored into the matmul's result
    b = a.cos() @ w
    return b.exp() @ w + a


def stored_over(x, w):
    y = x.sin()
    z = y @ w
    u = y.cos() + z          # stored into y's memory (y dies here): that memory lives on as u
    v = (u @ w).exp()        # a new buffer of y's size: must not take it while u is alive
    return (v @ w) + u


CASES = {"chain": chain, "returned": returned, "in_place": in_place, "stored_over": stored_over}


def _source(fn, args, backend="python"):
    from ember.autograd.aot import aot_compile
    from ember.codegen import compile_graph
    built = []

    from ember.options import make_options
    opts = make_options(None, {"cpu_backend": backend})    # C++: kernels also store into dead inputs

    def hook(gr, kind):
        built.append(compile_graph(gr, kind, opts))
        return built[-1]
    aot_compile(torch.fx.symbolic_trace(fn), args, decompose=True, compile_graph=hook)
    return "\n".join(b.source for b in built)


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_values_and_gradients_equal_eager(case, cpu_backend):
    fn = CASES[case]
    g = torch.Generator().manual_seed(7)
    for n in (8, 24):
        args = [torch.randn(n, n, generator=g), torch.randn(n, n, generator=g) / n ** 0.5]
        args = [a.requires_grad_(True) for a in args]
        rargs = [a.detach().clone().requires_grad_(True) for a in args]
        ember.reset()
        out = ember.compile(fn, options={"cpu_backend": cpu_backend})(*args)
        ref = fn(*rargs)
        out, ref = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
        for o, r in zip(out, ref):
            torch.testing.assert_close(o, r, rtol=1e-4, atol=1e-4)
        cts = [torch.randn(r.shape, generator=g) for r in ref]
        got = torch.autograd.grad(sum((o * c).sum() for o, c in zip(out, cts)), args)
        want = torch.autograd.grad(sum((r * c).sum() for r, c in zip(ref, cts)), rargs)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_a_dead_buffer_of_the_same_size_is_reused():
    src = _source(chain, [torch.randn(8, 8), torch.randn(8, 8)])
    assert "reuses" in src, src
    assert src.count("empty_strided(") < 3, src


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("fn", [returned, in_place, stored_over], ids=lambda f: f.__name__)
def test_returned_and_aliased_memory_is_never_reused(fn, backend):
    for _ in range(1):
        src = _source(fn, [torch.randn(8, 8), torch.randn(8, 8)], backend)
        lines = src.splitlines()
        donors = {x.split("# reuses ")[1].split("'")[0] for x in lines if "reuses" in x}
        aliased = {x.split("=")[1].split()[0] for x in lines if "new value stored in place" in x}
        returned_names = {t for x in lines if x.strip().startswith("return")
                          for t in re.findall(r"buf\d+", x)}
        for d in donors:        # memory the wrapper allocated itself (or took over from an earlier buffer)
            assert any(ln.startswith((f"    {d} = empty_strided(", f"    {d} = as_strided(")) or
                       (ln.startswith(f"    {d} = buf") and "reuses" in ln) for ln in lines), (d, src)
        assert not donors & aliased and not donors & returned_names, (donors, src)
