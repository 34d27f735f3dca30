"""What real models of timm, torchvision and transformers 5 do that ember must compile as eager runs it (issue
32, the thirty-second sweep of ``tools/models_sweep.py``).

* Convolutions with short parameter lists. ``nn.Conv2d(padding="valid")`` (SigLIP's patch embedding) reaches
  ``aten.convolution`` with ``padding=[0]``: ATen expands a one-element list to every spatial dim, and so must
  the decomposition (it crashed with ``IndexError`` in the shape rule for 2-D and 3-D convolutions).

Each case compiles a fresh copy, runs eval and a training step on fresh random inputs, and compares outputs and
gradients with eager.

* Generated code that depends on the process's string hash seed. The kernel compiler ordered a step's frees
  (the wrapper's ``del`` line) by iterating a set of buffer names; a training graph read from the whole-graph
  cache by another process, whose loss left an output unused, rebuilt its backward, found the rebuilt forward's
  source different and raised (RWKV of transformers 5, second process). Tested in child processes
  (``hashseed_programs.py``) with several ``PYTHONHASHSEED`` values.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember
from tests.capture.harness import assert_same


def _conv_fn(op: Callable, **kw) -> Callable:
    return lambda x, w, b: op(x, w, b, **kw)


# name -> (function of (x, weight, bias), input shape, weight shape)
CONV_CASES: dict[str, tuple[Callable, tuple, tuple]] = {
    "conv2d_valid": (_conv_fn(F.conv2d, padding="valid"), (2, 3, 8, 8), (4, 3, 3, 3)),
    "conv3d_valid": (_conv_fn(F.conv3d, padding="valid"), (2, 3, 5, 5, 5), (4, 3, 3, 3, 3)),
    "conv2d_valid_stride_dilation": (_conv_fn(F.conv2d, padding="valid", stride=2, dilation=2), (2, 3, 9, 9),
                                     (4, 3, 3, 3)),
    "conv2d_valid_groups": (_conv_fn(F.conv2d, padding="valid", groups=3), (2, 3, 8, 8), (6, 1, 3, 3)),
    "conv1d_valid": (_conv_fn(F.conv1d, padding="valid"), (2, 3, 8), (4, 3, 3)),
    "conv2d_same": (_conv_fn(F.conv2d, padding="same", dilation=2), (2, 3, 8, 8), (4, 3, 3, 3)),
    "conv3d_same": (_conv_fn(F.conv3d, padding="same"), (2, 3, 5, 5, 5), (4, 3, 3, 3, 3)),
}


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_short_params(name: str, train: bool) -> None:
    fn, xs, ws = CONV_CASES[name]
    make = lambda: [torch.randn(xs), torch.randn(ws), torch.randn(ws[0])]  # noqa: E731
    compiled = ember.compile(fn)
    for _ in range(2):
        vals = make()
        mine = [v.clone().requires_grad_(train) for v in vals]
        ref = [v.clone().requires_grad_(train) for v in vals]
        out, expect = compiled(*mine), fn(*ref)
        assert_same(out, expect, atol=1e-4, rtol=1e-4)
        if train:
            grad = torch.randn_like(expect)
            out.backward(grad)
            expect.backward(grad)
            for i, (a, b) in enumerate(zip(mine, ref)):
                assert_same(a.grad, b.grad, f"grad {i}", atol=1e-4, rtol=1e-4)


class PatchEmbed(nn.Module):
    """SigLIP's vision embedding: a "valid" patch convolution, flattened to tokens, plus positions."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 8, kernel_size=4, stride=4, padding="valid")
        self.pos = nn.Parameter(torch.randn(1, 4, 8))

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2) + self.pos


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_valid_patch_embedding_module(train: bool) -> None:
    torch.manual_seed(0)
    model = PatchEmbed()
    mine = copy.deepcopy(model)
    compiled = ember.compile(mine)
    x = torch.randn(2, 3, 8, 8)
    with torch.set_grad_enabled(train):
        out, expect = compiled(x), model(x)
    assert_same(out, expect, atol=1e-4, rtol=1e-4)
    if train:
        out.sum().backward()
        expect.sum().backward()
        for (n, a), b in zip(mine.named_parameters(), model.parameters()):
            assert_same(a.grad, b.grad, f"grad {n}", atol=1e-4, rtol=1e-4)


# -- generated code must not depend on the process's string hash seed --------------------------------------
def _run_child(seed: int, cache: Path) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": str(seed), "EMBER_CACHE_DIR": str(cache)}
    env.pop("EMBER_LOGS", None)
    p = subprocess.run([sys.executable, str(Path(__file__).with_name("hashseed_programs.py"))], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"child with PYTHONHASHSEED={seed} failed:\n{p.stderr[-3000:]}"
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("SOURCES ")]
    return json.loads(line[-1][8:])


def test_generated_code_independent_of_hash_seed(tmp_path: Path) -> None:
    """Cold compiles in processes with different hash seeds generate the same wrappers (the frees of an extern
    step, its ``del`` line, came from a set of buffer names, ordered by the string hash). And a training graph
    read from the whole-graph cache by a process with another hash seed, run with a loss that leaves an output
    unused, rebuilds its backward variant and compares the rebuilt forward with the cached one: a hash-ordered
    ``del`` line made them differ, and backward raised 'does not match the cached forward' (RWKV of
    transformers 5 in a second process)."""
    first = _run_child(1, tmp_path / "shared")
    assert first, "no wrapper source was logged"
    other = _run_child(2, tmp_path / "cold")
    assert len(other) == len(first)
    for a, b in zip(first, other):
        assert a == b, f"wrapper differs between PYTHONHASHSEED=1 and 2:\n{a}\n---\n{b}"
    _run_child(3, tmp_path / "shared")      # warm: every backward variant rebuilt and checked


# -- a parameter updated in place under no_grad inside a training forward -----------------------------------
def _rescale_mul(w):
    w.mul_(2)


def _rescale_copy(w):
    w.copy_(w.flip(0) * 0.5)


def _rescale_clamp(w):
    w.clamp_(-0.2, 0.2)


def _rescale_row(w):
    w[0].zero_()


def _rescale_addcmul(w):
    w.addcmul_(w, w, value=0.1)


RESCALES: dict[str, Callable] = {"mul": _rescale_mul, "copy": _rescale_copy, "clamp": _rescale_clamp,
                                 "row_view": _rescale_row, "addcmul": _rescale_addcmul}


class Rescaled(nn.Module):
    """RWKV's pattern (transformers 5): the first forward in a new mode rescales a weight in place under
    no_grad, then uses it; gradients reach the (same) leaf parameter."""

    def __init__(self, update: Callable):
        super().__init__()
        self.update = update
        self.lin, self.out = nn.Linear(4, 6), nn.Linear(6, 3)
        self.rescaled = False

    def forward(self, x):
        if self.rescaled != self.training:
            with torch.no_grad():
                self.update(self.lin.weight)
            self.rescaled = self.training
        return self.out(self.lin(x).tanh())


@pytest.mark.parametrize("name", list(RESCALES))
def test_parameter_updated_under_no_grad_in_training(name: str) -> None:
    torch.manual_seed(0)
    model = Rescaled(RESCALES[name])
    mine = copy.deepcopy(model)
    compiled = ember.compile(mine)
    before = ember.stats()["eager_autograd_graphs"]
    for train in (False, True, True, False, True):
        model.train(train)
        mine.train(train)
        x = torch.randn(2, 4)
        with torch.set_grad_enabled(train):
            out, expect = compiled(x), model(x)
        assert_same(out, expect, atol=1e-5, rtol=1e-5)
        if train:
            out.sum().backward()
            expect.sum().backward()
        for (n, a), b in zip(mine.named_parameters(), model.parameters()):
            assert a.is_leaf and a.requires_grad, n
            assert_same(a.detach(), b.detach(), f"param {n}", atol=1e-5, rtol=1e-5)
            if b.grad is not None:
                assert_same(a.grad, b.grad, f"grad {n}", atol=1e-5, rtol=1e-5)
    assert ember.stats()["eager_autograd_graphs"] == before, "the training graph fell back to eager autograd"


def _fn_no_grad_update(x, w):
    with torch.no_grad():
        w.mul_(0.5)
    return (x @ w).sin().sum(), w.sum()


def _fn_grad_update(x, w):       # an input that needs no grad takes a value that does: still refused, still right
    x.add_(w)
    return (x * w).sum()


@pytest.mark.parametrize("fn", [_fn_no_grad_update, _fn_grad_update], ids=["no_grad", "grad"])
def test_function_input_updated_in_place(fn: Callable) -> None:
    compiled = ember.compile(fn)
    before = ember.stats()["eager_autograd_graphs"]
    for _ in range(2):
        x, w = torch.randn(3, 3), torch.randn(3, 3)
        mine = [x.clone(), w.clone().requires_grad_()]
        ref = [x.clone(), w.clone().requires_grad_()]
        out, expect = compiled(*mine), fn(*ref)
        assert_same(out, expect, atol=1e-5, rtol=1e-5)
        loss, loss_ref = (out[0], expect[0]) if isinstance(out, tuple) else (out, expect)
        loss.backward()
        loss_ref.backward()
        for i, (a, b) in enumerate(zip(mine, ref)):
            assert_same(a.detach(), b.detach(), f"input {i}", atol=1e-5, rtol=1e-5)
            if b.is_leaf and b.grad is not None:
                assert_same(a.grad, b.grad, f"grad {i}", atol=1e-5, rtol=1e-5)
    if fn is _fn_no_grad_update:
        assert ember.stats()["eager_autograd_graphs"] == before, "the training graph fell back to eager autograd"


def test_parameter_updated_under_no_grad_after_use_raises_as_eager() -> None:
    """Updated after a saving op used it: eager's backward raises (a saved tensor was modified); so does ember's."""
    def fn(x, w):
        y = (x @ w).sin()
        with torch.no_grad():
            w.mul_(2)
        return y.sum()

    for f in (fn, ember.compile(fn)):
        x, w = torch.randn(3, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
        loss = f(x, w)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
