"""ember's closed set of primitives (part 2: views/movement, indexing, RNG, externs).

View prims (``broadcast_in_dim``, ``permute``, ``squeeze``, ``unsqueeze``, ``slice``, ``as_strided``) have meta
rules that compute strides from the input's strides; movement prims (``reshape``, ``cat``, ``pad``, ``flip``,
``clone``) produce contiguous results. RNG prims ``uniform``/``normal`` are pure functions of an explicit
``(seed, offset)``; ``bernoulli``/``native_dropout_mask`` (what the default decompositions use) draw from
torch's generator in program order with ATen's kernels, on a tensor laid out as eager's (``order``), so seeded
programs reproduce eager's masks and leave the generator in eager's state. They are tagged ``stateful``: dead
code elimination keeps them (``core.is_impure_node``) even when nothing reads their result, as eager draws.
``mm``/``bmm``/``addmm``/``convolution``/``sdpa`` are extern kernels; ``aten_extern`` runs any ATen op that has
no decomposition (its meta rule runs the op's meta-device kernel and needs concrete sizes).
"""
from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch

from ember.shapes import SymbolicUnsupported, active_table

from .core import PRIMS, register_prim
from .meta import (TensorMeta, broadcast_shapes, cdiv, fdiv, is_one,
                   is_tensorlike, meta_of, prod, same, strides_of)


# views --------------------------------------------------------------------------------------------------
def _bid_meta(x: Any, shape: Sequence, broadcast_dims: Sequence[int]) -> TensorMeta:
    shape = tuple(shape)
    if len(broadcast_dims) != x.ndim:
        raise ValueError("ember.decomp: broadcast_in_dim needs one broadcast dim per input dim")
    xs, st = tuple(x.shape), strides_of(x)
    stride: list = [0] * len(shape)
    for i, d in enumerate(broadcast_dims):
        if not (is_one(xs[i]) or same(xs[i], shape[d])):
            raise ValueError(f"ember.decomp: broadcast_in_dim cannot broadcast {list(xs)} to {list(shape)}")
        stride[d] = 0 if is_one(xs[i]) and not is_one(shape[d]) else st[i]
    return TensorMeta(shape, x.dtype, x.device, tuple(stride))


def _bid_impl(x: torch.Tensor, shape: Sequence, broadcast_dims: Sequence[int]) -> torch.Tensor:
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dims):
        view[d] = x.shape[i]
    return x.reshape(view).expand(tuple(shape))


def _reshape_meta(x: Any, shape: Sequence) -> TensorMeta:
    shape = tuple(shape)
    n_in, n_out = prod(x.shape), prod(shape)
    if isinstance(n_in, int) and isinstance(n_out, int) and n_in != n_out:
        raise ValueError(f"ember.decomp: cannot reshape {list(x.shape)} to {list(shape)}")
    return TensorMeta(shape, x.dtype, x.device)


def _permute_meta(x: Any, perm: Sequence[int]) -> TensorMeta:
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"ember.decomp: {list(perm)} is not a permutation of {x.ndim} dims")
    st = strides_of(x)
    return TensorMeta(tuple(x.shape[p] for p in perm), x.dtype, x.device, tuple(st[p] for p in perm))


def _squeeze_meta(x: Any, dims: Sequence[int]) -> TensorMeta:
    st = strides_of(x)
    for d in dims:
        if not is_one(x.shape[d]):
            raise ValueError(f"ember.decomp: squeeze of dim {d} of size {x.shape[d]}")
    keep = [i for i in range(x.ndim) if i not in dims]
    return TensorMeta(tuple(x.shape[i] for i in keep), x.dtype, x.device, tuple(st[i] for i in keep))


def _squeeze_impl(x: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    return x.squeeze(tuple(dims)) if dims else x.view(x.shape)


def _unsqueeze_meta(x: Any, dim: int) -> TensorMeta:
    shape, st = list(x.shape), list(strides_of(x))
    inner = st[dim] * shape[dim] if dim < len(shape) else 1
    shape.insert(dim, 1)
    st.insert(dim, inner)
    return TensorMeta(tuple(shape), x.dtype, x.device, tuple(st))


def _slice_meta(x: Any, dim: int, start: Any, end: Any, step: int = 1) -> TensorMeta:
    shape, st = list(x.shape), list(strides_of(x))
    shape[dim] = cdiv(end - start, step) if not (isinstance(end, int) and isinstance(start, int)) \
        else max(0, cdiv(end - start, step))
    st[dim] = st[dim] * step
    return TensorMeta(tuple(shape), x.dtype, x.device, tuple(st))


def _slice_impl(x: torch.Tensor, dim: int, start: int, end: int, step: int = 1) -> torch.Tensor:
    return x[(slice(None),) * dim + (slice(start, end, step),)]


def _same_view_meta(x: Any) -> TensorMeta:
    return TensorMeta(x.shape, x.dtype, x.device, strides_of(x))


def _as_strided_meta(x: Any, size: Sequence, stride: Sequence, offset: Any = 0) -> TensorMeta:
    return TensorMeta(tuple(size), x.dtype, x.device, tuple(stride))


register_prim("broadcast_in_dim", _bid_impl, _bid_meta, "view")
register_prim("permute", lambda x, perm: x.permute(tuple(perm)), _permute_meta, "view")
register_prim("squeeze", _squeeze_impl, _squeeze_meta, "view")
register_prim("unsqueeze", lambda x, dim: x.unsqueeze(dim), _unsqueeze_meta, "view")
register_prim("slice", _slice_impl, _slice_meta, "view")
# the same values in the same memory, without autograd history (prims live below autograd: a ``view_of`` output
# of a graph run inside an autograd.Function must not become an autograd view of another output)
register_prim("view_of", lambda x: x.detach(), _same_view_meta, "view")
register_prim("as_strided", lambda x, size, stride, offset=0: torch.as_strided(x, size, stride, offset),
              _as_strided_meta, "view")


# movement -------------------------------------------------------------------------------------------------
def _cat_meta(tensors: Sequence[Any], dim: int) -> TensorMeta:
    t0 = tensors[0]
    size: Any = 0
    for t in tensors:
        if t.dtype != t0.dtype or t.ndim != t0.ndim:
            raise TypeError("ember.decomp: cat needs tensors of one dtype and rank")
        size = size + t.shape[dim]
    shape = list(t0.shape)
    shape[dim] = size
    return TensorMeta(tuple(shape), t0.dtype, t0.device)


def _pad_meta(x: Any, pads: Sequence[tuple], value: Any) -> TensorMeta:
    return TensorMeta(tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, pads)), x.dtype, x.device)


def _pad_impl(x: torch.Tensor, pads: Sequence[tuple], value: Any) -> torch.Tensor:
    flat: list[int] = []
    for lo, hi in reversed(list(pads)):
        flat += [lo, hi]
    return torch.constant_pad_nd(x, flat, value)


def _same_meta(x: Any, *args: Any) -> TensorMeta:
    return TensorMeta(x.shape, x.dtype, x.device)


register_prim("reshape", lambda x, shape: x.reshape(tuple(shape)).clone(), _reshape_meta, "movement")
register_prim("cat", lambda tensors, dim: torch.cat(list(tensors), dim), _cat_meta, "movement")
register_prim("pad", _pad_impl, _pad_meta, "movement")
register_prim("flip", lambda x, dims: torch.flip(x, tuple(dims)), _same_meta, "movement")
PRIMS["rev"] = PRIMS["flip"]
register_prim("clone", lambda x: x.clone(memory_format=torch.contiguous_format), _same_meta, "movement")


# gather / scatter / index -------------------------------------------------------------------------------
def _gather_meta(x: Any, dim: int, index: Any) -> TensorMeta:
    return TensorMeta(index.shape, x.dtype, x.device)


def _scatter_meta(x: Any, dim: int, index: Any, src: Any) -> TensorMeta:
    if src.dtype != x.dtype:
        raise TypeError("ember.decomp: scatter needs src of the input's dtype")
    return TensorMeta(x.shape, x.dtype, x.device)


def _index_select_meta(x: Any, dim: int, index: Any) -> TensorMeta:
    shape = list(x.shape)
    if x.ndim:
        shape[dim] = prod(index.shape)
    return TensorMeta(tuple(shape), x.dtype, x.device)


def _index_meta(x: Any, indices: Sequence[Any]) -> TensorMeta:
    idx = list(indices) + [None] * (x.ndim - len(indices))
    adv = [i for i, t in enumerate(idx) if t is not None]
    bshape = broadcast_shapes(*[idx[i].shape for i in adv])
    contiguous = adv == list(range(adv[0], adv[-1] + 1))
    rest = [x.shape[i] for i, t in enumerate(idx) if t is None]
    if contiguous:
        before = [x.shape[i] for i in range(adv[0])]
        after = [x.shape[i] for i in range(adv[-1] + 1, x.ndim)]
        shape = before + list(bshape) + after
    else:
        shape = list(bshape) + rest
    return TensorMeta(tuple(shape), x.dtype, x.device)


def _index_put_meta(x: Any, indices: Sequence[Any], values: Any, accumulate: bool = False) -> TensorMeta:
    if values.dtype != x.dtype:
        raise TypeError("ember.decomp: index_put needs values of the input's dtype")
    return TensorMeta(x.shape, x.dtype, x.device)


register_prim("gather", lambda x, dim, index: torch.gather(x, dim, index), _gather_meta, "index")
register_prim("scatter", lambda x, dim, index, src: torch.scatter(x, dim, index, src), _scatter_meta, "index")
register_prim("scatter_add", lambda x, dim, index, src: torch.scatter_add(x, dim, index, src),
              _scatter_meta, "index")
register_prim("index_select", lambda x, dim, index: torch.index_select(x, dim, index),
              _index_select_meta, "index")
register_prim("index", lambda x, indices: torch.ops.aten.index.Tensor(x, list(indices)), _index_meta,
              "index")
register_prim("index_put", lambda x, indices, values, accumulate=False:
              torch.ops.aten.index_put.default(x, list(indices), values, accumulate), _index_put_meta, "index")


# RNG: pure functions of (seed, offset) -----------------------------------------------------------------
def _generator(seed: Any, offset: int, device: Any) -> torch.Generator:
    g = torch.Generator(device=torch.device(device))
    g.manual_seed((int(seed) * 1_000_003 + int(offset)) % (2 ** 63))
    return g


def _uniform_impl(shape: Sequence, low: float, high: float, dtype: torch.dtype, device: Any,
                  seed: Any, offset: int) -> torch.Tensor:
    u = torch.rand(tuple(shape), generator=_generator(seed, offset, device), dtype=torch.float32,
                   device=device)
    return (u * (high - low) + low).to(dtype)


def _normal_impl(shape: Sequence, mean: float, std: float, dtype: torch.dtype, device: Any,
                 seed: Any, offset: int) -> torch.Tensor:
    n = torch.randn(tuple(shape), generator=_generator(seed, offset, device), dtype=torch.float32,
                    device=device)
    return (n * std + mean).to(dtype)


def _rng_meta(shape: Sequence, a: Any, b: Any, dtype: torch.dtype, device: Any, seed: Any,
              offset: int) -> TensorMeta:
    return TensorMeta(tuple(shape), dtype, device)


def _seed_impl(device: Any = "cpu") -> torch.Tensor:
    return torch.randint(0, 2 ** 62, (), dtype=torch.int64).to(device)


def _empty_in_order(shape: Sequence, dtype: torch.dtype, device: Any,
                    order: Sequence[int] | None) -> torch.Tensor:
    """An empty tensor whose dims lie in memory in ``order`` (outermost first; None: row-major)."""
    if order is None:
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    t = torch.empty([shape[d] for d in order], dtype=dtype, device=device)
    return t.permute(sorted(range(len(order)), key=lambda d: order[d]))


# ATen's random kernels fill a tensor in its memory order (CPU) or pick their kernel by its layout (CUDA's
# fused dropout), so the values a position gets depend on the strides of the tensor eager allocates
# (``empty_like`` of the input: its layout). ``order`` gives that layout; the result is returned row-major, as
# the meta says.
def _bernoulli_impl(shape: Sequence, p: float, dtype: torch.dtype, device: Any,
                    order: Sequence[int] | None = None) -> torch.Tensor:
    return _empty_in_order(shape, dtype, device, order).bernoulli_(p).contiguous()


def _dropout_mask_impl(shape: Sequence, p: float, dtype: torch.dtype, device: Any,
                       order: Sequence[int] | None = None) -> torch.Tensor:
    # the mask eager's native_dropout draws (fused philox kernel on CUDA, bernoulli_ on CPU) does not depend
    # on the input's values, only on its shape, layout, dtype and the generator's state
    x = _empty_in_order(shape, dtype, device, order)
    return torch.ops.aten.native_dropout.default(x, p, True)[1].contiguous()


def _bernoulli_meta(shape: Sequence, p: float, dtype: torch.dtype, device: Any,
                    order: Sequence[int] | None = None) -> TensorMeta:
    return TensorMeta(tuple(shape), dtype, device)


def _dropout_mask_meta(shape: Sequence, p: float, dtype: torch.dtype, device: Any,
                       order: Sequence[int] | None = None) -> TensorMeta:
    return TensorMeta(tuple(shape), torch.bool, device)


register_prim("uniform", _uniform_impl, _rng_meta, "rng")
register_prim("normal", _normal_impl, _rng_meta, "rng")
register_prim("rng_seed", _seed_impl, lambda device="cpu": TensorMeta((), torch.int64, device), "rng",
              tags=("stateful",))
# Draws from torch's generator of ``device``, in program order, the way eager's kernels do, so a seeded program
# gives eager's numbers (the partitioner never recomputes RNG prims, so each runs once per step).
register_prim("bernoulli", _bernoulli_impl, _bernoulli_meta, "rng", tags=("stateful",))
register_prim("native_dropout_mask", _dropout_mask_impl, _dropout_mask_meta, "rng", tags=("stateful",))


# externs --------------------------------------------------------------------------------------------------
def _mm_meta(a: Any, b: Any) -> TensorMeta:
    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or not same(a.shape[1], b.shape[0]):
        raise ValueError(f"ember.decomp: mm of {list(a.shape)} {a.dtype} and {list(b.shape)} {b.dtype}")
    return TensorMeta((a.shape[0], b.shape[1]), a.dtype, a.device)


def _bmm_meta(a: Any, b: Any) -> TensorMeta:
    if a.ndim != 3 or b.ndim != 3 or a.dtype != b.dtype or not same(a.shape[2], b.shape[1]):
        raise ValueError(f"ember.decomp: bmm of {list(a.shape)} and {list(b.shape)}")
    return TensorMeta((a.shape[0], a.shape[1], b.shape[2]), a.dtype, a.device)


def _addmm_meta(bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> TensorMeta:
    return _mm_meta(a, b)


def _conv_meta(x: Any, w: Any, bias: Any, stride: Sequence, padding: Sequence, dilation: Sequence,
               transposed: bool, output_padding: Sequence, groups: int) -> TensorMeta:
    spatial = []
    for i in range(x.ndim - 2):
        n, k = x.shape[i + 2], w.shape[i + 2]
        if transposed:
            spatial.append((n - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k - 1)
                           + output_padding[i] + 1)
        else:
            spatial.append(fdiv(n + 2 * padding[i] - dilation[i] * (k - 1) - 1, stride[i]) + 1)
    cout = w.shape[1] * groups if transposed else w.shape[0]
    return TensorMeta((x.shape[0], cout, *spatial), x.dtype, x.device)


def _sdpa_meta(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
               is_causal: bool = False, scale: Any = None) -> TensorMeta:
    return TensorMeta((*q.shape[:-1], v.shape[-1]), q.dtype, q.device)


def _sdpa_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Any = None,
               dropout_p: float = 0.0, is_causal: bool = False, scale: Any = None) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal,
                                                            scale=scale)


def _to_meta_tensor(x: Any) -> Any:
    """A meta tensor for ``x`` (an ATen call's metadata); symbolic sizes become ``torch.SymInt``s over the
    active symbol table, so the op's meta kernel computes symbolic output sizes."""
    if is_tensorlike(x):
        return torch.empty_strided(tuple(_meta_size(s) for s in x.shape), tuple(_meta_size(s) for s in strides_of(x)),
                                   dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_to_meta_tensor(a) for a in x)
    return _meta_size(x) if isinstance(x, sympy.Expr) else x


def _meta_size(s: Any) -> Any:
    if isinstance(s, sympy.Expr) and s.free_symbols:
        table = active_table()
        if table is None:
            raise SymbolicUnsupported(f"ember.decomp: symbolic size {s} outside a symbolic compile")
        return table.symint(s)
    return int(s)


def _from_meta_tensor(x: Any, device: Any) -> Any:
    if isinstance(x, torch.Tensor):
        m = meta_of(x)          # symbolic sizes back to sympy expressions
        return TensorMeta(m.shape, x.dtype, device, m.stride)
    if isinstance(x, (list, tuple)):
        return type(x)(_from_meta_tensor(a, device) for a in x)
    return x


def _extern_device(args: tuple, kwargs: dict) -> torch.device:
    """The device eager puts an ATen op's result on: its ``device=`` (``_to_copy(x, device="cuda")``), else its
    first tensor's that is not a 0-dim CPU tensor (a scalar next to CUDA tensors), else its first tensor's."""
    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    tensors = [a for a in args if is_tensorlike(a)]
    for t in tensors:
        if not (torch.device(t.device).type == "cpu" and len(t.shape) == 0):
            return torch.device(t.device)
    return torch.device(tensors[0].device) if tensors else torch.device("cpu")


def _extern_meta(op: Any, args: tuple, kwargs: dict | None = None) -> Any:
    device = _extern_device(args, kwargs or {})
    margs, mkwargs = _to_meta_tensor(tuple(args)), {k: _to_meta_tensor(v) for k, v in (kwargs or {}).items()}
    if active_table() is None:
        return _from_meta_tensor(op(*margs, **mkwargs), device)
    # symbolic sizes: PyTorch's meta kernels of composite ops (expand, cumsum...) handle SymInts only through
    # their Python registrations, which the Python dispatcher selects
    from torch._dispatch.python import enable_python_dispatcher
    with enable_python_dispatcher():
        return _from_meta_tensor(op(*margs, **mkwargs), device)


register_prim("mm", torch.mm, _mm_meta, "extern")
register_prim("bmm", torch.bmm, _bmm_meta, "extern")
register_prim("addmm", lambda bias, a, b, beta=1, alpha=1: torch.addmm(bias, a, b, beta=beta, alpha=alpha),
              _addmm_meta, "extern")
# ``torch.convolution`` is ``aten.convolution.default`` through the Python bindings' argument parser: on an H100
# host it costs 27 us per call against 35 us through ``torch.ops`` (schema-boxed), ``bench/conv_host.py (in git history)``.
register_prim("convolution", torch.convolution, _conv_meta, "extern")
register_prim("sdpa", _sdpa_impl, _sdpa_meta, "extern")
register_prim("aten_extern", lambda op, args, kwargs=None: op(*args, **(kwargs or {})), _extern_meta,
              "extern")
