"""Decompositions of NN ops: matmul family (onto extern prims), norms, losses, dropout, embedding, indexing,
and the backward ops autograd emits for them (threshold/gelu/tanh/sigmoid/silu/norm/loss backwards).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import sympy
import torch

from ember.shapes import guard

from . import prims as P
from .decomp_reduce import reduce_sum
from .helpers import broadcast_all, broadcast_to, memory_order, opmath, to, where
from .meta import canonical_dim, is_tensorlike, opmath_dtype, prod
from .registry import decompose, register_decomposition

aten = torch.ops.aten


def _bk(v: Any, x: Any) -> Any:
    """v (same rank as x, size-1 dims) broadcast to x's shape."""
    return P.broadcast_in_dim(v, tuple(x.shape), tuple(range(x.ndim)))


def _chan(v: Any, x: Any, dim: int = 1) -> Any:
    """A per-channel vector broadcast along dim of x."""
    return P.broadcast_in_dim(v, tuple(x.shape), (dim,))


def _trail(v: Any, x: Any) -> Any:
    """v broadcast against x's trailing dims."""
    return P.broadcast_in_dim(v, tuple(x.shape), tuple(range(x.ndim - v.ndim, x.ndim)))


# matmul family -------------------------------------------------------------------------------------------
register_decomposition(aten.mm.default)(lambda a, b: P.mm(a, b))
register_decomposition(aten.bmm.default)(lambda a, b: P.bmm(a, b))


@register_decomposition(aten.addmm.default)
def _addmm(bias: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    return P.addmm(bias, a, b, beta, alpha)


@register_decomposition(aten.matmul.default)
def _matmul(a: Any, b: Any) -> Any:
    if a.ndim == 1 and b.ndim == 1:
        return P.reshape(P.mm(P.reshape(a, (1, a.shape[0])), P.reshape(b, (b.shape[0], 1))), ())
    if a.ndim <= 2 and b.ndim <= 2:
        a2 = P.unsqueeze(a, 0) if a.ndim == 1 else a
        b2 = P.unsqueeze(b, 1) if b.ndim == 1 else b
        out = P.mm(a2, b2)
        return P.squeeze(out, (0,) if a.ndim == 1 else (1,)) if min(a.ndim, b.ndim) == 1 else out
    return _batched_matmul(a, b)


def _batched_matmul(a: Any, b: Any) -> Any:
    from .meta import broadcast_shapes
    a2 = P.unsqueeze(a, 0) if a.ndim == 1 else a
    b2 = P.unsqueeze(b, 1) if b.ndim == 1 else b
    batch = broadcast_shapes(tuple(a2.shape[:-2]), tuple(b2.shape[:-2]))
    n = prod(batch)
    m, k, p = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    a3 = P.reshape(broadcast_to(a2, (*batch, m, k)), (n, m, k))
    b3 = P.reshape(broadcast_to(b2, (*batch, k, p)), (n, k, p))
    out = P.reshape(P.bmm(a3, b3), (*batch, m, p))
    if a.ndim == 1:
        out = P.squeeze(out, (out.ndim - 2,))
    if b.ndim == 1:
        out = P.squeeze(out, (out.ndim - 1,))
    return out


@register_decomposition(aten.linear.default)
def _linear(x: Any, w: Any, bias: Any = None) -> Any:
    wt = P.permute(w, (1, 0))
    x2 = P.reshape(x, (prod(x.shape[:-1]), x.shape[-1]))
    out = P.mm(x2, wt) if bias is None else P.addmm(bias, x2, wt, 1, 1)
    return P.reshape(out, (*x.shape[:-1], w.shape[0]))


def _conv_param(value: Sequence, n: int) -> tuple:
    """ATen's convolution takes a one-element list for every spatial dim (``F.conv2d(padding="valid")`` passes
    ``padding=[0]``): expand it to ``n`` entries, so the prim's shape rule and kernels see one per dim."""
    value = tuple(value)
    return value * n if len(value) == 1 and n > 1 else value


@register_decomposition(aten.convolution.default)
def _convolution(x: Any, w: Any, bias: Any, stride: Sequence, padding: Sequence, dilation: Sequence,
                 transposed: bool, output_padding: Sequence, groups: int) -> Any:
    n = x.ndim - 2
    return P.convolution(x, w, bias, _conv_param(stride, n), _conv_param(padding, n), _conv_param(dilation, n),
                         transposed, _conv_param(output_padding, n), groups)


@register_decomposition(aten.scaled_dot_product_attention.default)
def _sdpa(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
          *, scale: Any = None, enable_gqa: bool = False) -> Any:
    return P.sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale)


# norms -----------------------------------------------------------------------------------------------------
@register_decomposition(aten.native_layer_norm.default)
def _native_layer_norm(x: Any, normalized_shape: Sequence, weight: Any, bias: Any, eps: float) -> tuple:
    xf = opmath(x)
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    var, mean = P.var_mean(xf, dims, 0, True)
    rstd = P.rsqrt(P.add(var, float(eps)))
    out = P.mul(P.sub(xf, _bk(mean, xf)), _bk(rstd, xf))
    if weight is not None:
        out = P.mul(out, _trail(opmath(weight), xf))
    if bias is not None:
        out = P.add(out, _trail(opmath(bias), xf))
    sd = _stats_dtype(x, weight, bias)
    return to(out, x.dtype), to(mean, sd), to(rstd, sd)


def _stats_dtype(x: Any, *params: Any) -> torch.dtype:
    """The dtype of a norm's saved mean and inverse std, as ATen returns them: CUDA's kernels keep them in the
    accumulate type (float32 for 16-bit inputs); the CPU's in float32 when the input is 16-bit and a parameter
    (weight, bias, running stats) is float32, else in the input's dtype."""
    if torch.device(x.device).type == "cuda":
        return opmath_dtype(x.dtype)
    if x.dtype in (torch.bfloat16, torch.float16) and any(p is not None and p.dtype == torch.float32
                                                           for p in params):
        return torch.float32
    return x.dtype


@register_decomposition(aten.layer_norm.default)
def _layer_norm(x: Any, normalized_shape: Sequence, weight: Any = None, bias: Any = None,
                eps: float = 1e-5, cudnn_enable: bool = True) -> Any:
    return _native_layer_norm(x, normalized_shape, weight, bias, eps)[0]


@register_decomposition(aten.rms_norm.default)
def _rms_norm(x: Any, normalized_shape: Sequence, weight: Any = None, eps: Any = None) -> Any:
    xf = opmath(x)
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    e = float(eps) if eps is not None else torch.finfo(x.dtype).eps
    ms = P.div(P.sum(P.mul(xf, xf), dims, True), float(prod([x.shape[d] for d in dims])))
    out = P.mul(xf, _bk(P.rsqrt(P.add(ms, e)), xf))
    if weight is not None:
        out = P.mul(out, _trail(opmath(weight), xf))
    return to(out, x.dtype)


@register_decomposition(aten.native_layer_norm_backward.default)
def _native_layer_norm_backward(grad: Any, x: Any, normalized_shape: Sequence, mean: Any, rstd: Any,
                                weight: Any, bias: Any, output_mask: Sequence[bool]) -> tuple:
    g, xf = opmath(grad), opmath(x)
    axis = x.ndim - len(normalized_shape)
    inner, outer = tuple(range(axis, x.ndim)), tuple(range(axis))
    n = prod(x.shape[axis:])
    n = float(n) if isinstance(n, int) else n       # a symbolic row length stays a size expression
    x_hat = P.mul(P.sub(xf, _bk(opmath(mean), xf)), _bk(opmath(rstd), xf))
    gw = P.mul(g, _trail(opmath(weight), g)) if weight is not None else g
    a = P.sum(gw, inner, True)
    b = P.sum(P.mul(gw, x_hat), inner, True)
    dx = P.mul(P.div(_bk(opmath(rstd), g), n),
               P.sub(P.sub(P.mul(gw, n), _bk(a, g)), P.mul(x_hat, _bk(b, g))))
    dw = to(P.sum(P.mul(g, x_hat), outer), weight.dtype) if weight is not None and output_mask[1] else None
    db = to(P.sum(g, outer), bias.dtype) if bias is not None and output_mask[2] else None
    return (to(dx, x.dtype) if output_mask[0] else None), dw, db


def _bn_train(xf: Any, eps: float) -> tuple[Any, Any, Any]:
    dims = (0,) + tuple(range(2, xf.ndim))
    var, mean = P.var_mean(xf, dims, 0, False)
    return mean, var, P.rsqrt(P.add(var, float(eps)))


def _bn_apply(x: Any, xf: Any, mean: Any, invstd: Any, weight: Any, bias: Any) -> Any:
    out = P.mul(P.sub(xf, _chan(mean, xf)), _chan(invstd, xf))
    if weight is not None:
        out = P.mul(out, _chan(opmath(weight), xf))
    if bias is not None:
        out = P.add(out, _chan(opmath(bias), xf))
    return to(out, x.dtype)


@register_decomposition(aten._native_batch_norm_legit_functional.default)
def _bn_functional(x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, training: bool,
                   momentum: float, eps: float) -> tuple:
    xf = opmath(x)
    sd = _stats_dtype(x, weight, bias, running_mean, running_var)
    if not training:
        invstd = P.rsqrt(P.add(opmath(running_var), float(eps)))
        out = _bn_apply(x, xf, opmath(running_mean), invstd, weight, bias)
        if torch.device(x.device).type == "cuda":   # CUDA returns the statistics it normalized with
            return out, to(opmath(running_mean), sd), to(invstd, sd), running_mean, running_var
        empty = P.full((0,), 0.0, sd, x.device)
        return out, empty, empty, running_mean, running_var
    mean, var, invstd = _bn_train(xf, eps)
    n = float(prod(x.shape) / x.shape[1]) if isinstance(prod(x.shape), int) else prod(x.shape) / x.shape[1]
    new_mean = P.add(P.mul(opmath(running_mean), 1 - momentum), P.mul(mean, float(momentum)))
    if isinstance(n, float):
        unbiased = P.mul(var, n / max(n - 1, 1))
    else:       # symbolic n (at least 2 by the symbols' ranges): integer size operands, as kernels take them
        unbiased = P.div(P.mul(var, n), n - 1 if guard(sympy.Ge(n, 2)) else 1)
    new_var = P.add(P.mul(opmath(running_var), 1 - momentum), P.mul(unbiased, float(momentum)))
    return (_bn_apply(x, xf, mean, invstd, weight, bias), to(mean, sd), to(invstd, sd),
            to(new_mean, running_mean.dtype), to(new_var, running_var.dtype))


@register_decomposition(aten.native_batch_norm.default)
def _native_batch_norm(x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any,
                       training: bool, momentum: float, eps: float) -> tuple:
    if training and running_mean is not None:
        # Updates running stats in place: stays an extern until functionalization rewrites it.
        return P.aten_extern(aten.native_batch_norm.default,
                             (x, weight, bias, running_mean, running_var, training, momentum, eps))
    xf = opmath(x)
    if training:
        mean, _, invstd = _bn_train(xf, eps)
        sd = _stats_dtype(x, weight, bias)
        return _bn_apply(x, xf, mean, invstd, weight, bias), to(mean, sd), to(invstd, sd)
    return _bn_functional(x, weight, bias, running_mean, running_var, False, momentum, eps)[:3]


@register_decomposition(aten._native_batch_norm_legit_no_training.default)
def _bn_no_training(x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, momentum: float,
                    eps: float) -> tuple:
    return _bn_functional(x, weight, bias, running_mean, running_var, False, momentum, eps)[:3]


@register_decomposition(aten.native_batch_norm_backward.default)
def _native_batch_norm_backward(grad: Any, x: Any, weight: Any, running_mean: Any, running_var: Any,
                                save_mean: Any, save_invstd: Any, train: bool, eps: float,
                                output_mask: Sequence[bool]) -> tuple:
    g, xf = opmath(grad), opmath(x)
    dims = (0,) + tuple(range(2, x.ndim))
    if train:
        mean, invstd = opmath(save_mean), opmath(save_invstd)
    else:
        mean, invstd = opmath(running_mean), P.rsqrt(P.add(opmath(running_var), float(eps)))
    x_hat = P.mul(P.sub(xf, _chan(mean, xf)), _chan(invstd, xf))
    w = opmath(weight) if weight is not None else P.full((x.shape[1],), 1.0, xf.dtype, x.device)
    sum_g, sum_gx = P.sum(g, dims), P.sum(P.mul(g, x_hat), dims)
    scale = P.mul(w, invstd)
    if train:
        n = prod(x.shape) / x.shape[1]
        n = float(n) if isinstance(prod(x.shape), int) else n      # symbolic: the kernels compute it
        inner = P.sub(P.sub(g, _chan(P.div(sum_g, n), g)), P.mul(x_hat, _chan(P.div(sum_gx, n), g)))
        dx = P.mul(inner, _chan(scale, g))
    else:
        dx = P.mul(g, _chan(scale, g))
    dw = to(sum_gx, weight.dtype) if weight is not None and output_mask[1] else None
    db = to(sum_g, weight.dtype) if weight is not None and output_mask[2] else None
    return (to(dx, x.dtype) if output_mask[0] else None), dw, db


@register_decomposition(aten.native_group_norm.default)
def _native_group_norm(x: Any, weight: Any, bias: Any, n: Any, c: Any, hxw: Any, group: int,
                       eps: float) -> tuple:
    xf = opmath(x)
    xg = P.reshape(xf, (n, group, prod(x.shape) // (n * group) if isinstance(prod(x.shape), int)
                        else prod(x.shape) / (n * group)))
    var, mean = P.var_mean(xg, (2,), 0, True)
    rstd = P.rsqrt(P.add(var, float(eps)))
    out = P.reshape(P.mul(P.sub(xg, _bk(mean, xg)), _bk(rstd, xg)), tuple(x.shape))
    if weight is not None:
        out = P.mul(out, _chan(opmath(weight), out))
    if bias is not None:
        out = P.add(out, _chan(opmath(bias), out))
    return (to(out, x.dtype), to(P.reshape(mean, (n, group)), x.dtype),
            to(P.reshape(rstd, (n, group)), x.dtype))


@register_decomposition(aten.group_norm.default)
def _group_norm(x: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5,
                cudnn_enabled: bool = True) -> Any:
    hxw = prod(x.shape[2:])
    return _native_group_norm(x, weight, bias, x.shape[0], x.shape[1], hxw, num_groups, eps)[0]


# losses ----------------------------------------------------------------------------------------------------
def _nll_parts(x: Any, target: Any, weight: Any, ignore_index: int) -> tuple[Any, Any]:
    """(-picked * w, w) per sample, zero where target == ignore_index; x is [N, C] or [C]."""
    t = target if target.ndim else P.unsqueeze(target, 0)
    x2 = x if x.ndim == 2 else P.unsqueeze(x, 0)
    mask = P.ne(t, ignore_index)
    safe = P.where(mask, t, P.full(tuple(t.shape), 0, t.dtype, t.device))
    picked = P.squeeze(P.gather(x2, 1, P.unsqueeze(safe, 1)), (1,))
    w = P.index_select(weight, 0, safe) if weight is not None else P.full(tuple(t.shape), 1.0, x.dtype,
                                                                            x.device)
    w = P.where(mask, w, P.full(tuple(t.shape), 0.0, x.dtype, x.device))
    return P.neg(P.mul(picked, w)), w


@register_decomposition(aten.nll_loss_forward.default)
def _nll_loss_forward(x: Any, target: Any, weight: Any, reduction: int, ignore_index: int) -> tuple:
    losses, w = _nll_parts(x, target, weight, ignore_index)
    if reduction == 0:
        out = losses if target.ndim else P.squeeze(losses, (0,))
        return out, P.full((), 0.0, x.dtype, x.device)
    total, s = P.sum(w, (0,)), P.sum(losses, (0,))
    return (P.div(s, total) if reduction == 1 else s), total


@register_decomposition(aten.nll_loss.default, aten.nll_loss_nd.default)
def _nll_loss(x: Any, target: Any, weight: Any = None, reduction: int = 1, ignore_index: int = -100) -> Any:
    return _nll_loss_forward(x, target, weight, reduction, ignore_index)[0]


@register_decomposition(aten.nll_loss_backward.default)
def _nll_loss_backward(grad: Any, x: Any, target: Any, weight: Any, reduction: int, ignore_index: int,
                       total_weight: Any) -> Any:
    _, w = _nll_parts(x, target, weight, ignore_index)
    t = target if target.ndim else P.unsqueeze(target, 0)
    g = grad if reduction == 0 else P.div(grad, total_weight) if reduction == 1 else grad
    g = P.reshape(g, (t.shape[0],)) if reduction == 0 else P.broadcast_in_dim(g, tuple(t.shape), ())
    val = P.neg(P.mul(g, w))
    x2 = x if x.ndim == 2 else P.unsqueeze(x, 0)
    # one-hot by comparison with the class index, not a scatter into zeros: the gradient stays a pointwise
    # value that fuses into log_softmax's backward (no [N, C] zeros, scatter and re-read)
    shape = tuple(x2.shape)
    cls = P.broadcast_in_dim(P.iota(shape[1], 0, 1, t.dtype, x.device), shape, (1,))
    hit = P.eq(cls, P.broadcast_in_dim(t, shape, (0,)))
    out = P.where(hit, P.broadcast_in_dim(val, shape, (0,)), P.full(shape, 0.0, x.dtype, x.device))
    return out if x.ndim == 2 else P.squeeze(out, (0,))


@register_decomposition(aten.cross_entropy_loss.default)
def _cross_entropy(x: Any, target: Any, weight: Any = None, reduction: int = 1, ignore_index: int = -100,
                   label_smoothing: float = 0.0) -> Any:
    if label_smoothing != 0.0 or x.ndim > 2 or target.dtype.is_floating_point:
        return P.aten_extern(aten.cross_entropy_loss.default,
                             (x, target, weight, reduction, ignore_index, label_smoothing))
    lsm = decompose(aten._log_softmax.default, x, 1 if x.ndim == 2 else 0, False)
    return _nll_loss(lsm, target, weight, reduction, ignore_index)


def _reduce_loss(losses: Any, reduction: int) -> Any:
    if reduction == 0:
        return losses
    dims = tuple(range(losses.ndim))
    s = reduce_sum(losses, dims)
    return s if reduction == 2 else to(P.div(opmath(s), float(prod(losses.shape))), losses.dtype)


@register_decomposition(aten.mse_loss.default)
def _mse_loss(x: Any, target: Any, reduction: int = 1) -> Any:
    d = P.sub(*[broadcast_to(v, tuple(x.shape)) for v in (x, target)])
    return _reduce_loss(P.mul(d, d), reduction)


@register_decomposition(aten.mse_loss_backward.default)
def _mse_loss_backward(grad: Any, x: Any, target: Any, reduction: int) -> Any:
    norm = 2.0 / float(prod(x.shape)) if reduction == 1 else 2.0
    g = broadcast_to(grad, tuple(x.shape))
    return P.mul(P.mul(P.sub(x, broadcast_to(target, tuple(x.shape))), norm), g)


# dropout, embedding, indexing -----------------------------------------------------------------------------
@register_decomposition(aten.native_dropout.default)
def _native_dropout(x: Any, p: float, train: Any) -> tuple:
    # train None means training. Whenever training, ATen's kernel decides what it draws (p == 0 draws on every
    # device, p == 1 on CPU only, an empty tensor nowhere), so the mask prim runs it for every p.
    if train is False:
        return P.clone(x), P.full(tuple(x.shape), True, torch.bool, x.device)
    keep = P.native_dropout_mask(tuple(x.shape), float(p), x.dtype, x.device, memory_order(x))
    scale = 1.0 / (1.0 - p) if p < 1 else 0.0
    # eager: input.mul(mask).mul_(scale), each in the input's dtype
    return P.mul(P.mul(x, to(keep, x.dtype)), scale), keep


@register_decomposition(aten.native_dropout_backward.default)
def _native_dropout_backward(grad: Any, mask: Any, scale: float) -> Any:
    return to(P.mul(opmath(grad), P.mul(to(mask, opmath_dtype(grad.dtype)), float(scale))), grad.dtype)


@register_decomposition(aten.dropout.default)
def _dropout(x: Any, p: float, train: bool) -> Any:
    # eager draws nothing when not training and for p == 0 or p == 1 (it returns the input, or it times zero)
    if not train or p == 0:
        return P.clone(x)
    if p >= 1:
        return P.mul(x, 0.0)
    return _native_dropout(x, p, True)[0]


@register_decomposition(aten.bernoulli.p)
def _bernoulli_p(x: Any, p: float = 0.5, *, generator: Any = None) -> Any:
    # draws in x's layout: decompose_graph passes the layout of the tensor eager fills (see aot._filled_layout)
    if generator is not None:
        return P.aten_extern(aten.bernoulli.p, (x, p), {"generator": generator})
    if torch.device(x.device).type == "cpu" and x.dtype != torch.bool:
        # CPU's kernel draws the same 0/1 values whatever the dtype it fills, so the draw is a bool mask and
        # the cast is a cheap op: the value the backward keeps (CPU dropout's noise, a random value never
        # recomputed, inside checkpoint regions too) takes 1 byte an element instead of the input's 4
        keep = P.bernoulli(tuple(x.shape), float(p), torch.bool, x.device, memory_order(x))
        return to(keep, x.dtype)
    return P.bernoulli(tuple(x.shape), float(p), x.dtype, x.device, memory_order(x))


@register_decomposition(aten.embedding.default)
def _embedding(weight: Any, indices: Any, padding_idx: int = -1, scale_grad_by_freq: bool = False,
               sparse: bool = False) -> Any:
    flat = P.reshape(indices, (prod(indices.shape),))
    out = P.index_select(weight, 0, flat)
    return P.reshape(out, (*indices.shape, weight.shape[1]))


@register_decomposition(aten.embedding_dense_backward.default)
def _embedding_dense_backward(grad: Any, indices: Any, num_weights: int, padding_idx: int,
                              scale_grad_by_freq: bool) -> Any:
    # the rows of ``grad`` added into zeros at their indices: the loop IR's atomic scatter-add (in float32 for
    # 16-bit gradients, as eager sums them), one pass over the gradient. Eager's ATen kernel (and index_put
    # with accumulate run through ATen, which sorts the indices on CUDA) took 0.23-2.8 ms of a BERT step.
    # Counting repeated indices (scale_grad_by_freq) stays with eager's kernel.
    if scale_grad_by_freq:
        return P.aten_extern(aten.embedding_dense_backward.default,
                             (grad, indices, num_weights, padding_idx, scale_grad_by_freq))
    dim = grad.shape[-1]
    n = prod(indices.shape)
    work = opmath_dtype(grad.dtype)
    flat = P.reshape(indices, (n,))
    rows = to(P.reshape(grad, (n, dim)), work)
    if padding_idx >= 0:
        pad = P.broadcast_in_dim(P.eq(flat, padding_idx), (n, dim), (0,))
        rows = where(pad, 0.0, rows)
    zeros = P.full((num_weights, dim), 0.0, work, grad.device)
    return to(P.index_put(zeros, [flat], rows, True), grad.dtype)


@register_decomposition(aten.gather.default)
def _gather(x: Any, dim: int, index: Any, *, sparse_grad: bool = False) -> Any:
    return P.gather(x, canonical_dim(dim, x.ndim), index)


@register_decomposition(aten.scatter.src, aten.scatter.value)
def _scatter(x: Any, dim: int, index: Any, src: Any) -> Any:
    if not is_tensorlike(src):
        src = P.full(tuple(index.shape), to(src, x.dtype), x.dtype, x.device)
    return P.scatter(x, canonical_dim(dim, x.ndim), index, to(src, x.dtype))


@register_decomposition(aten.scatter_add.default)
def _scatter_add(x: Any, dim: int, index: Any, src: Any) -> Any:
    return P.scatter_add(x, canonical_dim(dim, x.ndim), index, to(src, x.dtype))


def _sum_or_mean(x: Any, src: Any, reduce: str, include_self: bool, shape: tuple, write: Any) -> Any:
    """A scatter's sum or mean of floats by adds: ``write(t, values, accumulate)`` stores or adds ``values``
    (of ``shape``) at the scatter's positions of ``t``. The values add into x, or without include_self into x with
    the reached positions zeroed; a mean divides by the count of values (ones added) at each position, and an
    unreached position (count 0) keeps x."""
    full = lambda shp, v: P.full(shp, v, x.dtype, x.device)      # noqa: E731
    base = x if include_self else write(x, full(shape, 0.0), False)
    total = write(base, to(src, x.dtype), True)
    if reduce == "sum":
        return total
    count = write(full(tuple(x.shape), 1.0 if include_self else 0.0), full(shape, 1.0), True)
    return P.div(total, P.maximum(count, 1.0))


@register_decomposition(aten.scatter_reduce.two)
def _scatter_reduce(x: Any, dim: int, index: Any, src: Any, reduce: str, *, include_self: bool = True) -> Any:
    # sums and means of floats (``_sum_or_mean``); prod/amax/amin and integer means (a floor division) stay
    # ATen calls
    if reduce not in ("sum", "mean") or not x.dtype.is_floating_point or x.ndim == 0:
        return P.aten_extern(aten.scatter_reduce.two, (x, dim, index, src, reduce),
                             {"include_self": include_self})
    d = canonical_dim(dim, x.ndim)

    def write(t: Any, v: Any, add: bool) -> Any:
        return P.scatter_add(t, d, index, v) if add else P.scatter(t, d, index, v)
    return _sum_or_mean(x, src, reduce, include_self, tuple(index.shape), write)


@register_decomposition(aten.index_add.default)
def _index_add(x: Any, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Any:
    # x[..., index[k], ...] += alpha * source[..., k, ...]: an index_put over dim with the others whole
    d = canonical_dim(dim, x.ndim)
    if x.ndim == 0:
        return P.aten_extern(aten.index_add.default, (x, dim, index, source), {"alpha": alpha})
    src = source if alpha == 1 else P.mul(source, alpha)
    return P.index_put(x, [None] * d + [P.reshape(index, (prod(index.shape),))], to(src, x.dtype), True)


@register_decomposition(aten.index_reduce.default)
def _index_reduce(x: Any, dim: int, index: Any, source: Any, reduce: str, *,
                  include_self: bool = True) -> Any:
    # means of floats by index_put adds (``_sum_or_mean``); prod, amax and amin stay ATen calls
    k = prod(index.shape)
    if reduce != "mean" or not x.dtype.is_floating_point or x.ndim == 0 or k == 0:
        return P.aten_extern(aten.index_reduce.default, (x, dim, index, source, reduce),
                             {"include_self": include_self})
    d = canonical_dim(dim, x.ndim)
    pos = [None] * d + [P.reshape(index, (k,))]
    return _sum_or_mean(x, source, reduce, include_self, (*x.shape[:d], k, *x.shape[d + 1:]),
                        lambda t, v, add: P.index_put(t, pos, v, add))


@register_decomposition(aten.index_copy.default)
def _index_copy(x: Any, dim: int, index: Any, source: Any) -> Any:
    d = canonical_dim(dim, x.ndim)
    if x.ndim == 0:
        return P.aten_extern(aten.index_copy.default, (x, dim, index, source), {})
    return P.index_put(x, [None] * d + [P.reshape(index, (prod(index.shape),))], to(source, x.dtype), False)


@register_decomposition(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def _index_fill(x: Any, dim: int, index: Any, value: Any) -> Any:
    # x's slices index[k] along dim take the value: an index_put of the value broadcast over those slices
    k = prod(index.shape)
    if x.ndim == 0 or k == 0:
        op = aten.index_fill.int_Tensor if is_tensorlike(value) else aten.index_fill.int_Scalar
        return P.aten_extern(op, (x, dim, index, value), {})
    d = canonical_dim(dim, x.ndim)
    shape = (*x.shape[:d], k, *x.shape[d + 1:])
    vals = (broadcast_to(to(value, x.dtype), shape) if is_tensorlike(value)
            else P.full(shape, value, x.dtype, x.device))
    return P.index_put(x, [None] * d + [P.reshape(index, (k,))], vals, False)


@register_decomposition(aten.index_select.default)
def _index_select(x: Any, dim: int, index: Any) -> Any:
    return P.index_select(x, canonical_dim(dim, x.ndim), index)


@register_decomposition(aten.index.Tensor)
def _index(x: Any, indices: Sequence[Any]) -> Any:
    return P.index(x, list(indices))


@register_decomposition(aten.index_put.default)
def _index_put(x: Any, indices: Sequence[Any], values: Any, accumulate: bool = False) -> Any:
    return P.index_put(x, list(indices), to(values, x.dtype), accumulate)


# backward ops of activations ------------------------------------------------------------------------------
def _bwd(fn: Any) -> Any:
    """fn(grad_f, other_f, *rest) in op-math dtype; result in grad's dtype. Both operands broadcast to their
    common shape, as ATen's kernels do (torch.func's batching rules call ``tanh_backward(g[B, n], y[n])``)."""
    def wrapped(grad: Any, other: Any, *args: Any, **kwargs: Any) -> Any:
        g, o = broadcast_all(opmath(grad), opmath(other))
        return to(fn(g, o, *args, **kwargs), grad.dtype)
    return wrapped


@register_decomposition(aten.threshold_backward.default)
@_bwd
def _threshold_backward(g: Any, x: Any, threshold: Any) -> Any:
    return where(P.le(x, float(threshold)), 0.0, g)


@register_decomposition(aten.tanh_backward.default)
@_bwd
def _tanh_backward(g: Any, y: Any) -> Any:
    return P.mul(g, P.sub(P.full(tuple(y.shape), 1.0, y.dtype, y.device), P.mul(y, y)))


@register_decomposition(aten.sigmoid_backward.default)
@_bwd
def _sigmoid_backward(g: Any, y: Any) -> Any:
    return P.mul(P.mul(g, y), P.sub(P.full(tuple(y.shape), 1.0, y.dtype, y.device), y))


@register_decomposition(aten.silu_backward.default)
@_bwd
def _silu_backward(g: Any, x: Any) -> Any:
    s = P.sigmoid(x)
    one = P.full(tuple(x.shape), 1.0, x.dtype, x.device)
    return P.mul(P.mul(g, s), P.add(one, P.mul(x, P.sub(one, s))))


@register_decomposition(aten.gelu_backward.default)
@_bwd
def _gelu_backward(g: Any, x: Any, approximate: str = "none") -> Any:
    if approximate == "tanh":
        k, c = math.sqrt(2 / math.pi), 0.044715
        x2 = P.mul(x, x)
        inner = P.mul(P.add(x, P.mul(P.mul(x2, x), c)), k)
        t = P.tanh(inner)
        one = P.full(tuple(x.shape), 1.0, x.dtype, x.device)
        dt = P.mul(P.sub(one, P.mul(t, t)), P.mul(P.add(one, P.mul(x2, 3 * c)), k))
        return P.mul(g, P.add(P.mul(P.add(t, 1.0), 0.5), P.mul(P.mul(x, 0.5), dt)))
    cdf = P.mul(P.add(P.erf(P.mul(x, 1 / math.sqrt(2))), 1.0), 0.5)
    pdf = P.mul(P.exp(P.mul(P.mul(x, x), -0.5)), 1 / math.sqrt(2 * math.pi))
    return P.mul(g, P.add(cdf, P.mul(x, pdf)))


@register_decomposition(aten.leaky_relu_backward.default)
@_bwd
def _leaky_relu_backward(g: Any, x: Any, negative_slope: Any, self_is_result: bool) -> Any:
    return P.where(P.gt(x, 0.0), g, P.mul(g, float(negative_slope)))


@register_decomposition(aten.hardtanh_backward.default)
@_bwd
def _hardtanh_backward(g: Any, x: Any, min_val: Any, max_val: Any) -> Any:
    out = P.logical_or(P.le(x, float(min_val)), P.ge(x, float(max_val)))
    return where(out, 0.0, g)


@register_decomposition(aten.log_sigmoid_forward.default)
def _log_sigmoid_forward(x: Any) -> Any:
    """``min(x, 0) - log1p(exp(-|x|))``, and the buffer ATen's CPU kernel fills for its backward: empty here,
    as CUDA's is (the backward below recomputes from ``x``), so the graph's layout holds on every device."""
    xf = opmath(x)
    out = P.sub(P.minimum(xf, 0.0), P.log1p(P.exp(P.neg(P.abs(xf)))))
    return to(out, x.dtype), P.full((0,), 0.0, x.dtype, x.device)


@register_decomposition(aten.log_sigmoid_backward.default)
@_bwd
def _log_sigmoid_backward(g: Any, x: Any, buffer: Any) -> Any:
    """``g * sigmoid(-x)`` as ATen computes it: ``where(x < 0, 1, z) / (1 + z)`` with ``z = exp(-|x|)``."""
    z = P.exp(P.neg(P.abs(x)))
    return P.div(P.mul(g, where(P.lt(x, 0.0), 1.0, z)), P.add(z, 1.0))


@register_decomposition(aten.softplus_backward.default)
@_bwd
def _softplus_backward(g: Any, x: Any, beta: Any, threshold: Any) -> Any:
    bx = P.mul(x, float(beta))
    z = P.exp(bx)
    return P.where(P.gt(bx, float(threshold)), g, P.div(P.mul(g, z), P.add(z, 1.0)))
