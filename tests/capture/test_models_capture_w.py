"""What real models do inside ``forward`` that the trace must capture as eager runs it (issue 32, Wav2Vec2 of
transformers 5):

* a hook registered inside the trace (transformers installs its output-capturing hooks lazily, behind a flag,
  on the first call that asks for ``output_hidden_states``): the hook runs on later calls of that module in the
  same trace and on every call after it. ``register_*_hook`` counts its handles with a class attribute
  (``RemovableHandle.next_id += 1``), so the root is class attribute writes in a trace, tested on their own too;
* ``t.requires_grad = True`` / ``t.requires_grad_()`` on an intermediate (Wav2Vec2's feature encoder does it for
  gradient checkpointing): the tensors after it require grad, and gradients reach the parameters as in eager.

Each case runs the compiled program and eager on fresh copies for several calls and compares outputs (values
and ``requires_grad``), gradients, the hooks left on the modules and the class attributes; cases marked
``captured`` must also compile to one graph with no break (they broke the graph before).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn as nn

import ember
from tests.capture.harness import assert_same


# -- hooks registered inside forward ----------------------------------------------------------------------
class LazyHooked(nn.Module):
    """transformers 5's pattern: install a hook on first use, behind an attribute flag, and collect outputs."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        if not getattr(self, "_hooked", False):
            if self.kind == "post":
                self.a.register_forward_hook(lambda m, i, o: o * 2)
            elif self.kind == "pre":
                self.a.register_forward_pre_hook(lambda m, i: (i[0] + 1,))
            elif self.kind == "kwargs":
                self.a.register_forward_hook(lambda m, a, k, o: o - 1, with_kwargs=True)
            self._hooked = True
        return self.b(self.a(x)) + self.a(x)


COLLECT: dict[str, Any] = {"out": None}


class Collecting(nn.Module):
    """A closure hook made in the trace that appends each layer's output to a list held in a global."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        if not getattr(self, "_hooked", False):
            for layer in self.layers:
                def hook(m, args, out):
                    if COLLECT["out"] is not None:
                        COLLECT["out"].append(out)
                layer.register_forward_hook(hook)
            self._hooked = True
        COLLECT["out"] = []
        for layer in self.layers:
            x = layer(x).relu()
        found, COLLECT["out"] = COLLECT["out"], None
        return x, tuple(found)


class EveryCall(nn.Module):
    """Registers one more hook on every call: the output grows with the number of calls, as in eager."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        self.a.register_forward_hook(lambda m, i, o: o + 1)
        return self.a(x)


class RemovedAgain(nn.Module):
    """A hook registered and removed within one call runs only in between."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a.register_forward_hook(lambda m, i, o: o * 3)
        y = self.a(x)
        h.remove()
        return y + self.a(x)


# -- class attribute writes ---------------------------------------------------------------------------------
class Counter:
    n = 0
    tag = "start"


class SubCounter(Counter):
    pass


class Handle:
    count = 0

    def __init__(self):
        self.id = Handle.count
        Handle.count += 1


def counter_add(x):
    Counter.n += 1
    return x + Counter.n


def counter_sub_read(x):
    Counter.n = Counter.n + 2
    Counter.tag = "written"
    return x * SubCounter.n, SubCounter.tag


def counter_instance_ids(x):
    a, b = Handle(), Handle()
    return x + a.id * 10 + b.id, b.count


# -- requires_grad on intermediates --------------------------------------------------------------------------
class FeatureEncoder(nn.Module):
    """Wav2Vec2's feature encoder: ``hidden_states.requires_grad = True`` on a view of the input in training."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.conv = nn.Conv1d(1, 4, 3)
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        h = x[:, None]
        if self.training:
            if self.how == "attr":
                h.requires_grad = True
            else:
                h.requires_grad_()
        h = self.conv(h).transpose(1, 2)
        return self.lin(h).sum(1), h.requires_grad


def leaf_from_intermediate(x):
    h = (x * 2).sin()
    h.requires_grad = True
    y = h.exp() * 3
    return y, h.requires_grad, h.is_leaf, y.requires_grad


def leaf_flag_twice(x):
    h = x.detach() * 2   # a leaf: set, set again (no change), unset and set once more
    h.requires_grad = True
    h.requires_grad = True
    a = h.cos()
    h.requires_grad_(False)
    b = h.sin()
    h.requires_grad_(True)
    return a, b, h.tan(), h.is_leaf


def nonleaf_set_true(x):
    h = x * 2
    h.requires_grad = True       # eager: RuntimeError (only leaves may change the flag)
    return h


def nonleaf_set_false(x):
    h = x * 2
    h.requires_grad = False
    return h


@dataclass
class Case:
    name: str
    make: Callable[[], Any]          # a module or a function (functions are shared, modules are copied)
    x_grad: bool = False             # the input requires grad
    train: bool = False
    calls: int = 3
    captured: bool = True            # one graph, no break
    state: Callable[[Any], Any] | None = None   # what else must match after the calls


def _hook_counts(m):
    return [(len(s._forward_hooks), len(s._forward_pre_hooks)) for s in m.modules()]


def _counter_state(_):
    return (Counter.n, Counter.tag, Handle.count)


CASES = [
    Case("hook_post", lambda: LazyHooked("post"), state=_hook_counts),
    Case("hook_pre", lambda: LazyHooked("pre"), state=_hook_counts),
    Case("hook_kwargs", lambda: LazyHooked("kwargs"), state=_hook_counts),
    Case("hook_post_train", lambda: LazyHooked("post"), x_grad=True, train=True, state=_hook_counts),
    Case("hook_collect", Collecting, state=_hook_counts),
    Case("hook_every_call", EveryCall, state=_hook_counts),
    Case("hook_removed", RemovedAgain, state=_hook_counts),
    Case("class_counter", lambda: counter_add, state=_counter_state),
    Case("class_sub_read", lambda: counter_sub_read, state=_counter_state),
    Case("class_instance_ids", lambda: counter_instance_ids, state=_counter_state),
    Case("rg_attr_train", lambda: FeatureEncoder("attr"), train=True),
    Case("rg_method_train", lambda: FeatureEncoder("method"), train=True),
    Case("rg_attr_eval", lambda: FeatureEncoder("attr")),
    Case("rg_leaf_intermediate", lambda: leaf_from_intermediate),
    Case("rg_leaf_twice", lambda: leaf_flag_twice, x_grad=True),
]


def _fresh_counters():
    Counter.n, Counter.tag, Handle.count = 0, "start", 0


def _run_side(prog, xs, train):
    """Outputs, gradients of the parameters and of the input, over all calls."""
    outs, grads = [], []
    for x in xs:
        out = prog(x)
        outs.append(out)
        ts = [t for t in (out if isinstance(out, tuple) else (out,)) if isinstance(t, torch.Tensor)]
        if train and ts[0].requires_grad:
            params = [p for p in getattr(prog, "parameters", lambda: [])()]
            leaves = params + ([x] if x.requires_grad else [])
            grads.append(torch.autograd.grad(ts[0].sum(), leaves, allow_unused=True))
    return outs, grads


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_models_capture(case: Case, fresh_ember):
    torch.manual_seed(0)
    proto = case.make()
    xs = [torch.randn(2, 4 if not isinstance(proto, FeatureEncoder) else 6).requires_grad_(case.x_grad)
          for _ in range(case.calls)]
    is_mod = isinstance(proto, nn.Module)
    eager = copy.deepcopy(proto) if is_mod else proto
    mine = copy.deepcopy(proto) if is_mod else proto
    if is_mod:
        eager.train(case.train)
        mine.train(case.train)
    _fresh_counters()
    ref, ref_grads = _run_side(eager, [x.detach().requires_grad_(case.x_grad) for x in xs], case.train)
    ref_state = case.state(eager) if case.state else None
    _fresh_counters()
    compiled = ember.compile(mine, backend="eager")
    got, got_grads = _run_side(compiled, [x.detach().requires_grad_(case.x_grad) for x in xs], case.train)
    for i, (a, b) in enumerate(zip(got, ref)):
        assert_same(a, b, path=f"call {i}")
    for i, (a, b) in enumerate(zip(got_grads, ref_grads)):
        assert_same(list(a), list(b), path=f"grads of call {i}")
    if case.state:
        assert case.state(mine) == ref_state
    if case.captured:
        fresh = copy.deepcopy(proto) if is_mod else proto
        if is_mod:
            fresh.train(case.train)
        _fresh_counters()
        ex = ember.explain(fresh)(xs[0].detach().requires_grad_(case.x_grad))
        assert ex.graph_break_count == 0, str(ex)
        assert ex.graph_count == 1, str(ex)


@pytest.mark.parametrize("prog", [nonleaf_set_true, nonleaf_set_false], ids=lambda p: p.__name__)
def test_nonleaf_requires_grad_raises_as_eager(prog, fresh_ember):
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError) as eager_err:
        prog(x)
    with pytest.raises(RuntimeError) as mine:
        ember.compile(prog, backend="eager")(x)
    assert str(mine.value).split("\n")[0] == str(eager_err.value).split("\n")[0]


def test_class_write_of_a_function_breaks_with_reason(fresh_ember):
    """Replacing a method on a class inside the trace is not captured: a graph break that says so."""
    class K:
        def f(self):
            return 1

    def prog(x):
        K.f = lambda self: 2
        return x + K().f()

    with pytest.raises(ember.Unsupported, match="plain data attributes"):
        ember.compile(prog, backend="eager", fullgraph=True)(torch.randn(2))


AOT_CASES = [("encoder_attr", lambda: FeatureEncoder("attr"), False, True),
             ("encoder_method", lambda: FeatureEncoder("method"), False, True),
             ("leaf_intermediate", lambda: leaf_from_intermediate, False, False),
             ("leaf_twice", lambda: leaf_flag_twice, False, False),
             ("leaf_twice_x_grad", lambda: leaf_flag_twice, True, False)]


@pytest.mark.parametrize("name,make,x_grad,kernels", AOT_CASES, ids=[c[0] for c in AOT_CASES])
def test_requires_grad_under_aot(name, make, x_grad, kernels, fresh_ember):
    """Through AOT autograd: same values, ``requires_grad`` and parameter gradients as eager. A training graph
    whose leaf only feeds outputs that also depend on the parameters is compiled (``kernels``); one whose
    outputs require grad only through the leaf (no parameter, or an input autograd does not reach) runs with
    eager autograd, as it must to give them a grad_fn."""
    torch.manual_seed(0)
    proto = make()
    x = torch.randn(2, 6 if isinstance(proto, FeatureEncoder) else 4)
    is_mod = isinstance(proto, nn.Module)
    eager, mine = (copy.deepcopy(proto), copy.deepcopy(proto)) if is_mod else (proto, proto)
    ref = eager(x.clone().requires_grad_(x_grad))
    got = ember.compile(mine, backend="aot_eager")(x.clone().requires_grad_(x_grad))
    assert_same(got, ref)
    if is_mod:
        g_ref = torch.autograd.grad(ref[0].sum(), list(eager.parameters()))
        g_got = torch.autograd.grad(got[0].sum(), list(mine.parameters()))
        assert_same(list(g_got), list(g_ref))
    if kernels:
        assert ember.stats()["eager_autograd_graphs"] == 0


# -- NumPy functions on plain numbers (Reformer: ``key_vectors / np.sqrt(self.attention_head_size)``) -------
class ScaledByNumpy(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_size = 16
        self.shape = (2, 3)

    def forward(self, x):
        return x / np.sqrt(self.head_size) + np.prod(self.shape) * np.log2(8.0)


NUMPY_CASES = [
    ("ufunc_sqrt_of_attr", lambda: ScaledByNumpy()),
    ("ufunc_of_arg", lambda: (lambda x, n=9: x * np.sqrt(n) + np.maximum(n, 2))),
    ("array_functions", lambda: (lambda x: x + float(np.prod([2, 3])) + np.ceil(2.5) + np.round(1.26, 1))),
    ("numpy_scalars", lambda: (lambda x: x * np.float32(0.5) + np.exp(np.float64(1.0)) + np.abs(-3))),
]


@pytest.mark.parametrize("name,make", NUMPY_CASES, ids=[c[0] for c in NUMPY_CASES])
def test_numpy_on_constants_is_captured(name, make, fresh_ember):
    prog = make()
    x = torch.randn(3)
    assert_same(ember.compile(prog, backend="eager")(x.clone()), prog(x.clone()))
    ex = ember.explain(prog)(x)
    assert ex.graph_break_count == 0 and ex.graph_count == 1, str(ex)


def test_numpy_array_results_are_not_constants(fresh_ember):
    """``np.arange(3)`` is an array (mutable): not folded into the trace; a graph break, eager's values."""
    def prog(x):
        a = np.arange(3)
        a[0] = 5
        return x + float(a.sum())

    x = torch.randn(3)
    assert_same(ember.compile(prog, backend="eager")(x), prog(x))
