"""Mutated inputs whose new value a kernel computes are stored in place (no copy back), and only when safe:
results, mutations and autograd version counters equal eager's."""
from __future__ import annotations

import pytest
import torch

import ember

from .backends import CPU_BACKENDS


def sgd_momentum(params, grads, bufs):
    with torch.no_grad():
        for p, g, b in zip(params, grads, bufs):
            b.mul_(0.9).add_(g)
            p.add_(b, alpha=-0.1)


def reads_old_value_later(x, y):
    old = x * 2          # computed before the update ...
    x.add_(y)
    return old.sum(1) + x[:, 0]   # ... and the update's result is also read at other points


def returns_old_and_new(x):
    old = x.clone()
    x.mul_(3)
    return old


CASES = {
    "sgd_momentum": (sgd_momentum, lambda g: ([torch.randn(5, 7, generator=g) for _ in range(3)],
                                              [torch.randn(5, 7, generator=g) for _ in range(3)],
                                              [torch.randn(5, 7, generator=g) for _ in range(3)])),
    "reads_old_value_later": (reads_old_value_later, lambda g: (torch.randn(6, 4, generator=g),
                                                                torch.randn(6, 4, generator=g))),
    "returns_old_and_new": (returns_old_and_new, lambda g: (torch.randn(8, generator=g),)),
}


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    return type(x)(_clone(v) for v in x)


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_mutated_inputs(name, cpu_backend):
    fn, make = CASES[name]
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": cpu_backend})
    for seed in (0, 1):
        args = make(torch.Generator().manual_seed(seed))
        a1, a2 = _clone(args), _clone(args)
        leaves1 = [t for t in torch.utils._pytree.tree_leaves(a1)]
        versions = [t._version for t in leaves1]
        out1, out2 = f(*a1), fn(*a2)
        torch.testing.assert_close(out1, out2)
        torch.testing.assert_close(a1, a2)
        leaves2 = torch.utils._pytree.tree_leaves(a2)
        for t1, t2, v in zip(leaves1, leaves2, versions):
            assert (t1._version > v) == (t2._version > 0), "a mutated input's version counter moves as in eager"


def test_optimizer_update_is_stored_in_place(monkeypatch):
    """The SGD update's kernels write the parameters directly: the graph returns the inputs themselves."""
    import ember.autograd.runtime as rt
    seen = []
    orig = rt.finish

    def spy(write_backs, aliases, args, outs):
        seen.extend(outs[j] is args[i] for i, j in write_backs)
        return orig(write_backs, aliases, args, outs)
    monkeypatch.setattr(rt, "finish", spy)
    ember.reset()
    f = ember.compile(sgd_momentum, options={"cpu_backend": "python"})
    f(*CASES["sgd_momentum"][1](torch.Generator().manual_seed(0)))
    assert seen and all(seen), seen
