"""ember's own compositions of ATen's composite ops, used while tracing a graph with symbolic sizes.

``torch.matmul``, ``F.linear`` and ``F.scaled_dot_product_attention`` are CompositeImplicitAutograd ops:
ATen's C++ breaks them into expand, reshape, mm/bmm, add (and picks an attention kernel) before any dispatch
mode sees them. Some PyTorch releases (2.11, the H100 machine's) read the operands' sizes there with
``Tensor.sizes()``, which asks a tensor with symbolic sizes for plain ints (``aten.size.default`` returns
``int[]``): every symbolic size the op touches is specialized (``s0 == hint``), so a graph with
``q @ k.transpose(-2, -1)``, a bias-free ``nn.Linear`` over ``(B, T, C)`` or BERT's attention recompiled for
every new size (nanoGPT training: 18 graphs for 10 lengths; BERT: 38 for batch 1..64), or the meta kernels
fail (``numel()``) and the frame compiles static. PyTorch's own tracer avoids that C++ with Python
decompositions (its Python dispatcher). ember routes these ops to the compositions below, written with
SymInt-clean torch calls: matmul and linear as the same mm/bmm ATen uses, attention as ATen's math path
(scores, mask, a softmax whose fully masked rows give 0, values). ``F.batch_norm`` is the same kind of op
(ATen's C++ picks ``cudnn_batch_norm`` for CUDA inputs, whose meta kernel on 2.11 takes only plain sizes): it
runs as ``native_batch_norm``. They apply only to tensors with symbolic sizes, in AOT tracing
(``ember.autograd.aot``) and in ``ember.export``'s trace (``ember.deploy.trace``); every other call, and each
case a composition does not cover, runs the op as is.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def _symbolic(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape)


def _prod(xs: Any) -> Any:
    n = 1
    for x in xs:
        n = n * x
    return n


def _matmul(a: torch.Tensor, b: torch.Tensor) -> Any:
    """ATen's matmul for a batched operand: fold ``(..., k) @ (k[, n])`` into one mm, else expand the
    batch dims to their broadcast and run one bmm; a matrix-vector product as a one-column (one-row) mm.
    ``None`` for the other cases without a batched first operand (they call mm/dot, or return a transposed
    view, directly)."""
    da, db = a.dim(), b.dim()
    if da == 2 and db == 1:     # mv, whose meta kernel takes only concrete sizes: a one-column mm
        return torch.mm(a, b.unsqueeze(1)).squeeze(1)
    if da == 1 and db == 2:     # a row vector times a matrix (ATen: mm of the unsqueezed vector)
        return torch.mm(a.unsqueeze(0), b).squeeze(0)
    if da < 3 or db < 1:
        return None
    if db <= 2:         # a vector as a one-column matrix: mv's meta kernel takes only concrete sizes
        lead = tuple(a.shape[:-1])
        out = torch.mm(a.reshape(_prod(lead), a.shape[-1]), b if db == 2 else b.unsqueeze(1))
        return out.view(lead + tuple(b.shape[1:]))
    batch = torch.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    n, (m, k), p = _prod(batch), tuple(a.shape[-2:]), b.shape[-1]
    a3 = a.expand(batch + (m, k)).reshape(n, m, k)
    b3 = b.expand(batch + (k, p)).reshape(n, k, p)
    return torch.bmm(a3, b3).view(batch + (m, p))


def _linear(x: torch.Tensor, w: torch.Tensor, bias: Any = None) -> Any:
    """``x @ w.T (+ bias)`` for a batched ``x``, folded into one mm (addmm with a bias), as ATen folds it."""
    if x.dim() < 3 or w.dim() != 2:
        return None
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(_prod(lead), x.shape[-1])
    out = torch.mm(x2, w.t()) if bias is None else torch.addmm(bias, x2, w.t())
    return out.view(lead + (w.shape[0],))


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = _matmul(a, b)
    return torch.matmul(a, b) if out is None else out


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Any = None, dropout_p: float = 0.0,
          is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Any:
    """Attention as ATen's math path computes it (softmax of the scaled scores, rows of only masked positions
    give 0). Dropout, grouped-query attention, a symbolic head size and the combinations eager refuses run the
    op as is."""
    if dropout_p or enable_gqa or q.dim() < 2 or (attn_mask is not None and is_causal):
        return None
    if isinstance(q.shape[-1], torch.SymInt) or (scale is None and q.shape[-1] == 0):
        return None
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = _mm(q * scale, k.transpose(-2, -1))
    if is_causal:
        attn_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    weights = torch.ops.aten._safe_softmax(scores, -1)
    return _mm(weights, v)


def _batch_norm_f(x: torch.Tensor, running_mean: Any, running_var: Any, weight: Any = None, bias: Any = None,
                  training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Any:
    """``F.batch_norm`` as ``native_batch_norm``, the op ATen's CPU path calls (the running statistics are
    updated in place, as eager updates them). ATen's ``batch_norm`` picks the kernel by device before dispatch:
    on CUDA it is ``cudnn_batch_norm``, whose meta kernel reads plain sizes on some releases (2.11) and which
    ember's functionalization and decompositions do not know; ``native_batch_norm`` has a kernel on every
    device and ember's symbolic shape rule, functional form and decomposition."""
    if x.dim() < 2 or (training and momentum is None):
        return None
    return torch.ops.aten.native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum,
                                            eps)[0]


def _batch_norm(x: torch.Tensor, weight: Any, bias: Any, running_mean: Any, running_var: Any, training: bool,
                momentum: float, eps: float, cudnn_enabled: bool = True) -> Any:
    """``torch.batch_norm`` (``F.batch_norm``'s C++ entry, its own argument order): as ``_batch_norm_f``."""
    del cudnn_enabled
    return _batch_norm_f(x, running_mean, running_var, weight, bias, training, momentum, eps)


def _matmul_args(a: Any, b: Any) -> Any:
    return _matmul(a, b) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else None


def _release() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


# matmul and linear compose into the mm/bmm ATen itself calls (no cost), batch norm into the op ATen's CPU path
# calls (the ember kernels are the same); attention's composition replaces a
# fused kernel (flash, memory-efficient) by the math path, so it applies only where ATen's own sdpa reads plain
# sizes: releases before 2.13 (2.11 on the H100 machine; 2.13 keeps the sizes symbolic).
SDPA_COMPOSED = _release() < (2, 13)

COMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.matmul: _matmul_args, torch.Tensor.matmul: _matmul_args, torch.Tensor.__matmul__: _matmul_args,
    F.linear: _linear, torch._C._nn.linear: _linear,
    F.batch_norm: _batch_norm_f, torch.batch_norm: _batch_norm,
    **({F.scaled_dot_product_attention: _sdpa} if SDPA_COMPOSED else {}),
}


class SymbolicCompositions(TorchFunctionMode):
    """While active, the ops of ``COMPOSITIONS`` called with a tensor of symbolic sizes run ember's composition
    (when it covers the case) instead of ATen's C++ one."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        compose = COMPOSITIONS.get(func)
        if compose is not None and any(_symbolic(a) for a in args):
            out = compose(*args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


__all__ = ["COMPOSITIONS", "SymbolicCompositions"]
