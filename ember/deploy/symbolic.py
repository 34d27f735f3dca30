"""Dynamic dims of an export: symbolic fake inputs for the trace, and the relations it relied on.

Each ``Dim`` becomes one size symbol (dims declared with the same ``Dim`` share it) whose range is the Dim's,
with sizes 0 and 1 excluded (they broadcast differently; a graph traced for sizes >= 2 is not valid for them,
so a call with such a size is refused rather than answered wrongly). After the trace, a relation that pins a
Dim to one value (the program needed a constant) is an error naming the Dim; the other relations are kept in
the program and checked on every call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from ..shapes import SymbolTable
from . import relations as R
from .dims import Dim


@dataclass
class SymbolicLeaves:
    table: SymbolTable
    mode: Any
    fakes: list
    names: dict = field(default_factory=dict)        # symbol -> Dim name


def _dense_strides(shape: list) -> list:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc = acc * s
    return list(reversed(out))


def symbolic_leaves(leaves: list, dims: list[dict[int, Dim]], paths: list[str]) -> SymbolicLeaves:
    from ..autograd.fake import FakeMode
    from ..autograd import symbolic as _rules  # noqa: F401  (registers ember's symbolic shape rules)
    table, mode = SymbolTable(), FakeMode()
    mode.symbolic = True
    by_name: dict[str, tuple[sympy.Symbol, int]] = {}
    out = SymbolicLeaves(table, mode, [])
    for leaf, want, path in zip(leaves, dims, paths):
        if not want:
            out.fakes.append(leaf)
            continue
        if not leaf.is_contiguous():
            raise ValueError(f"ember.export: {path} has dynamic dims but is not contiguous; pass a contiguous "
                             "example")
        shape: list = []
        for i, n in enumerate(leaf.shape):
            dim = want.get(i)
            if dim is None:
                shape.append(int(n))
                continue
            lo, hi = max(2, dim.min or 0), dim.max
            if n < 2 or n < lo or (hi is not None and n > hi):
                raise ValueError(f"ember.export: {path} dim {i} ({dim.name}) is {n} in the example; it must be in "
                                 f"[{lo}, {hi if hi is not None else 'inf'}] (sizes 0 and 1 are specialized)")
            if dim.name in by_name:
                sym, hint = by_name[dim.name]
                if hint != n:
                    raise ValueError(f"ember.export: Dim {dim.name!r} is {hint} and {n} in the example inputs")
            else:
                sym = table.new_symbol(int(n), f"{path}.size()[{i}]", lo=lo, hi=hi)
                by_name[dim.name] = (sym, int(n))
                out.names[sym] = dim.name
            shape.append(table.symint(sym))
        out.fakes.append(mode.fake_empty(shape, _dense_strides(shape), leaf.dtype, leaf.device,
                                         leaf.requires_grad))
    return out


def relations_of(sym: SymbolicLeaves) -> list[dict]:
    """The trace's relations as JSON trees over Dim names; a Dim pinned to a constant is an error."""
    out = []
    for rel in sym.table.relations:
        e = rel.expr
        if isinstance(e, sympy.Eq) and (e.lhs.is_Symbol and e.rhs.is_Integer or e.rhs.is_Symbol and e.lhs.is_Integer):
            s, v = (e.lhs, e.rhs) if e.lhs.is_Symbol else (e.rhs, e.lhs)
            raise ValueError(f"ember.export: the program needs Dim {sym.names.get(s, s)!r} to be exactly {v}"
                             + (f" ({rel.where})" if rel.where else "") + "; it cannot be dynamic: drop it from "
                             "dynamic_shapes")
        out.append(R.encode(e, sym.names))
    for s, target in sym.table.replacements.items():      # dims found equal: a relation too
        out.append(R.encode(sympy.Eq(s, target), sym.names))
    return out


_ = torch
