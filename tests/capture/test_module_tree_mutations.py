"""Every way to change a module tree between two cached calls, and compiled == eager after each.

The bar for any cheaper guard of a module tree (one check standing for many clauses): a tree of ResNet-style
blocks (a ``Sequential`` of blocks with a conv, a batch norm, an activation submodule, a plain float attribute
and a class attribute, a ``ModuleList`` head the forward loops over) is mutated between calls in each way the
table lists, through the module API (``setattr``, ``register_buffer``, ``train``, hooks) and around it (raw
writes to ``_modules``, ``_parameters`` and ``__dict__``, ``object.__setattr__``, ``.data``, ``swap_tensors``,
in-place metadata changes, a class attribute or method patched after the compile (``forward``, ``__call__``
of a module class, of the root module's class, of a plain callable object's class), a module's ``__class__``
swapped, a parametrization that swaps the module's class). A guard
that stood for the tree by watching ``Module.__setattr__`` alone would miss every row after the first few.

Twins: the compiled model and an eager deep copy get the same mutation; outputs, gradients and buffers (a batch
norm's running statistics in training) must be equal after every call. Runs under ``no_grad`` in eval mode
(inference entries, whose weights have the remembered-tensor fast path) and in training mode with gradients.
"""
from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.utils.parametrize as parametrize

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from tests.capture.harness import assert_same  # noqa: E402

C = 4


def _rand(*shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))        # the default dtype


def _classes():
    """Fresh classes per test: the class-level mutations patch them."""
    class Block(nn.Module):
        beta = 1.0              # a class attribute the forward reads

        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(C, C, 1, bias=False)
            self.bn = nn.BatchNorm2d(C)
            self.act = nn.ReLU()
            self.alpha = 1.0    # an instance attribute the forward reads

        def forward(self, x):
            return self.act(self.bn(self.conv(x))) * self.alpha * self.beta + x

    class Post:
        """A plain callable object the forward calls (not a module)."""
        def __call__(self, y):
            return y + 0.5

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.Sequential(Block(), Block())
            self.head = nn.ModuleList([nn.Linear(C, C)])
            self.post = Post()

        def forward(self, x):
            y = self.layers(x).mean((2, 3))
            for lin in self.head:
                y = lin(y)
            return self.post(y)
    return Block, Net


# -- the mutations: each takes the model; applied to the compiled one and its eager twin alike ----------------
def _setattr_submodule(m):
    torch.manual_seed(11)
    m.layers[1].conv = nn.Conv2d(C, C, 1, bias=False)


def _setattr_activation(m):
    m.layers[0].act = nn.Tanh()


def _raw_modules_write(m):
    torch.manual_seed(12)
    bn = nn.BatchNorm2d(C)
    bn.running_mean.normal_()
    bn.train(m.training)
    m.layers[1]._modules["bn"] = bn


def _sequential_setitem(m):
    torch.manual_seed(13)
    blk = type(m.layers[0])()
    blk.train(m.training)
    m.layers[0] = blk


def _modulelist_append(m):
    torch.manual_seed(14)
    m.head.append(nn.Linear(C, C))


def _setattr_parameter(m):
    m.layers[1].conv.weight = nn.Parameter(_rand(C, C, 1, 1, seed=15))


def _raw_parameters_write(m):
    m.layers[1].conv._parameters["weight"] = nn.Parameter(_rand(C, C, 1, 1, seed=16))


def _register_buffer_replaced(m):
    m.layers[0].bn.register_buffer("running_mean", _rand(C, seed=17))


def _raw_buffers_write(m):
    m.layers[0].bn._buffers["running_var"] = _rand(C, seed=18).abs() + 0.5


def _setattr_float(m):
    m.layers[1].alpha = -2.0


def _raw_dict_write(m):
    m.layers[1].__dict__["alpha"] = 0.5


def _object_setattr(m):
    object.__setattr__(m.layers[0], "alpha", 3.0)


def _del_instance_attr(m):
    del m.layers[0].alpha
    type(m.layers[0]).alpha = -1.5      # the class attribute now answers


def _class_attr_patched(m):
    type(m.layers[0]).beta = 0.25


def _class_method_patched(m):
    cls = type(m.layers[0])
    if not getattr(cls, "patched", False):
        base = cls.forward
        cls.forward = lambda self, x: base(self, x) - 1.0
        cls.patched = True


def _patch_once(cls, name, make):
    """Patch ``cls.name`` with ``make(old)`` once (the twins share their classes)."""
    if not cls.__dict__.get(f"_patched_{name}"):
        setattr(cls, name, make(getattr(cls, name)))
        setattr(cls, f"_patched_{name}", True)


def _class_call_patched(m):
    _patch_once(type(m.layers[1]), "__call__", lambda old: lambda self, x: old(self, x) * 0.5)


def _root_forward_patched(m):
    _patch_once(type(m), "forward", lambda old: lambda self, x: old(self, x) * -3.0)


def _object_call_patched(m):
    _patch_once(type(m.post), "__call__", lambda old: lambda self, y: y * y)


def _class_swapped(m):
    block = type(m.layers[0])
    alt = block.__dict__.get("alt")
    if alt is None:
        class Alt(block):
            def forward(self, x):
                return self.bn(self.conv(x)) - x
        alt = block.alt = Alt
    m.layers[1].__class__ = alt


def _instance_forward(m):
    bn = m.layers[1].bn
    bn.forward = lambda x: x * 0.5


def _bn_eps(m):
    m.layers[1].bn.eps = 0.5


def _bn_momentum(m):
    m.layers[0].bn.momentum = 0.9


def _requires_grad_flip(m):
    m.layers[0].conv.weight.requires_grad_(False)


def _train_flip_one(m):
    m.layers[1].bn.train(not m.layers[1].bn.training)


def _train_flip_all(m):
    m.train(not m.training)


def _forward_hook(m):
    m.layers[1].conv.register_forward_hook(lambda mod, args, out: out * 2.0)


def _forward_pre_hook(m):
    m.layers[0].register_forward_pre_hook(lambda mod, args: (args[0] + 1.0,))


def _param_data(m):
    m.layers[0].conv.weight.data = _rand(C, C, 1, 1, seed=19)


def _swap_tensors(m):
    torch.utils.swap_tensors(m.layers[1].conv.weight, nn.Parameter(_rand(C, C, 1, 1, seed=20)))


def _param_in_place(m):
    with torch.no_grad():
        m.layers[0].conv.weight.mul_(-1.0)


def _buffer_restrided(m):
    with torch.no_grad():       # the same tensor, another storage and stride (a version bump, no new object)
        m.layers[1].bn.running_var.set_((_rand(2 * C, seed=21).abs() + 0.5)[::2])


def _weight_transposed_in_place(m):
    with torch.no_grad():
        m.head[0].weight.t_()


def _parametrized(m):
    class Neg(nn.Module):
        def forward(self, w):
            return -w
    parametrize.register_parametrization(m.layers[0].conv, "weight", Neg())     # swaps the module's class


MUTATIONS: list[Callable] = [
    _setattr_submodule, _setattr_activation, _raw_modules_write, _sequential_setitem, _modulelist_append,
    _setattr_parameter, _raw_parameters_write, _register_buffer_replaced, _raw_buffers_write, _setattr_float,
    _raw_dict_write, _object_setattr, _del_instance_attr, _class_attr_patched, _class_method_patched,
    _class_call_patched, _root_forward_patched, _object_call_patched, _class_swapped, _instance_forward, _bn_eps, _bn_momentum, _requires_grad_flip, _train_flip_one, _train_flip_all,
    _forward_hook, _forward_pre_hook, _param_data, _swap_tensors, _param_in_place, _buffer_restrided,
    _weight_transposed_in_place, _parametrized,
]


def _state(m) -> dict:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def _grads(m) -> dict:
    return {n: (None if p.grad is None else p.grad.clone()) for n, p in m.named_parameters()}


def _step(model, x, training: bool):
    if not training:
        with torch.no_grad():
            return model(x), None
    out = model(x)
    out.square().sum().backward()
    grads = _grads(model)
    model.zero_grad(set_to_none=True)
    return out.detach(), grads


@pytest.fixture
def float64():
    """Everything in float64 (the model, the new weights the mutations make, the inputs): a batch norm's
    training backward compared at float32's default tolerance differs by rounding alone."""
    was = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(was)


@pytest.mark.parametrize("mode", ["infer", "train"])
@pytest.mark.parametrize("mutate", MUTATIONS, ids=[f.__name__.lstrip("_") for f in MUTATIONS])
def test_a_mutated_module_tree_gives_eager_results(mutate, mode, fresh_ember, float64):
    _, Net = _classes()
    torch.manual_seed(0)
    model = Net().train(mode == "train")
    with torch.no_grad():
        for blk in model.layers:        # running statistics other than 0 and 1, so eval mode reads them
            blk.bn.running_mean.normal_()
            blk.bn.running_var.uniform_(0.5, 2.0)
    twin = copy.deepcopy(model)
    f = ember.compile(model)
    for step in range(5):
        if step == 2:
            mutate(model)
            mutate(twin)
        x = _rand(2, C, 3, 3, seed=100 + step)
        got, got_grads = _step(f, x, mode == "train")
        want, want_grads = _step(twin, x, mode == "train")
        where = f"step {step} ({'after' if step >= 2 else 'before'} {mutate.__name__.lstrip('_')})"
        assert_same(got, want, path=f"output at {where}")
        if got_grads is not None:
            assert got_grads.keys() == want_grads.keys(), where
            for name in got_grads:
                g, w = got_grads[name], want_grads[name]
                assert (g is None) == (w is None), f"{where}: grad of {name}"
                if g is not None:
                    torch.testing.assert_close(g, w, msg=lambda e: f"{where}: grad of {name}: {e}")
        got_state, want_state = _state(model), _state(twin)
        for name in want_state:
            torch.testing.assert_close(got_state[name], want_state[name], msg=lambda e: f"{where}: {name}: {e}")

