"""The table machinery of test_torch_programs.py: argument specs, ``Program`` and the ``@program`` registry.

Arguments are written as specs: ``T(3, 4)`` a random float tensor, ``P(3)`` a positive one, ``I(5, high=4)`` a
random int64 tensor, ``B(3, 4)`` a random bool mask; lists, tuples, dicts and plain Python values pass through
(deep-copied). ``materialize(spec, generator)`` turns a spec into values.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


# ------------------------------------------------------------------------------------------ argument specs
@dataclass(frozen=True)
class T:
    """A random float tensor (standard normal)."""
    shape: tuple
    dtype: torch.dtype = torch.float32

    def __init__(self, *shape, dtype=torch.float32):
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)

    def make(self, g):
        return torch.randn(self.shape, generator=g, dtype=torch.float64).to(self.dtype)


class P(T):
    """A random positive float tensor in [0.5, 1.5)."""

    def make(self, g):
        return (torch.rand(self.shape, generator=g, dtype=torch.float64) + 0.5).to(self.dtype)


@dataclass(frozen=True)
class I:  # noqa: E742
    """A random int64 tensor in [low, high)."""
    shape: tuple
    high: int
    low: int

    def __init__(self, *shape, high=4, low=0):
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "low", low)

    def make(self, g):
        return torch.randint(self.low, self.high, self.shape, generator=g)


@dataclass(frozen=True)
class B:
    """A random bool mask."""
    shape: tuple

    def __init__(self, *shape):
        object.__setattr__(self, "shape", shape)

    def make(self, g):
        return torch.rand(self.shape, generator=g) > 0.5


def materialize(spec, g):
    if isinstance(spec, (T, I, B)):
        return spec.make(g)
    if isinstance(spec, list):
        return [materialize(s, g) for s in spec]
    if isinstance(spec, tuple):
        return tuple(materialize(s, g) for s in spec)
    if isinstance(spec, dict):
        return {k: materialize(v, g) for k, v in spec.items()}
    return copy.deepcopy(spec)


# ------------------------------------------------------------------------------------------------- table
@dataclass
class Program:
    name: str
    fn: Callable
    args: tuple
    kwargs: dict
    grad: bool
    graphs: int
    module: bool
    tol: dict

    def __repr__(self):
        return self.name


PROGRAMS: list[Program] = []


def program(*args: Any, grad: bool = True, graphs: int = 1, tol: dict | None = None, **kwargs: Any):
    """Register a program with one argument spec; ``grad=False`` for programs that mutate their inputs or
    whose outputs are not differentiable; ``tol`` (rtol/atol) for results computed in low precision."""
    def deco(fn):
        PROGRAMS.append(Program(fn.__name__, fn, args, kwargs, grad, graphs, isinstance(fn, type), tol or {}))
        return fn
    return deco
