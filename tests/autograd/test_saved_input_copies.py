"""Saved inputs that eager's autograd does not save. The compiled forward may save an input where eager saved
something else (the backward recomputes from it); the caller may then change that input in place before the
backward, where eager notices nothing, so the runtime saves a copy of it, on every call (``runtime._keep_aliased``:
nanoGPT's position-embedding weight, 27 us of each quick training step on the 2-core CPU). The partitioner now
weighs such an input as the copy it costs, so where a value the forward computes anyway costs as much (the
embedding rows themselves), that value is saved and nothing is copied. Where the input is the cheapest choice
it is still copied. Differential: values and gradients equal eager's, also when the caller changes the input in
place between the forward and the backward."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember
import ember.autograd.runtime as R

B, T, C, V = 3, 16, 8, 32


def pos_embedding(idx, wte, wpe):
    """nanoGPT's embeddings: token rows plus every row of the position table, a layer norm, a tied head."""
    x = F.embedding(idx, wte) + F.embedding(torch.arange(idx.shape[1]), wpe)
    return (F.layer_norm(x, (C,)) @ wte.t()).logsumexp(-1).sum()


def permuted_rows(idx, wte, w, perm):
    """Every row of a weight gathered in another order, added to saved activations, then a sine."""
    x = F.embedding(idx, wte) + w[perm]
    return ((x.sin() @ wte.t()).square()).sum()


def scaled_weight(idx, wte, w):
    """A weight scaled, added to saved activations, then tanh: the scaled weight is as large as the weight."""
    x = F.embedding(idx, wte) + w * 0.5
    return (torch.tanh(x) @ wte.t()).sum()


def cast_weight(idx, wte, w):
    """A double weight cast to float: saving the cast is cheaper than the double weight and its copy."""
    x = F.embedding(idx, wte) + w.float()
    return (torch.sigmoid(x) @ wte.t()).sum()


def bias_on_large_activation(x, b):
    """The bias is the cheapest value to save (the sum is batch times larger; exp's result is saved anyway):
    still copied."""
    return (x.exp() + b).sin().sum()


def _ids() -> torch.Tensor:
    return torch.randint(0, V, (B, T))


# (fn, inputs, the input the caller changes in place, whether the compiled forward still copies an input)
CASES = {
    "pos_embedding": (pos_embedding, lambda: (_ids(), torch.randn(V, C), torch.randn(T, C)), 2, False),
    "permuted_rows": (permuted_rows, lambda: (_ids(), torch.randn(V, C), torch.randn(T, C), torch.randperm(T)),
                      2, False),
    "scaled_weight": (scaled_weight, lambda: (_ids(), torch.randn(V, C), torch.randn(T, C)), 2, False),
    "cast_weight": (cast_weight, lambda: (_ids(), torch.randn(V, C), torch.randn(T, C, dtype=torch.float64)),
                    2, False),
    "bias_on_large_activation": (bias_on_large_activation, lambda: (torch.randn(B, T, C), torch.randn(C)), 1,
                                 True),
}


def _fresh(inputs: tuple) -> tuple:
    return tuple(t.clone().requires_grad_(t.is_floating_point()) for t in inputs)


def _step(fn, inputs, mutate: int | None):
    """Forward, then (optionally) the caller doubles input ``mutate`` in place, then the gradients."""
    loss = fn(*inputs)
    if mutate is not None:
        with torch.no_grad():
            inputs[mutate].mul_(2)
    wrt = [t for t in inputs if t.requires_grad]
    return loss.detach(), torch.autograd.grad(loss, wrt)


@pytest.fixture
def copies(monkeypatch):
    """The saved positions each compiled graph copies on every call (inputs eager did not save)."""
    found: list = []
    real = R._aliased_saved

    def spy(*a):
        out = real(*a)
        found.append([i for i, (is_out, eager) in out.items() if not is_out and not eager])
        return out
    monkeypatch.setattr(R, "_aliased_saved", spy)
    return found


@pytest.mark.parametrize("name", list(CASES))
def test_input_copied_only_where_it_is_the_cheapest_saved_value(name, copies):
    fn, make, _, copied = CASES[name]
    ember.reset()
    compiled = ember.compile(fn)
    for seed in (0, 1):
        torch.manual_seed(seed)
        inputs = make()
        got, want = _step(compiled, _fresh(inputs), None), _step(fn, _fresh(inputs), None)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert len(copies) == 1 and bool(copies[0]) == copied, copies


@pytest.mark.parametrize("name", list(CASES))
def test_input_changed_in_place_before_backward_like_eager(name):
    fn, make, mutate, _ = CASES[name]
    ember.reset()
    compiled = ember.compile(fn)
    for seed in (0, 1):
        torch.manual_seed(seed)
        inputs = make()
        got, want = _step(compiled, _fresh(inputs), mutate), _step(fn, _fresh(inputs), mutate)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


# -- inputs both eager and the compiled forward save: autograd's own version check covers them ----------------
# The runtime recorded every input eager saved and compared its version before the backward
# (``runtime.check_versions``), also those the compiled forward saves itself (or a view of), which autograd
# checks anyway: nanoGPT's 21 weights and biases cost 14 us a step to record. Now an input eager checks
# whenever the backward runs is left to autograd (saved for it where the compiled backward does not read it:
# a layer norm's bias); the error where the caller changes one in place before the backward is eager's, with
# and without saved-tensor hooks (under hooks autograd checks nothing, and every input is recorded again).
def linear(x, w, b):
    return F.linear(x, w, b).square().sum()


def transposed(x, w, b):
    return (x @ w.t() + b).tanh().sum()


def tied_head(idx, wte, b):
    return (F.embedding(idx, wte) @ wte.t() + b).logsumexp(-1).sum()


def layer_norm(x, w, b):
    """eager saves the bias (native_layer_norm's backward takes it); the compiled backward does not read it."""
    return (F.layer_norm(x, (C,), w, b) * x).sum()


def _linear_inputs():
    return torch.randn(B, T, C), torch.randn(V, C), torch.randn(V)


def _view_inputs():
    """The weight a view of a larger tensor: the caller changes that tensor."""
    big = torch.randn(V, 2 * C)
    return torch.randn(B, T, C), big, torch.randn(V)


# (fn, inputs, index of the input to change in place, whether eager raises)
SAVED = {
    "linear_weight": (linear, _linear_inputs, 1, True),
    "linear_input": (linear, _linear_inputs, 0, True),
    "linear_bias": (linear, _linear_inputs, 2, False),
    "transposed_weight": (transposed, _linear_inputs, 1, True),
    "weight_view_of_larger": (transposed, _view_inputs, 1, True),
    "layer_norm_bias": (layer_norm, lambda: (torch.randn(B, T, C), torch.randn(C), torch.randn(C)), 2, True),
    "layer_norm_weight": (layer_norm, lambda: (torch.randn(B, T, C), torch.randn(C), torch.randn(C)), 1, True),
    "tied_head_weight": (tied_head, lambda: (_ids(), torch.randn(V, C), torch.randn(V)), 1, True),
}


def _call(fn, name: str, leaves: tuple):
    if name == "weight_view_of_larger":     # the function gets the first C columns of a larger leaf
        x, big, b = leaves
        return fn(x, big[:, :C], b)
    return fn(*leaves)


def _saved_run(fn, name, inputs, mutate: int | None, hooks: bool):
    """(stage that raised or None, loss, gradients of the leaves), leaf ``mutate`` doubled in place between
    the forward and the backward."""
    leaves = _fresh(inputs)
    ctx = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t) if hooks else _nullcontext()
    with ctx:
        loss = _call(fn, name, leaves)
    if mutate is not None:
        with torch.no_grad():
            leaves[mutate].mul_(2)
    try:
        grads = torch.autograd.grad(loss, [t for t in leaves if t.requires_grad])
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e), e
        return "backward", None, None
    return None, loss.detach(), grads


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def recorded(monkeypatch):
    """Per call, the caller's tensors whose versions the runtime recorded for its own check."""
    found: list = []
    real = R._record_versions

    def spy(node, *a):
        real(node, *a)
        found.append([t for t, _, _ in node.versions])
    monkeypatch.setattr(R, "_record_versions", spy)
    return found


@pytest.mark.parametrize("name", list(SAVED))
def test_inputs_autograd_checks_are_not_recorded_again(name, recorded):
    fn, make, _, _ = SAVED[name]
    ember.reset()
    compiled = ember.compile(fn)
    for seed in (0, 1):
        torch.manual_seed(seed)
        inputs = make()
        got, want = _saved_run(compiled, name, inputs, None, False), _saved_run(fn, name, inputs, None, False)
        torch.testing.assert_close(got[1:], want[1:], rtol=1e-4, atol=1e-4)
    assert recorded == [], recorded


@pytest.mark.parametrize("hooks", [False, True], ids=["no_hooks", "saved_tensor_hooks"])
@pytest.mark.parametrize("name", list(SAVED))
def test_saved_input_changed_before_backward_raises_like_eager(name, hooks):
    fn, make, mutate, raises = SAVED[name]
    ember.reset()
    compiled = ember.compile(fn)
    for seed in (0, 1):
        torch.manual_seed(seed)
        inputs = make()
        want = _saved_run(fn, name, inputs, mutate, False)
        assert (want[0] == "backward") == raises, want
        got = _saved_run(compiled, name, inputs, mutate, hooks)
        # under hooks eager checks nothing and computes from the changed tensor; ember raises as without hooks
        assert got[0] == want[0], (got[0], want[0])
        if not raises:
            torch.testing.assert_close(got[1:], want[1:], rtol=1e-4, atol=1e-4)
