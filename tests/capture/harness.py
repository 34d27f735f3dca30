"""Shared machinery of the capture tests: a counting backend, cloning and differential comparison helpers.

The fixtures built on it (``counter``, ``fresh_ember``) live in conftest.py.
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class CountingBackend:
    """A backend with the torch.compile custom-backend contract: records every graph and runs it as is."""

    def __init__(self):
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list):
        assert isinstance(gm, torch.fx.GraphModule), type(gm)
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return gm.forward

    @property
    def count(self) -> int:
        return len(self.graphs)

    def describe(self) -> str:
        return "\n\n".join(f"graph {i}:\n{gm.code}" for i, gm in enumerate(self.graphs))


def clone_value(v, *, requires_grad: bool | None = None):
    """Deep copy of tensors inside (nested) lists/tuples/dicts; tensors come back as fresh leaves.

    ``requires_grad=None`` keeps each tensor's flag; True/False sets it on floating-point tensors.
    """
    if isinstance(v, torch.Tensor):
        c = v.detach().clone()
        rg = v.requires_grad if requires_grad is None else (requires_grad and c.is_floating_point())
        return c.requires_grad_(rg)
    if isinstance(v, list):
        return [clone_value(x, requires_grad=requires_grad) for x in v]
    if isinstance(v, tuple) and not hasattr(v, "_fields"):
        return tuple(clone_value(x, requires_grad=requires_grad) for x in v)
    if isinstance(v, dict):
        return {k: clone_value(x, requires_grad=requires_grad) for k, x in v.items()}
    return copy.deepcopy(v)


def tensors_in(v) -> list[torch.Tensor]:
    """Every tensor in a (nested) structure, in a deterministic order."""
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in tensors_in(x)]
    if isinstance(v, dict):
        return [t for k in v for t in tensors_in(v[k])]
    return []


def assert_same(actual, expected, path: str = "out", **tol) -> None:
    """Structural equality: same container types and keys, same Python values, tensors assert_close'd with
    equal dtype, shape and requires_grad (``tol``: rtol/atol for assert_close, default by dtype)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a tensor, got {type(actual).__name__}"
        torch.testing.assert_close(actual, expected, msg=lambda m: f"{path}: {m}", **tol)
        assert actual.requires_grad == expected.requires_grad, (
            f"{path}: requires_grad {actual.requires_grad} != eager's {expected.requires_grad}")
        return
    assert type(actual) is type(expected), (
        f"{path}: type {type(actual).__name__} != {type(expected).__name__}")
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{path}[{i}]", **tol)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            assert_same(actual[k], expected[k], f"{path}[{k!r}]", **tol)
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def cotangent_loss(out, seed: int = 1234) -> torch.Tensor | None:
    """A scalar that weights every differentiable output by a fixed random cotangent (so gradients are not
    trivially all-ones). None when no output requires grad."""
    g = torch.Generator().manual_seed(seed)
    total = None
    for t in tensors_in(out):
        if not (t.requires_grad and t.is_floating_point()):
            continue
        w = torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype)
        term = (t * w).sum().double()
        total = term if total is None else total + term
    return total


def assert_module_state_same(actual: torch.nn.Module, expected: torch.nn.Module,
                             path: str = "module") -> None:
    """Parameters, buffers and the public plain attributes (side effects of forward) of two module trees."""
    a_sd, e_sd = actual.state_dict(keep_vars=True), expected.state_dict(keep_vars=True)
    assert list(a_sd) == list(e_sd), f"{path}: state_dict keys differ"
    for k in e_sd:
        torch.testing.assert_close(a_sd[k].detach(), e_sd[k].detach(), msg=lambda m, k=k: f"{path}.{k}: {m}")
    for (name, a_mod), (_, e_mod) in zip(actual.named_modules(), expected.named_modules()):
        a_attrs = {k: v for k, v in vars(a_mod).items() if not k.startswith("_")}
        e_attrs = {k: v for k, v in vars(e_mod).items() if not k.startswith("_")}
        assert sorted(a_attrs) == sorted(e_attrs), (
            f"{path}.{name}: attributes {sorted(a_attrs)} != {sorted(e_attrs)}")
        for k, v in e_attrs.items():
            where = f"{path}.{name}.{k}"
            if isinstance(v, torch.Tensor):
                assert isinstance(a_attrs[k], torch.Tensor), f"{where}: not a tensor"
                torch.testing.assert_close(a_attrs[k].detach(), v.detach(),
                                           msg=lambda m, w=where: f"{w}: {m}")
            elif isinstance(v, (int, float, bool, str, type(None))):
                assert a_attrs[k] == v, f"{where}: {a_attrs[k]!r} != {v!r}"


def assert_grads_same(actual_params, expected_params, names=None) -> None:
    actual_params, expected_params = list(actual_params), list(expected_params)
    assert len(actual_params) == len(expected_params)
    names = names or [str(i) for i in range(len(expected_params))]
    for name, a, e in zip(names, actual_params, expected_params):
        if e.grad is None:
            assert a.grad is None, f"grad of {name}: eager has none, compiled has one"
            continue
        assert a.grad is not None, f"grad of {name}: missing in compiled run"
        torch.testing.assert_close(a.grad, e.grad, msg=lambda m, name=name: f"grad of {name}: {m}")
