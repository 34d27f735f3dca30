"""The sum of a one-hot row (ember.loopir.lowerings._one_hot_sum): ``nll_loss``'s gradient is a one-hot row per
sample, which ``log_softmax``'s backward sums over the classes; the lowering computes that sum as the one
value, so cross-entropy's backward has no reduction over the classes. Compiled values and gradients equal
eager's, with ignored targets, class weights and label smoothing (which is not one-hot and keeps its sum)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.autograd.aot import aot_compile
from ember.codegen import compile_graph
from ember.loopir.ir import Reduction

CASES = {
    "plain": {},
    "ignore_index": {"ignore_index": 3},
    "weights": {"weight": "w"},
    "label_smoothing": {"label_smoothing": 0.1},
}


def _fn(kw):
    def f(h, w, y, cw):
        args = {k: (cw if v == "w" else v) for k, v in kw.items()}
        return F.cross_entropy(h @ w.t(), y, **args)
    return f


def _inputs(case):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(12, 16, generator=g, requires_grad=True)
    w = torch.randn(40, 16, generator=g, requires_grad=True)
    y = torch.randint(0, 40, (12,), generator=g)
    y[2] = 3
    y[5] = CASES[case].get("ignore_index", -100)      # an ignored sample
    return h, w, y, torch.rand(40, generator=g) + 0.5


@pytest.mark.parametrize("case", sorted(CASES))
def test_cross_entropy_values_and_grads(case):
    f = _fn(CASES[case])
    h, w, y, cw = _inputs(case)
    ember.reset()
    got = ember.compile(f)(h, w, y, cw)
    want = f(h, w, y, cw)
    torch.testing.assert_close(got, want)
    for a, b in zip(torch.autograd.grad(got, (h, w)), torch.autograd.grad(want, (h, w))):
        torch.testing.assert_close(a, b)


def _backward_reductions(case):
    graphs = []

    def hook(gr, kind):
        graphs.append((kind, gr))
        return compile_graph(gr, kind, None)
    h, w, y, cw = _inputs(case)
    fn = aot_compile(torch.fx.symbolic_trace(_fn(CASES[case])), [h, w, y, cw], decompose=True, compile_graph=hook)
    out = fn(h, w, y, cw)
    (out[0] if isinstance(out, (tuple, list)) else out).backward()
    from ember.loopir.lower import lower
    bwd = next(gr for kind, gr in graphs if kind == "backward")
    return [n for n in lower(bwd, "backward").nodes if isinstance(n, Reduction)]


@pytest.mark.parametrize("case", ["plain", "ignore_index", "weights"])
def test_one_hot_gradient_is_not_summed_over_the_classes(case):
    reds = _backward_reductions(case)
    assert not any(n.reduction_ranges == (40,) for n in reds), reds


def test_label_smoothing_keeps_its_sum():
    assert any(n.reduction_ranges == (40,) for n in _backward_reductions("label_smoothing"))
