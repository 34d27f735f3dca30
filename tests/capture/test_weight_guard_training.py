"""Module weights checked by identity and version counter in training entries too (``capture.torch.fastguard``).

A training step's forward checked each parameter's class, dtype, device, shape, layout and requires_grad on
every call (~0.35 us each, most of a cached call's guard time). Now a weight that is the same tensor, with the
same version as at its last full check, passes on the identity test; an entry whose weights keep being rewritten
in place (an optimizer step) turns that fast path off and checks in full. Each table below mutates a weight
between calls of one compiled module, in both states of the fast path (fresh, and off after optimizer steps),
and checks the compiled forward and gradients equal eager's after every mutation: a guard the fast path
weakened would show as a stale, wrong answer.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn as nn

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from ember.capture.torch import fastguard  # noqa: E402
from tests.capture.harness import assert_same  # noqa: E402


def rand(*shape, seed, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.b = nn.Linear(4, 3)
        self.register_buffer("shift", torch.full((4,), 0.5))

    def forward(self, x):
        return self.b(torch.relu(self.norm(self.a(x) + self.shift)))


def _step(m: nn.Module, f: Callable, x: torch.Tensor) -> None:
    """Compiled forward and gradients == eager's, on the module's current weights."""
    params = [p for p in m.parameters() if p.requires_grad]
    got = f(x)
    got_grads = torch.autograd.grad(got.pow(2).sum(), params)
    want = m(x)
    want_grads = torch.autograd.grad(want.pow(2).sum(), params)
    assert_same(got, want)
    # (the fused backward sums LayerNorm's terms in another order: ~1e-5 apart; a stale weight is ~1 apart)
    assert_same(list(got_grads), list(want_grads), "grads", rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------- what the remembered check must still catch
def _new_parameter(m):
    m.a.weight = nn.Parameter(rand(4, 4, seed=11))


def _data_same_shape(m):
    m.a.weight.data = rand(4, 4, seed=12)           # no version bump: the .data epoch


def _data_smaller(m):
    m.b.weight.data = m.b.weight.data[:2].clone()
    m.b.bias.data = m.b.bias.data[:2].clone()


def _transpose_in_place(m):
    with torch.no_grad():
        m.a.weight.t_()                             # same tensor, new strides (a version bump)


def _set_storage(m):
    with torch.no_grad():
        m.b.weight.set_(rand(2, 4, seed=13))
        m.b.bias.set_(rand(2, seed=14))


def _resize_buffer(m):
    with torch.no_grad():
        m.shift.resize_(1)
        m.shift.fill_(2.0)                          # broadcasts: another graph


def _swap_tensors(m):
    torch.utils.swap_tensors(m.b.weight, nn.Parameter(rand(5, 4, seed=15)))
    m.b.bias = nn.Parameter(rand(5, seed=16))


def _requires_grad_off(m):
    m.a.weight.requires_grad_(False)


def _values_in_place(m):
    with torch.no_grad():
        m.norm.weight.mul_(-2.0)                    # same metadata: no recompile needed, new values


def _buffer_replaced(m):
    m.shift = rand(4, seed=17)


def _module_double(m):
    m.double()


MUTATIONS = [_new_parameter, _data_same_shape, _data_smaller, _transpose_in_place, _set_storage, _resize_buffer,
             _swap_tensors, _requires_grad_off, _values_in_place, _buffer_replaced, _module_double]


def _optimizer_steps(m, f, n=12):
    """Steps of SGD through the compiled module: every weight rewritten in place before each call."""
    opt = torch.optim.SGD(m.parameters(), lr=1e-2)
    for seed in range(n):
        f(rand(3, 4, seed=100 + seed)).pow(2).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


@pytest.mark.parametrize("state", ["fresh", "after_optimizer"])
@pytest.mark.parametrize("mutate", MUTATIONS, ids=[f.__name__.lstrip("_") for f in MUTATIONS])
def test_every_weight_mutation_is_caught_in_training(mutate, state, fresh_ember):
    torch.manual_seed(0)
    m = _Net()
    f = ember.compile(m)
    if state == "after_optimizer":
        _optimizer_steps(m, f)
    for seed in range(2):
        _step(m, f, rand(3, 4, seed=seed))
    mutate(m)
    dtype = next(m.parameters()).dtype
    for seed in range(2, 4):
        _step(m, f, rand(3, 4, seed=seed, dtype=dtype))


# ------------------------------------------------------------------- the fast path is taken, and given up
def _entry_records(m) -> list:
    owners = {id(s.owner): s.owner for s in list(fastguard._ALL.values()) if getattr(s, "owner", None) is not None}
    return [r for r in owners.values() if any(s[0][0]() is p for s in r.seen for p in m.parameters())]


def test_training_weights_are_remembered(fresh_ember):
    """Two training calls with unchanged weights: the second passes every weight on its identity and version
    (each is remembered), as an inference entry's do."""
    torch.manual_seed(0)
    m = _Net()
    f = ember.compile(m)
    for seed in range(2):
        _step(m, f, rand(3, 4, seed=seed))
    remembered = {s[0][0]() for r in _entry_records(m) for s in r.seen}
    assert remembered >= set(m.parameters()) | {m.shift}
    assert all(r.on for r in _entry_records(m))


def test_weights_rewritten_every_call_turn_the_fast_path_off(fresh_ember):
    """An optimizer rewrites every weight between calls: the identity check would miss every time, so the
    entry stops using it (and stays correct); ``weight_guard_rewrites=0`` never uses it."""
    torch.manual_seed(0)
    m = _Net()
    f = ember.compile(m)
    _optimizer_steps(m, f, n=3)
    assert [r.on for r in _entry_records(m)] == [True]
    _optimizer_steps(m, f, n=6)
    assert [r.on for r in _entry_records(m)] == [False]
    _step(m, f, rand(3, 4, seed=0))
    ember.reset()
    m2 = _Net()
    f2 = ember.compile(m2, options={"weight_guard_rewrites": 0})
    for seed in (1, 2):
        _step(m2, f2, rand(3, 4, seed=seed))
    owners = [s.owner for s in list(fastguard._ALL.values()) if getattr(s, "owner", None) is not None]
    assert any(r.rewrites_per_record == 0 for r in owners)
    assert not _entry_records(m2)       # nothing remembered: every weight checked in full


def test_buffers_the_graph_updates_stay_correct(fresh_ember):
    """BatchNorm in training mode updates its running statistics inside the compiled graph (a version bump
    per call): the remembered check misses on them, the full check passes, and the statistics match eager's."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2)).train()
    ref = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2)).train()
    ref.load_state_dict(m.state_dict())
    f = ember.compile(m)
    for seed in range(6):
        x = rand(5, 4, seed=seed)
        got, want = f(x), ref(x)
        assert_same(got, want)
        assert_same(list(torch.autograd.grad(got.sum(), list(m.parameters()))),
                    list(torch.autograd.grad(want.sum(), list(ref.parameters()))), "grads", rtol=1e-4, atol=1e-4)
        assert_same(list(m[1].buffers()), list(ref[1].buffers()), "running stats")
        if seed == 3:
            with torch.no_grad():
                m[1].running_var.resize_(3)     # no longer broadcasts: eager raises, so must the compiled call
                ref[1].running_var.resize_(3)
            with pytest.raises(RuntimeError):
                ref(x)
            with pytest.raises(RuntimeError):
                f(x)
            m[1].running_var = torch.ones(6)
            ref[1].running_var = torch.ones(6)
