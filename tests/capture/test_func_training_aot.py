"""Training through a graph that runs a torch.func grad transform (``grad``, ``vjp``, ``jacrev``) or
``torch.cond`` (whose backward is a ``torch.func.vjp`` of each branch): AOT autograd traces it, so the graph is
compiled, not run as captured with eager autograd. torch.func refuses to run under saved-tensors hooks, and the
AOT trace installs one to learn what eager saves; the transform's node sets the hooks aside for its own call.
Values and gradients equal eager's, and ``ember.stats()["eager_autograd_graphs"]`` stays 0."""
from __future__ import annotations

import pytest
import torch

import ember


def _grad(x, w):
    return torch.func.grad(lambda r: (r @ w).sin().sum())(x) * w.sum()


def _vjp(x, w):
    out, pull = torch.func.vjp(lambda r: (r @ w).tanh(), x)
    return pull(torch.ones_like(out))[0] + out


def _jacrev(x, w):
    return torch.func.jacrev(lambda r: (r @ w).sin())(x[0]).sum(0) * x.sum()


def _cond(x, w):
    return torch.cond(x.sum() > 0, lambda a, b: (a @ b).sin(), lambda a, b: (a @ b).cos(), (x, w))


def _cond_grad_in_branch(x, w):
    def hot(a, b):
        return torch.func.grad(lambda r: (r @ b).square().sum())(a)
    return torch.cond(x.mean() > 0, hot, lambda a, b: a @ b, (x, w)) * 2


def _cond_grad_in_branch_ref(x, w):
    """Eager's ``torch.cond`` (torch 2.13) returns a wrong value for this program when ``w`` requires grad (the
    branch's torch.func.grad is not what it computes); the reference is the same program with a Python ``if``."""
    if x.mean() > 0:
        return torch.func.grad(lambda r: (r @ w).square().sum())(x) * 2
    return x @ w * 2


def _vmap_grad(x, w):
    return torch.func.vmap(torch.func.grad(lambda r: (r @ w).sin().sum()))(x)


PROGRAMS = {"grad": _grad, "vjp": _vjp, "jacrev": _jacrev, "cond": _cond, "cond_grad_in_branch": _cond_grad_in_branch,
            "vmap_grad": _vmap_grad}
REFERENCES = {"cond_grad_in_branch": _cond_grad_in_branch_ref}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_training_through_func_transforms_is_compiled(name):
    fn = PROGRAMS[name]
    ember.reset()
    compiled = ember.compile(fn)
    for sign in (1.0, -1.0):                   # both branches of a cond
        x = torch.randn(3, 4).abs() * sign
        grads = []
        for f in (REFERENCES.get(name, fn), compiled):
            w = torch.randn(4, 4, generator=torch.Generator().manual_seed(0)).requires_grad_()
            y = f(x, w)
            y.square().sum().backward()
            grads.append((y.detach(), w.grad))
        for ref, got in zip(*grads):
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    s = ember.stats()
    assert s["eager_autograd_graphs"] == 0 and s["fallbacks_to_eager"] == 0, s
