"""The prim-graph checker: the invariants of the graphs ``ember.decomp`` hands to the kernel compiler.

``verify_prim_graph(gm)`` checks that
- the FX graph is well formed (``Graph.lint``: every node defined before use, one output);
- every ``call_function`` calls a registered prim (``PRIMS``), picks an item of a multi-output node
  (``operator.getitem``), computes on sizes (``operator`` arithmetic, ``sym_*``, in a graph with symbolic
  sizes) or calls an ATen ``OpOverload`` the prims leave as an extern call;
- no prim call mutates: the closed set is functional (a prim's tags never say ``inplace``), and no node is a
  ``call_method`` or ``call_module`` (decomposed graphs are flat function calls).

A broken invariant raises ``PrimGraphError`` (a bug in ember, never in the user's program)."""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from .core import PRIMS, Prim


class PrimGraphError(AssertionError):
    """A decomposed graph breaks the prim IR's invariants."""


def _is_getitem(target: Any) -> bool:
    return target is operator.getitem or getattr(target, "__name__", "") == "_getitem"


def _is_size_arithmetic(target: Any) -> bool:
    """Arithmetic on sizes in a graph with symbolic sizes (``operator.mul`` of two SymInts, ``torch.sym_max``)."""
    return getattr(target, "__module__", None) in ("_operator", "operator") or \
        getattr(target, "__name__", "").startswith("sym_")


def verify_prim_graph(gm: fx.GraphModule, where: str = "decompose") -> None:
    """Check ``gm`` against the prim IR's invariants (module docstring); raise ``PrimGraphError`` if broken."""
    try:
        gm.graph.lint()
    except Exception as e:      # noqa: BLE001 - FX's own checks, reported as ours
        raise PrimGraphError(f"ember.decomp.verify: after {where}: malformed graph: {e}") from e
    prims = set(map(id, PRIMS.values()))
    for node in gm.graph.nodes:
        if node.op in ("call_method", "call_module"):
            raise PrimGraphError(f"ember.decomp.verify: after {where}: {node.op} node {node.name} "
                                 f"({node.target}) in a prim graph")
        if node.op != "call_function":
            continue
        t = node.target
        if isinstance(t, Prim):
            if id(t) not in prims:
                raise PrimGraphError(f"ember.decomp.verify: after {where}: {node.name} calls prim {t.name}, "
                                     "which is not registered in PRIMS")
            if "inplace" in t.tags:
                raise PrimGraphError(f"ember.decomp.verify: after {where}: {node.name} calls in-place prim "
                                     f"{t.name}")
        elif not (_is_getitem(t) or _is_size_arithmetic(t) or isinstance(t, torch._ops.OpOverload)):
            raise PrimGraphError(f"ember.decomp.verify: after {where}: {node.name} calls {t!r}, which is not a "
                                 "prim, a getitem or an ATen extern")
