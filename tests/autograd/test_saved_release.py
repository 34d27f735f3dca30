"""After a backward that does not retain the graph, a compiled function's outputs are released when the caller
drops them, as eager's are: nothing ember keeps for the backward (saved tensors, the tensors whose versions it
checks) outlives the backward. The loss, alive across steps of a training loop, keeps its node alive; what that
node held must not keep the other outputs alive (a KV cache returned with the loss held CUDA graph pools and
made reduce-overhead re-record every step)."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch

import ember


def _attention_with_cache(x, w):
    k, v = x @ w, x @ w.t()             # returned as a "cache" and saved for the backward
    att = torch.softmax(x @ k.transpose(-2, -1), -1) @ v
    return att.square().mean(), (k, v)


def _saved_output(x, w):
    y = torch.tanh(x @ w)                # tanh saves its output: the returned y
    return y.sum(), y


def _two_losses(x, w):
    h = (x @ w).sigmoid()
    return h.mean() + h.square().mean(), h


CASES = {"kv_cache": _attention_with_cache, "saved_output": _saved_output, "two_losses": _two_losses}


def _storages(extra):
    flat = extra if isinstance(extra, tuple) else (extra,)
    return [weakref.ref(t) for t in flat], [t.untyped_storage()._weak_ref() for t in flat]


@pytest.mark.parametrize("retain", [False, True], ids=["once", "retain_graph"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("engine", ["eager", "ember"])
def test_outputs_released_after_backward(case, engine, retain):
    fn = CASES[case] if engine == "eager" else ember.compile(CASES[case])
    w = torch.randn(8, 8, requires_grad=True)
    for _ in range(2):
        loss, extra = fn(torch.randn(4, 8, 8), w)
        _, weak = _storages(extra)
        del extra
        loss.backward(retain_graph=retain)
        gc.collect()
        alive = [not torch.UntypedStorage._expired(s) for s in weak]
        # eager: released once the graph is freed; kept while it is retained (the saved tensors)
        if not retain:
            assert not any(alive), f"{engine}: outputs still alive after backward: {alive}"
        for s in weak:
            torch.UntypedStorage._free_weak_ref(s)
        del loss


@pytest.mark.parametrize("case", sorted(CASES))
def test_retained_graph_still_checks_versions(case):
    """A retained graph keeps what its second backward needs: an output modified in place between the two
    backwards is refused, as eager refuses it."""
    w = torch.randn(8, 8, requires_grad=True)
    errors = []
    for f in (CASES[case], ember.compile(CASES[case])):
        loss, extra = f(torch.randn(4, 8, 8), w)
        loss.backward(retain_graph=True)
        (extra[0] if isinstance(extra, tuple) else extra).detach().add_(1)
        try:
            loss.backward()
            errors.append(None)
        except RuntimeError as e:
            errors.append("modified by an inplace operation" in str(e))
    assert errors[1] == errors[0]


@pytest.mark.parametrize("retain", [False, True], ids=["once", "retain_graph"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_backward_raises_nothing_inside(case, retain, monkeypatch):
    """The backward of a graph with version checks finds out whether autograd kept the graph without reading
    the freed saved tensors (which raises a C++ error caught in Python: 30-45 us per training step), and its
    values and gradients equal eager's."""
    from ember.autograd.runtime import AotFunction
    raised = []
    getter = torch._C._FunctionBase.saved_tensors.__get__

    def saved_tensors(ctx):
        try:
            return getter(ctx)
        except RuntimeError:
            raised.append(True)
            raise
    monkeypatch.setattr(AotFunction._backward_cls, "saved_tensors", property(saved_tensors), raising=False)
    x, w = torch.randn(4, 8, 8), torch.randn(8, 8)
    grads = []
    for f in (CASES[case], ember.compile(CASES[case])):
        wi = w.clone().requires_grad_(True)
        loss, _ = f(x, wi)
        loss.backward(retain_graph=retain)
        grads.append((loss.detach(), wi.grad))
    assert not raised
    torch.testing.assert_close(grads[1], grads[0])


def test_forward_copies_saved_inputs_without_switching_grad_mode(monkeypatch):
    """A saved input eager does not save (a bias the compiled backward reads again, the cheapest value to save
    there) is copied on every call without entering ``torch.no_grad()`` (already off inside the autograd
    Function; the context manager cost 40 us a step, 3% of the quick suite's nanoGPT training step, whose
    position-embedding weight was copied so until the partitioner weighed copies: test_saved_input_copies);
    values and gradients equal eager's."""
    import ember.autograd.runtime as R

    class BiasSin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.b = torch.nn.Parameter(torch.randn(8))

        def forward(self, x):
            return (x.exp() + self.b).sin()
    model = BiasSin()
    inputs = type("Inputs", (), {"args": (torch.randn(3, 16, 8, requires_grad=True),), "target": None})
    w = type("Workload", (), {"loss": staticmethod(lambda out, target: out.square().mean())})
    compiled = ember.compile(lambda t, i: w.loss(model(i), t))
    compiled(inputs.target, *inputs.args)
    entered, real = [], torch.no_grad

    class counting(real):
        def __enter__(self):
            entered.append(True)
            return super().__enter__()
    copies = []
    keep = R._keep_aliased
    monkeypatch.setattr(R, "_keep_aliased", lambda *a: copies.append(True) or keep(*a))
    monkeypatch.setattr(torch, "no_grad", counting)
    loss = compiled(inputs.target, *inputs.args)
    monkeypatch.setattr(torch, "no_grad", real)
    assert copies and not entered
    got = torch.autograd.grad(loss, list(model.parameters()))
    want = torch.autograd.grad(w.loss(model(*inputs.args), inputs.target), list(model.parameters()))
    torch.testing.assert_close(loss, w.loss(model(*inputs.args), inputs.target))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
