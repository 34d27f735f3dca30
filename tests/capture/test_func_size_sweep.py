"""torch.func's forward-mode transforms (jacfwd, hessian = jacfwd(jacrev)) under changing sizes (issue 34
part 2): captured with symbolic sizes, one graph serves every size where nothing in the program fixes one.

Over a sweep of sizes, for ``dynamic=True`` and the default (automatic dynamic: static first, then symbolic):
values and gradients equal eager's, no graph break or fallback, and no more graphs than torch.compile with the
same option (which compiles one graph per size for all of these, or fails under ``dynamic=True``).

Two programs still take one graph per size, for a reason inside PyTorch: ``jacfwd(argnums=(0, 1))`` builds
its basis with ``diagonal(offset=-numel)``, whose offset is an ``int`` in ATen's schema (a guard on the
numel, torch.compile's too); ``prod``'s double backward calls C++ code that reads concrete sizes."""
from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch.func import hessian, jacfwd, jacrev

import ember

SIZES = (3, 5, 7, 9)
# name -> (program of (x [4, n], w [n]), graphs ember may compile for the sweep under dynamic=True)
PROGRAMS = {
    "jacfwd_matrix": (lambda x, w: jacfwd(lambda v: (x @ v).tanh())(w) * 3, 1),
    "jacfwd_softmax": (lambda x, w: jacfwd(lambda v: (x @ v).softmax(0))(w), 1),
    "jacfwd_of_jacrev": (lambda x, w: jacfwd(jacrev(lambda v: (x @ v).sin().sum()))(w), 1),
    "hessian_cube": (lambda x, w: hessian(lambda v: (v ** 3).sum())(w), 1),
    "hessian_mlp": (lambda x, w: hessian(lambda v: (x @ v).tanh().sum())(w) + x.sum(), 1),
    "jacfwd_two_argnums": (lambda x, w: jacfwd(lambda a, b: (a @ b).sin(), argnums=(0, 1))(x, w), len(SIZES)),
    "hessian_prod": (lambda x, w: hessian(lambda v: (v ** 3).sum() + v.prod())(w), len(SIZES)),
}


def _inputs(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, n, generator=g).requires_grad_(), torch.randn(n, generator=g).requires_grad_()


def _grads(fn, x, w):
    out = fn(x, w)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o * torch.linspace(0.5, 1.5, o.numel()).reshape(o.shape)).sum() for o in outs)
    return [o.detach() for o in outs], torch.autograd.grad(loss, (x, w), allow_unused=True)


def _torch_graphs(fn, dynamic) -> int:
    torch._dynamo.reset()
    n = [0]

    def counting(gm, example_inputs):
        n[0] += 1
        return gm.forward
    c = torch.compile(fn, backend=counting, dynamic=dynamic)
    try:
        for i, size in enumerate(SIZES):
            _grads(c, *_inputs(size, i))
    except Exception:       # noqa: BLE001 - torch.compile cannot compile it with this option: its default's count
        return _torch_graphs(fn, None) if dynamic else -1
    finally:
        torch._dynamo.reset()
    return n[0]


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_size_sweep_compiles_no_more_graphs_than_torch_compile(name, dynamic):
    fn, most = PROGRAMS[name]
    ember.reset()
    c = ember.compile(fn, dynamic=dynamic)
    for i, size in enumerate(SIZES):
        want = _grads(fn, *_inputs(size, i))
        got = _grads(c, *_inputs(size, i))
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    s = ember.stats()
    assert s["graph_breaks"] == 0 and s["fallbacks_to_eager"] == 0, s
    assert s["graphs_compiled"] <= _torch_graphs(fn, dynamic), s
    assert s["graphs_compiled"] <= (most if dynamic or most > 1 else 2), s     # automatic: static, then symbolic
