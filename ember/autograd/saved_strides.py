"""The backward graph's saved-value inputs take the strides the compiled forward returns them with."""
from __future__ import annotations

import sympy
import torch
import torch.fx as fx

from ember.decomp.meta import TensorMeta
from ember.shapes import expr_of

from .fake import FakeTensor


def adopt_saved_strides(bwd: fx.GraphModule, strides: list | None, saved_from: int) -> None:
    """Give the backward graph's saved-value inputs the strides the compiled forward returns them with (its
    kernel compiler may keep a saved activation channels-last, or a matmul result in padded rows), so the
    backward is compiled for them instead of copying each into the traced layout on every call."""
    if not strides:
        return
    table = bwd.meta.get("ember_symbols")
    phs = [n for n in bwd.graph.nodes if n.op == "placeholder"]
    for ph, st in zip(phs, strides[saved_from:]):
        val = ph.meta.get("val")
        if st is None:
            continue
        symbolic = any(isinstance(v, sympy.Basic) for v in st)     # the forward's sympy layout
        if symbolic and isinstance(val, FakeTensor):
            if table is None or tuple(map(expr_of, val.stride())) == tuple(map(expr_of, st)):
                continue
            meta = torch.empty_strided(tuple(val.shape), tuple(table.symint(v) for v in st), dtype=val.dtype,
                                       device="meta")
            ph.meta["val"] = FakeTensor(meta, val.device, val.fake_mode)
        elif isinstance(val, FakeTensor) and tuple(val.stride()) != st:
            meta = torch.empty_strided(tuple(val.shape), st, dtype=val.dtype, device="meta")
            ph.meta["val"] = FakeTensor(meta, val.device, val.fake_mode)
        elif isinstance(val, TensorMeta) and tuple(val.stride) != st:
            ph.meta["val"] = TensorMeta(val.shape, val.dtype, val.device, st)
