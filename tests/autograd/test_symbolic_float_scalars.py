"""Backward graphs whose ops take a float computed from symbolic sizes (``std``'s backward scales by
``2.0/(n - 1.0)``, a ``torch.SymFloat``): the AOT trace computes the float in the graph from the size nodes
(``symnodes.SymNodes.build_float``), and the loop IR computes it in the kernel from its size arguments
(``loopir.values._float_size``). Before, the float was pasted into the graph as text (``NameError: s0``) or the
graph compiled with static sizes. Each program, ``dynamic=True``, two calls at other sizes: values and
gradients equal eager, one graph with symbolic sizes."""
from __future__ import annotations

import pytest
import torch

import ember

PROGRAMS = {
    "std_all": lambda x: x.std(),
    "std_dim": lambda x: x.std(dim=1) * 2,
    "var_dim_keepdim": lambda x: (x - x.mean(0)) / (x.var(0, keepdim=True) + 1),
    "var_correction_0": lambda x: x.var(dim=0, correction=0).sin(),
    "std_mean": lambda x: torch.std_mean(x, dim=1)[0] + torch.std_mean(x, dim=1)[1],
    "var_correction_2": lambda x: torch.var(x, dim=1, correction=2),
    "normalize_rows": lambda x: (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-3),
}


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_float_of_symbolic_sizes_in_backward(name, backend):
    fn = PROGRAMS[name]
    ember.reset()
    c = ember.compile(fn, dynamic=True, backend=backend)
    for n, m in ((5, 7), (9, 4)):
        x = torch.randn(n, m, dtype=torch.float64, requires_grad=True)
        xc = x.detach().clone().requires_grad_()
        want, got = fn(x), c(xc)
        torch.testing.assert_close(got, want)
        g = torch.randn(want.shape, dtype=want.dtype)
        torch.testing.assert_close(torch.autograd.grad(got, xc, g)[0], torch.autograd.grad(want, x, g)[0])
    stats = ember.stats()
    assert stats["graphs_compiled"] == 1 and stats["symbolic_graphs"] == 1, stats
    assert stats["graph_breaks"] == 0 and stats["fallbacks_to_eager"] == 0, stats
