"""A matmul operand computed from its input read transposed is stored in the input's order with symbolic sizes
too (``lower._operand_layout``, issue 33): the graph compiled with ``dynamic=True`` gets the static graph's
layouts at the hinted sizes. Before, any symbolic size sent the operand to its traced (contiguous) layout: the
kernel computing it read its input across rows, and a dynamic graph differed from the static one.

For each program, inference or training: the layouts (at the hints) of every buffer the kernels compute
equal the static compile's, the dynamic graph compiles once for several sizes, and values (and gradients)
equal eager.
"""
from __future__ import annotations

from collections import Counter

import pytest
import sympy
import torch

import ember
from ember.loopir.ir import Pointwise


def bmm_of_transposed_cast(p, g):
    # BERT's value gradient P^T @ dO with the transposed operand made contiguous, and its mm counterpart
    pt = p.float().transpose(1, 2).contiguous().to(torch.bfloat16)
    return torch.bmm(pt, g), pt[0].t().contiguous().t() @ g[0]


def mm_of_transposed_scale(x, w):
    return (x.t() * 2 + 1) @ w


def weight_grad_input(x, w):
    # the normalized value is an mm argument read transposed (a weight gradient's input) in the backward too
    h = torch.nn.functional.layer_norm(x, x.shape[-1:])
    return (h.t() @ w).sum(0), h.sum()


def attention_probs(q, k, v):
    return (q @ k.transpose(-2, -1)).softmax(-1) @ v


def _bf16(*s):
    return torch.randn(*s).bfloat16()


# name -> (function, training, inputs for a size n)
PROGRAMS = {
    "bmm_of_transposed_cast": (bmm_of_transposed_cast, False,
                               lambda n: (torch.randn(3, n, 24), _bf16(3, n, 8))),
    "mm_of_transposed_scale": (mm_of_transposed_scale, False,
                               lambda n: (torch.randn(n, 20), torch.randn(n, 6))),
    "weight_grad_input": (weight_grad_input, True, lambda n: (torch.randn(n, 16), torch.randn(n, 5))),
    "attention_probs": (attention_probs, True,
                        lambda n: (torch.randn(2, n, 8), torch.randn(2, n, 8), torch.randn(2, n, 8))),
}
SIZES = (40, 33, 48)


def _at_hints(v, table):
    return table.hint(v) if table is not None and isinstance(v, sympy.Basic) else v


def _plans(monkeypatch) -> list:
    """Layouts (at the hints) of the buffers kernels compute, one Counter per graph lowered from now on."""
    from ember.loopir import lower as lower_mod
    seen: list = []
    real = lower_mod.Lowerer.run

    def run(self):
        g = real(self)
        seen.append(Counter((tuple(_at_hints(v, self.table) for v in n.layout.shape),
                             tuple(_at_hints(v, self.table) for v in n.layout.stride))
                            for n in g.nodes if isinstance(n, Pointwise)))
        return g
    monkeypatch.setattr(lower_mod.Lowerer, "run", run)
    return seen


def _call(fn, args, training):
    args = [a.detach().clone().requires_grad_(training and a.is_floating_point()) for a in args]
    out = fn(*args)
    if not training:
        return out, ()
    loss = sum(o.float().sum() * (i + 1) for i, o in enumerate(out if isinstance(out, tuple) else (out,)))
    return out, torch.autograd.grad(loss, args)


def _flat(out) -> list:
    return list(out) if isinstance(out, tuple) else [out]


def _close_as_eager(got, want, ref, scale):
    """``got`` equals eager's ``want`` as closely as float32 allows, or is at most 2x as far as eager from the
    float64 result ``ref`` (sums reordered: a layer-normalized value's total is a cancellation near 0)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    try:
        torch.testing.assert_close(got, want)
    except AssertionError:
        err, eager_err = (got.double() - ref).abs().max().item(), (want.double() - ref).abs().max().item()
        assert err <= 2 * eager_err + 1e-6 * scale, (err, eager_err, scale)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_dynamic_graph_gets_the_static_operand_layouts(name, monkeypatch):
    fn, training, inputs = PROGRAMS[name]
    seen = _plans(monkeypatch)
    plans = {}
    for dynamic in (False, True):
        seen.clear()
        ember.reset()
        c = ember.compile(fn, dynamic=dynamic)
        torch.manual_seed(0)
        args = inputs(SIZES[0])
        _call(c, args, training)
        plans[dynamic] = seen[:]
    assert plans[True] == plans[False]
    for n in SIZES[1:]:
        torch.manual_seed(n)
        args = inputs(n)
        (got, ggot), (want, gwant) = _call(c, args, training), _call(fn, args, training)
        got, want = _flat(got) + list(ggot), _flat(want) + list(gwant)
        if any(a.dtype != torch.float32 for a in args):         # no float64 reference for mixed dtypes
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w)
            continue
        (ref, gref) = _call(fn, [a.double() for a in args], training)
        ref = _flat(ref) + list(gref)
        # the scale of the terms summed: every output and gradient here is a total that cancels to ~0 (a layer-
        # normalized row sums to 0), so float32's error is relative to the inputs' magnitudes, not the result's
        scale = max([r.abs().max().item() for r in ref] + [a.abs().sum().item() for a in args])
        for g, w, r in zip(got, want, ref):
            _close_as_eager(g, w, r, scale)
    stats = ember.stats()
    assert stats["graphs_compiled"] == 1 and stats["symbolic_graphs"] == 1, stats
    assert stats["fallbacks_to_eager"] == 0, stats
