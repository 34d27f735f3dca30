"""A step run whole under ``torch.no_grad()`` (an optimizer's update of parameters that require grad) runs the
inference variant: no input's requires_grad can matter there, and the training variant (an autograd Function
over every input, cloning each mutated one it saves) cost more than eager's loop. Its write-backs and the views
it returns are made under no_grad, as eager makes them."""
from __future__ import annotations

import pytest
import torch

import ember
from ember.autograd import aot


def _adam(params, grads, ms, vs):
    with torch.no_grad():
        for p, g, m, v in zip(params, grads, ms, vs):
            m.mul_(0.9).add_(g, alpha=0.1)
            v.mul_(0.999).addcmul_(g, g, value=0.001)
            p.addcdiv_(m, v.sqrt().add_(1e-8), value=-1e-3)


def _views(p, g):
    with torch.no_grad():
        p.add_(g)
        q = p[:2]
        r = p * 2
    return p, q, r


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
def test_optimizer_step_over_parameters_runs_the_inference_variant(backend, monkeypatch):
    """The training variant could not be built for it (parameters updated in place), so the step ran as
    captured, with eager autograd: ember was slower than eager's loop (480 tensors on the CPU: 8.8 ms against
    8.5 ms; compiled now 2.0 ms)."""
    trained, hints = [], []
    real, real_log = aot.run_training, aot.logs.log
    monkeypatch.setattr(aot, "run_training", lambda *a: trained.append(1) or real(*a))
    monkeypatch.setattr(aot.logs, "log", lambda kind, msg, *a, **k: hints.append(msg) or real_log(kind, msg, *a, **k))
    gen = torch.Generator().manual_seed(0)
    mk = lambda: [torch.randn(7, 5, generator=gen) for _ in range(4)]      # noqa: E731
    params, grads, ms, vs = [p.requires_grad_() for p in mk()], mk(), mk(), [v.abs() for v in mk()]
    ref = [[t.detach().clone() for t in ts] for ts in (params, grads, ms, vs)]
    for r in ref[0]:
        r.requires_grad_()
    ember.reset()
    step = ember.compile(_adam, backend=backend)
    for _ in range(3):
        assert step(params, grads, ms, vs) is None
        _adam(*ref)
    for got, want in zip((params, ms, vs), (ref[0], ref[2], ref[3])):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
            assert a._version >= 3      # bumped by every call (eager bumps once per in-place op)
    assert all(p.requires_grad and p.is_leaf and p.grad_fn is None for p in params)
    assert torch.is_grad_enabled()
    assert not trained and not any("eager autograd" in h for h in hints), hints


def test_views_returned_from_a_no_grad_step_are_made_as_eager_makes_them():
    p, g = torch.randn(4, requires_grad=True), torch.randn(4)
    p2 = p.detach().clone().requires_grad_()
    ember.reset()
    got, want = ember.compile(_views, backend="aot_eager")(p, g), _views(p2, g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
        assert (a.requires_grad, a.grad_fn is None, a.is_leaf) == (b.requires_grad, b.grad_fn is None, b.is_leaf)
    assert got[0] is p and p._version == p2._version


def _foreach(xs, ys):
    torch._foreach_mul_(xs, 2.0)
    torch._foreach_add_(xs, ys)
    return torch._foreach_exp(xs)[0] + 1


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
def test_foreach_in_place_ops_write_every_tensor_of_their_list(backend):
    """Functionalization of a foreach op's in-place write: each tensor of the list gets its new value (it raised
    AttributeError on the list before)."""
    gen = torch.Generator().manual_seed(1)
    xs, ys = [torch.randn(5, generator=gen) for _ in range(3)], [torch.randn(5, generator=gen) for _ in range(3)]
    ref_xs = [x.clone() for x in xs]
    ember.reset()
    out = ember.compile(_foreach, backend=backend, fullgraph=True)(xs, ys)
    torch.testing.assert_close(out, _foreach(ref_xs, ys))
    for a, b in zip(xs, ref_xs):
        torch.testing.assert_close(a, b)
    assert ember.stats()["graphs_compiled"] == 1


@pytest.mark.parametrize("backend", ["eager", "ember"])
def test_foreach_adam_step_matches_eager(backend):
    """``torch.optim.Adam(foreach=True).step`` (CUDA's default): its foreach ops with CPU scalar tensors fail on the
    meta stand-ins the capture traces with; that is a graph break, not the program's error (it raised "Expected
    scalars to be on CPU, got meta instead" before)."""
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(8)) for _ in range(3)]
    ps2 = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    for p, q in zip(ps, ps2):
        p.grad = torch.randn(8)
        q.grad = p.grad.clone()
    opt, ref = torch.optim.Adam(ps, lr=1e-2, foreach=True), torch.optim.Adam(ps2, lr=1e-2, foreach=True)
    ember.reset()
    step = ember.compile(opt.step, backend=backend)
    for _ in range(3):
        step()
        ref.step()
    for a, b in zip(ps, ps2):
        torch.testing.assert_close(a, b)
