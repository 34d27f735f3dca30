"""``Dim``: a named dynamic size with a range, and the ``dynamic_shapes`` argument of ``export``."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class Dim:
    """A dynamic size: ``Dim("batch", min=1, max=1024)``. Two dims with the same ``Dim`` are equal sizes."""

    name: str
    min: int | None = None
    max: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"ember.Dim: name must be an identifier, got {self.name!r}")
        for k in ("min", "max"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"ember.Dim({self.name!r}): {k} must be a non-negative int, got {v!r}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"ember.Dim({self.name!r}): min {self.min} > max {self.max}")

    def __repr__(self) -> str:
        return f"Dim({self.name!r}, min={self.min}, max={self.max})"


def _signature_names(fn: Callable, n_args: int, kwargs: dict) -> list[str]:
    try:
        sig = inspect.signature(fn)
        bound = sig.bind_partial(*([None] * n_args), **{k: None for k in kwargs})
        return list(bound.arguments)
    except (TypeError, ValueError):
        return [f"arg{i}" for i in range(n_args)] + list(kwargs)


def dims_per_leaf(fn: Callable, args: tuple, kwargs: dict, dynamic_shapes: Any, leaves: list,
                  leaf_paths: list[str]) -> list[dict[int, Dim]]:
    """For each flattened input leaf, ``{dim: Dim}`` from ``dynamic_shapes`` (keyed by argument name, or a
    tuple/list in argument order); nested dicts/lists follow the argument's own structure."""
    out: list[dict[int, Dim]] = [{} for _ in leaves]
    if dynamic_shapes is None:
        return out
    names = _signature_names(fn, len(args), kwargs)
    values = list(args) + [kwargs[k] for k in kwargs]
    if isinstance(dynamic_shapes, dict):
        unknown = set(dynamic_shapes) - set(names)
        if unknown:
            raise ValueError(f"ember.export: dynamic_shapes names {sorted(unknown)} are not arguments of the "
                             f"model (its arguments: {names})")
        per_arg = [dynamic_shapes.get(n) for n in names]
    elif isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) != len(values):
            raise ValueError(f"ember.export: dynamic_shapes has {len(dynamic_shapes)} entries for "
                             f"{len(values)} arguments")
        per_arg = list(dynamic_shapes)
    else:
        raise ValueError("ember.export: dynamic_shapes must be a dict (by argument name) or a tuple/list")
    index = {id(t): i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)}
    for name, value, spec in zip(names, values, per_arg):
        _assign(name, value, spec, index, out)
    return out


def _assign(where: str, value: Any, spec: Any, index: dict, out: list) -> None:
    if spec is None:
        return
    if isinstance(value, torch.Tensor):
        if isinstance(spec, dict):
            items = spec.items()
        elif isinstance(spec, (tuple, list)):
            items = [(d, s) for d, s in enumerate(spec) if s is not None]
        else:
            raise ValueError(f"ember.export: dynamic_shapes for {where} must map dims to ember.Dim")
        for d, dim in items:
            if not isinstance(dim, Dim):
                raise ValueError(f"ember.export: dynamic_shapes for {where} dim {d}: expected ember.Dim, got "
                                 f"{type(dim).__name__}")
            if not -value.dim() <= d < value.dim():
                raise ValueError(f"ember.export: dynamic_shapes for {where}: dim {d} out of range for a "
                                 f"tensor of {value.dim()} dims")
            out[index[id(value)]][d % value.dim()] = dim
        return
    if isinstance(value, dict) and isinstance(spec, dict):
        for k, v in value.items():
            _assign(f"{where}[{k!r}]", v, spec.get(k), index, out)
    elif isinstance(value, (tuple, list)) and isinstance(spec, (tuple, list)):
        for i, (v, s) in enumerate(zip(value, spec)):
            _assign(f"{where}[{i}]", v, s, index, out)
    else:
        raise ValueError(f"ember.export: dynamic_shapes for {where} does not match the argument's structure")
