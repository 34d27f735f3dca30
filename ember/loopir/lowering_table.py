"""The lowering table (``LOWERINGS``: prim name -> lowering) and what lowerings share with the lowerer: the
registration decorator, ``UseExtern``, ``prim_name`` and layouts of traced values. Below ``lower.py`` (the
lowerer, which looks lowerings up here) and the modules that register into the table (``lowerings``, ``scatter``,
``welford``, ``conv_patchify``, ``matmul_align``), so none of them imports another's module in a cycle."""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import torch
import torch.fx as fx

from ember.shapes import active_table, expr_of, size_hint

from .ir import Layout

LOWERINGS: dict[str, Callable[..., Any]] = {}
MISSING_LOWERINGS: Counter = Counter()




class UseExtern(Exception):
    """Raised by a lowering for arguments it does not handle (a dtype without atomic adds, a boolean mask):
    the node runs as its ATen call instead, like a prim without a lowering."""


def register_lowering(*names: str) -> Callable[[Callable], Callable]:
    def wrap(fn: Callable) -> Callable:
        for n in names:
            if n in LOWERINGS:
                raise ValueError(f"ember.loopir: prim {n!r} has two lowerings")
            LOWERINGS[n] = fn
        return fn
    return wrap


def layout_of(meta: Any) -> Layout:
    """The layout of a buffer bound to a tensor (a graph input, an extern's result): offset 0, since kernels
    get the tensor's data pointer, which already includes its storage offset. Symbolic sizes (``torch.SymInt``
    of a fake tensor) become their sympy expressions, in the symbols the table keeps: a placeholder's sizes
    were made before the trace learned ``s5 == s2`` (a matmul of two inputs), and the views the trace made
    later say ``s2``; left as ``s5`` the input was not recognized as the source of those views (a copy)."""
    shape, stride = tuple(meta.shape), tuple(meta.stride() if callable(meta.stride) else meta.stride)
    if any(isinstance(v, torch.SymInt) for v in shape + stride):
        shape, stride = tuple(map(expr_of, shape)), tuple(map(expr_of, stride))
    table = active_table()
    if table is not None and table.replacements:
        shape, stride = tuple(map(table.simplify, shape)), tuple(map(table.simplify, stride))
    return Layout(shape, stride, meta.dtype, torch.device(meta.device), 0)


def is_dense(layout: Layout) -> bool:
    """Non-overlapping and dense: some permutation of the dims is contiguous."""
    dims = sorted((i for i, s in enumerate(layout.shape) if s != 1), key=lambda i: size_hint(layout.stride[i]))
    expect = 1
    for i in dims:
        if layout.stride[i] != expect:
            return False
        expect *= layout.shape[i]
    return layout.offset == 0


def traced_layout(tv: Any, meta: Any) -> Layout | None:
    """The dense layout a computed extern argument had in the trace, or None (contiguous)."""
    if tv.view is not None or not isinstance(meta, torch.Tensor) and not hasattr(meta, "stride"):
        return None
    try:
        lay = layout_of(meta)
    except Exception:       # noqa: BLE001 - metadata without strides: the default layout
        return None
    if tuple(lay.shape) != tuple(tv.shape) or lay.dtype != tv.dtype or not is_dense(lay):
        return None
    return lay


def prim_name(node: fx.Node) -> str | None:
    """The name of the prim ``node`` calls (``"mm"``, ``"reshape"``...), or None when it calls something else."""
    t = getattr(node, "target", None)
    return getattr(t, "name", None) if type(t).__name__ == "Prim" else None
