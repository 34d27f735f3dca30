"""Chains of scatters (``out = out.index_add(0, idx_e, h_e)`` over the experts of a mixture of experts,
``x = x.index_put(...)`` in a loop): each scatter writes into the memory of the previous value where that value
dies at the copy the functional scatter makes of it (``inplace.scatter_into_dead_source``), so the chain
copies its buffer at most once (the first value: a zero fill) instead of once per step. Where the old value is
read later, returned, or a graph input, the copy stays. Values equal eager's on fresh inputs."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from .backends import CPU_BACKENDS
from .test_scatter import _wrappers

N, D, E = 24, 8, 4


def index_add_chain(x, idx, v):
    out = torch.zeros_like(x)
    for e in range(E):
        out = out.index_add(0, idx[e], v[e] * (e + 1))
    return out * 2


def index_put_accumulate_chain(x, idx, v):
    out = x * 3
    for e in range(E):
        out = out.index_put((idx[e],), v[e], accumulate=True)
    return out.sin()


def scatter_add_chain(x, idx, v):
    out = x.exp()
    for e in range(E):
        out = out.scatter_add(0, idx[e].unsqueeze(1).expand(-1, D), v[e])
    return out


def setitem_chain(x, idx, v):
    out = x + 1
    for e in range(E):
        out = out.index_put((idx[e][:3],), v[e][:3])
    return out


def old_value_read_later(x, idx, v):
    a = torch.zeros_like(x).index_add(0, idx[0], v[0])
    b = a.index_add(0, idx[1], v[1])
    return b + a                 # a is read after b's scatter: b needs a copy of it


def old_value_returned(x, idx, v):
    a = (x * 2).index_add(0, idx[0], v[0])
    return a, a.index_add(0, idx[1], v[1])


def chain_from_an_input(x, idx, v):
    return x.index_add(0, idx[0], v[0]).index_add(0, idx[1], v[1])   # x itself is never written


def sum_of_accumulations_into_zeros(x, idx, v):
    # the sum of scatters into zeros is one chain of scatters into the first term (``fold_zero_scatter_adds``)
    out = x.cos()
    for e in range(E):
        out = out + torch.zeros_like(x).index_put((idx[e],), v[e], accumulate=True)
    return out


def sum_with_a_plain_put_into_zeros(x, idx, v):
    # not an accumulation: zeros with v put at idx, plus x, is no put into x (never folded)
    return x.cos() + torch.zeros_like(x).index_put((idx[0],), v[0]) + \
        torch.zeros_like(x).index_put((idx[1],), v[1], accumulate=True)


def sum_broadcasting_an_accumulation(x, idx, v):
    # x[0] ([D]) broadcasts against the accumulation [N, D]: no put into x (never folded)
    return x[0].exp() + torch.zeros_like(x).index_put((idx[0],), v[0], accumulate=True)


def put_into_a_fused_value(x, idx, v):
    # y is made inside the kernel that also computes t and its sum, and stored nowhere but through its copy:
    # the put keeps that copy (fuzz seed 1017: the put wrote into a buffer no kernel had stored)
    y = x * torch.tanh(x)
    t = y * 0 + 1
    return t.sum(), y.index_put((idx[0][:2],), v[0][0, 0]), t


# name -> (program, most "=copy" kernels its wrapper may run)
CASES = {"index_add_chain": (index_add_chain, 1), "index_put_accumulate_chain": (index_put_accumulate_chain, 0),
         "scatter_add_chain": (scatter_add_chain, 0), "setitem_chain": (setitem_chain, 0),
         "old_value_read_later": (old_value_read_later, 2), "old_value_returned": (old_value_returned, 2),
         "chain_from_an_input": (chain_from_an_input, 1),
         "sum_of_accumulations_into_zeros": (sum_of_accumulations_into_zeros, 0),
         "sum_with_a_plain_put_into_zeros": (sum_with_a_plain_put_into_zeros, 2),
         "sum_broadcasting_an_accumulation": (sum_broadcasting_an_accumulation, 1),
         "put_into_a_fused_value": (put_into_a_fused_value, 1)}


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randperm(N, generator=g)[:N // 2] for _ in range(E)])
    idx[:, 1] = idx[:, 0]        # a repeated index per step: the adds accumulate
    return torch.randn(N, D, generator=g), idx, torch.randn(E, N // 2, D, generator=g)


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS + (["triton"] if importlib.util.find_spec("triton") else []))
@pytest.mark.parametrize("name", list(CASES))
def test_scatter_chain_copies_at_most_once_and_equals_eager(name, cpu_backend):
    fn, most = CASES[name]
    x, idx, v = _inputs(0)
    compiled, src = _wrappers(fn, [x, idx, v], cpu_backend)
    assert src.count("=copy") <= most, src
    for seed in (1, 2):
        x, idx, v = _inputs(seed)
        x0 = x.clone()
        got, want = compiled(x, idx, v), fn(x.clone(), idx, v)
        want = want if isinstance(want, tuple) else (want,)
        got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
        torch.testing.assert_close(got[:len(want)], want)
        assert torch.equal(x, x0)


def gathers_of_one_tensor(x, w, idx):
    # a mixture of experts' gathers x[tok_e]: the gradient of x is the sum of one scatter per expert
    return sum(((x[idx[e]] @ w[e]).tanh() * (e + 1)).sum() for e in range(E))


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_gradient_of_several_gathers_fills_one_zero_buffer(cpu_backend):
    """Training: the backward accumulates every gather's gradient into one zero-filled buffer (one fill, no
    per-gather buffer and no sum kernel over them); gradients equal eager's."""
    from ember import codegen
    from ember.autograd.aot import aot_compile
    from ember.options import CompileOptions
    built = []

    def compile_graph(gm, kind):
        out = codegen.compile_graph(gm, kind, CompileOptions(cpu_backend=cpu_backend))
        built.append((kind, out))
        return out
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(N, D, generator=g), torch.randn(E, D, D, generator=g)
    idx = torch.stack([torch.randperm(N, generator=g)[:N // 2] for _ in range(E)])
    compiled = aot_compile(torch.fx.symbolic_trace(gathers_of_one_tensor),
                           [x.requires_grad_(), w.requires_grad_(), idx], decompose=True,
                           compile_graph=compile_graph)
    want = torch.autograd.grad(gathers_of_one_tensor(x, w, idx), (x, w))
    out = compiled(x, w, idx)
    got = torch.autograd.grad(out[0] if isinstance(out, (tuple, list)) else out, (x, w))
    torch.testing.assert_close(got, want)
    bwd = "\n".join(b.source for kind, b in built if kind == "backward")
    assert bwd.count("=copy") <= 1 and "=add" not in bwd.replace("=add+", "=x+"), bwd
