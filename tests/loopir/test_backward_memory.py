"""Memory of compiled training steps (backend "ember", C++ kernels):

- a compiled backward frees each saved activation after its last use, as eager's autograd does (it takes its
  arguments as a list it empties, and the autograd context drops its references first), instead of holding
  all of them to the end of the backward;
- a value stored once is not stored again for another user that wants the same memory image (a weight's
  bf16 cast saved for the backward and its transpose taken by the forward's matmul), while two outputs that
  eager returns as separate tensors still get separate memory.
"""
from __future__ import annotations

import weakref

import torch
from torch import nn

import ember
from ember.codegen import wrapper as wrapper_mod


def _wrappers(monkeypatch) -> list:
    made: list = []
    real = wrapper_mod.make_wrapper

    def make(*args, **kwargs):
        fn = real(*args, **kwargs)
        made.append(fn)
        return fn
    monkeypatch.setattr(wrapper_mod, "make_wrapper", make)
    return made


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(64, 64), nn.Tanh())])


def test_backward_frees_saved_activations_as_it_goes(monkeypatch):
    made = _wrappers(monkeypatch)
    model = _mlp()
    x = torch.randn(32, 64, requires_grad=True)
    compiled = ember.compile(model)
    compiled(x).sum().backward()          # compile
    bwd = next(f for f in made if f.__name__.startswith("backward"))
    assert hasattr(bwd, "call_list") and "args.clear()" in bwd.source and "del arg" in bwd.source
    keep = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    saved: list = []

    def pack(t):
        if t.untyped_storage().data_ptr() not in keep:
            saved.append(weakref.ref(t))
        return t
    alive: list[int] = []
    count = lambda: sum(r() is not None for r in saved)  # noqa: E731
    real_call = bwd.call_list
    bwd.call_list = lambda args: (alive.append(count()), real_call(args))[1]
    g = real_call.__globals__
    for name in [k for k in g if k.startswith("extern")]:
        real = g[name]
        g[name] = lambda *a, _real=real, **k: (alive.append(count()), _real(*a, **k))[1]
    for p in model.parameters():
        p.grad = None
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = compiled(x)
    out.sum().backward()
    assert len(saved) == 4 and len(alive) >= 4       # the four tanh outputs
    assert alive[0] == 4 and alive[-1] <= 1, alive  # they die during the backward, not after it
    grads = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    model(x).sum().backward()
    for got, p in zip(grads, model.parameters()):
        torch.testing.assert_close(got, p.grad)


def test_retained_graph_backward_twice():
    model = _mlp()
    x = torch.randn(8, 64, requires_grad=True)
    out = ember.compile(model)(x)
    out.sum().backward(retain_graph=True)
    first = x.grad.clone()
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * first)


def test_bf16_weight_cast_is_stored_once(monkeypatch):
    made = _wrappers(monkeypatch)
    torch.manual_seed(0)
    lin = nn.Linear(48, 80)
    x = torch.randn(16, 48, requires_grad=True)
    f = ember.compile(lambda t: lin(t).float().square().mean())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = f(x)
    loss.backward()
    fwd = next(fn for fn in made if fn.__name__.startswith("forward"))
    casts = [line for line in fwd.source.splitlines() if "kernel" in line and "to_dtype" in line and "# " in line]
    stores = sum(line.split("# ", 1)[1].count("to_dtype") for line in casts)
    assert stores == 3, fwd.source          # the input's, the weight's and the bias's cast, once each
    got = [x.grad.clone(), lin.weight.grad.clone()]
    x.grad = lin.weight.grad = lin.bias.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lin(x).float().square().mean().backward()
    torch.testing.assert_close(got[0], x.grad)
    torch.testing.assert_close(got[1], lin.weight.grad)


def test_equal_outputs_keep_separate_memory():
    def f(t):
        return t.float() * 2, t.float() * 2
    x = torch.randn(5, 7, dtype=torch.float64)
    a, b = ember.compile(f)(x)
    assert a.data_ptr() != b.data_ptr()
    a.add_(1)
    torch.testing.assert_close(b, x.float() * 2)
