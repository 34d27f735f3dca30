"""Graphs that change tensor metadata in place (t_, transpose_, unsqueeze_, resize_, as_strided_, ...) or make a
tensor require grad (requires_grad_) run as captured, so every backend matches eager: values, shapes and
strides of outputs and inputs, requires_grad, gradients. And under inference_mode, an output that views an input
keeps the input's requires_grad."""
from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ["eager", "aot_eager", "ember"]


def _fresh_leaf(x):
    y = x.clone().requires_grad_()
    return y * 2, y


def _detach_then_require(x):
    return x.detach().requires_grad_()


CASES = {
    "t_": (lambda x: x.t_() + 1, (2, 3)),
    "transpose_": (lambda x: (x.transpose_(0, 1), x * 1)[1], (2, 3)),
    "swapdims_": (lambda x: x.swapdims_(0, 1).sin(), (2, 3)),
    "unsqueeze_": (lambda x: x.unsqueeze_(0) + 1, (2, 3)),
    "squeeze_": (lambda x: x.squeeze_() + 1, (1, 3)),
    "resize_": (lambda x: x.resize_(6) + 1, (2, 3)),
    "as_strided_": (lambda x: x.as_strided_((3,), (2,)) + 1, (6,)),
    "requires_grad_": (_fresh_leaf, (3,)),
    "detach_requires_grad_": (_detach_then_require, (3,)),
}


def _check(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.stride() == w.stride() and g.requires_grad == w.requires_grad
        assert torch.allclose(g.detach(), w.detach())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_metadata_inplace_matches_eager(fresh_ember, backend, name):
    fn, shape = CASES[name]
    x = torch.randn(shape)
    xe, xc = x.clone(), x.clone()
    want = fn(xe)
    got = ember.compile(fn, backend=backend)(xc)
    _check(got, want)
    _check(xc, xe)                              # the input's new metadata and values


@pytest.mark.parametrize("backend", BACKENDS)
def test_leaf_made_inside_gets_gradients(fresh_ember, backend):
    x = torch.randn(4)
    out, leaf = ember.compile(_fresh_leaf, backend=backend)(x)
    out.sum().backward()
    assert torch.equal(leaf.grad, torch.full((4,), 2.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_mode_view_keeps_requires_grad(fresh_ember, backend):
    x = torch.randn(3, 2, requires_grad=True)
    f = ember.compile(lambda t: (t[0], t.detach()[1], t * 2), backend=backend)
    with torch.inference_mode():
        got, want = f(x), (x[0], x.detach()[1], x * 2)
    assert [g.requires_grad for g in got] == [w.requires_grad for w in want]
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def _set_first(v):
    v[0] = -1
    return v


def _set_row_slice(v):
    v[:, 1] = v[:, 0] * 2
    return v.sum()


def _mul_part(v):
    v[1:].mul_(3)
    return v * 1


OFFSET_CASES = {"set_first": (_set_first, lambda b: b[1:3]), "set_column": (_set_row_slice, lambda b: b.view(4, 5)[1:, 2:]),
                "mul_part": (_mul_part, lambda b: b[2:7])}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(OFFSET_CASES))
def test_write_through_view_of_input_with_storage_offset(fresh_ember, backend, name):
    """An input that is a slice of a larger tensor (a storage offset): writes through views of it land on its
    elements (ATen's as_strided_scatter counts offsets from the storage's start: the write landed early)."""
    fn, view = OFFSET_CASES[name]
    be, bc = torch.randn(20), None
    bc = be.clone()
    want = fn(view(be))
    cf = ember.compile(fn, backend=backend)
    got = cf(view(bc))
    assert torch.allclose(got, want) and torch.equal(bc, be)
    bc2, be2 = torch.randn(20), None
    be2 = bc2.clone()
    assert torch.allclose(cf(view(bc2)), fn(view(be2))) and torch.equal(bc2, be2)
