"""In-place writes whose destination overlaps a source, or itself, in memory: what eager does with them.

Input: one ATen call (``OpOverload``, args, kwargs) whose tensors are meta or fake tensors laid out as eager's
(views share their base's storage). Output of ``check_writes``: None when the call computes what its
functional form computes; ``ORDER`` when eager's result depends on the order its loop visits elements (the
destination overlaps a source but not element for element: ``x[:, 1:].add_(x[:, :1])``, or an op other than a
fill writes an expanded destination: ``t.expand(3, 4).masked_fill_(mask, 1)``); or eager's own
``RuntimeError`` raised ("unsupported operation: some elements of the input tensor and the written-to tensor
refer to a single memory location", or "more than one element of the written-to tensor ...").

Eager's checks differ per op (``fill_`` accepts an expanded destination, ``add_`` refuses it, a dense partial
overlap raises where a strided one is computed in loop order), so they are not restated here: the call is
replayed on small real tensors with the same layouts over shared zero-filled storages, and what it raises is
eager's answer. That replay happens only when two tensor arguments share a storage or the destination has a
stride-0 or overlapping layout (the common case costs one storage comparison per argument), and only when
tracing, never per call.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils._python_dispatch import _disable_current_modes

ORDER = "order"
MAX_REPLAY_BYTES = 1 << 26       # storages larger than this are not replayed (no check: the functional result)
_EAGER_MESSAGE = "unsupported operation"


# ops that write the same value at every position, so a destination whose elements share memory (an expanded
# tensor, which eager lets them fill) gets a result that does not depend on the order of eager's loop
_UNIFORM_WRITES = frozenset({torch.ops.aten.fill_.Scalar, torch.ops.aten.fill_.Tensor, torch.ops.aten.zero_.default})


def _meta(t: torch.Tensor) -> torch.Tensor:
    return getattr(t, "_meta", t)


def _static(t: torch.Tensor) -> bool:
    return all(type(v) is int for v in (*t.shape, *t.stride(), t.storage_offset()))


def _storage(t: torch.Tensor) -> int:
    return _meta(t).untyped_storage()._cdata


def written_tensors(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors ``func`` writes: its schema's mutable (``Tensor(a!)``) arguments."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return []
    out = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            v = kwargs.get(a.name, args[i] if i < len(args) and not a.kwarg_only else None)
            out += [t for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor)]
    return out


def _self_overlapping(t: torch.Tensor) -> bool:
    m = _meta(t)
    return any(s == 0 and n > 1 for n, s in zip(m.shape, m.stride()))


def self_overlapping_layout(shape: Any, stride: Any) -> bool:
    """Whether two elements of a tensor of this layout share a memory location (an expanded value: a stride-0
    dim of size > 1, or strides that step inside another dim). Such a layout can be read, never stored into as
    a whole, so a buffer that ember allocates or copies into (a tangent, a functional op's result) must not
    take it. Symbolic layouts count only their literal 0 strides."""
    dims = [(n, s) for n, s in zip(shape, stride) if not (type(n) is int and n == 1)]
    if any(type(s) is int and s == 0 and not (type(n) is int and n == 0) for n, s in dims):
        return True
    if not all(type(n) is int and type(s) is int for n, s in dims) or any(n == 0 for n, _ in dims):
        return False
    extent = 1
    for n, s in sorted(dims, key=lambda d: abs(d[1])):
        if abs(s) < extent:
            return True
        extent = abs(s) * n
    return False


def may_overlap(tensors: list[torch.Tensor], written: list[torch.Tensor] | None = None) -> bool:
    """Cheap precheck: two of ``tensors`` share a storage, or one of ``written`` (default: any of
    ``tensors``) has a stride-0 dimension of size > 1."""
    seen = set()
    for t in tensors:
        if t.layout is not torch.strided or t.is_sparse:
            continue
        k = _storage(t)
        if k in seen:
            return True
        seen.add(k)
    return any(map(_self_overlapping, tensors if written is None else written))


def check_writes(func: Any, args: tuple, kwargs: dict) -> str | None:
    """See the module docstring. Raises eager's ``RuntimeError`` for an overlap eager refuses."""
    written = written_tensors(func, args, kwargs)
    if not written:
        return None
    tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    if not may_overlap(tensors, written) or not all(map(_static, tensors)):
        return None
    _replay(func, args, kwargs, tensors)
    if func not in _UNIFORM_WRITES and any(map(_self_overlapping, written)):
        return ORDER        # e.g. masked_fill_ on an expanded tensor: each location keeps one of its writes
    for w in written:
        for r in tensors:
            if r is not w and _storage(r) == _storage(w) and _order_dependent(_meta(w), _meta(r)):
                return ORDER
    return None


def _replay(func: Any, args: tuple, kwargs: dict, tensors: list[torch.Tensor]) -> None:
    """Run ``func`` on real CPU tensors laid out like ``tensors`` (shared storages stay shared); re-raise
    eager's overlap error. Everything here runs with the tracing modes off (a factory call under the fake
    mode would make a fake tensor)."""
    need: dict[int, int] = {}       # bytes each storage must hold: its own size, and every view's extent
    for t in tensors:
        m = _meta(t)
        k = _storage(t)
        end = (m.storage_offset() + sum((n - 1) * s for n, s in zip(m.shape, m.stride())) + 1) * m.element_size()
        need[k] = max(need.get(k, 0), m.untyped_storage().nbytes(), end if m.numel() else 0)
    if max(need.values(), default=0) > MAX_REPLAY_BYTES:
        return

    def real(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        m = _meta(x)
        return torch.empty(0, dtype=m.dtype, device="cpu").set_(storages[_storage(x)], m.storage_offset(),
                                                                  m.shape, m.stride())
    with _disable_current_modes():
        storages = {k: torch.zeros(n, dtype=torch.uint8, device="cpu").untyped_storage() for k, n in need.items()}
        rargs, rkwargs = tree_map(real, (tuple(args), dict(kwargs)))
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                func(*rargs, **rkwargs)
        except RuntimeError as e:
            if str(e).startswith(_EAGER_MESSAGE):
                raise RuntimeError(str(e)) from None
        except Exception:       # noqa: BLE001 - anything else is the meta run's business, not an overlap
            pass


def _offsets(t: torch.Tensor) -> torch.Tensor:
    """The byte offset in its storage of each element of ``t`` (same shape as ``t``)."""
    span = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0) + 1
    return torch.arange(max(span, 1), dtype=torch.int64, device="cpu").as_strided(t.shape, t.stride(), t.storage_offset()) \
        * t.element_size()


def _order_dependent(w: torch.Tensor, r: torch.Tensor) -> bool:
    """Whether some element of ``r`` is a memory location that ``w`` writes at another position than the one
    reading it (so eager's result depends on which it visits first)."""
    if w.numel() == 0 or r.numel() == 0:
        return False
    with _disable_current_modes():
        wo, ro = _offsets(w), _offsets(r)
        if not set(ro.flatten().tolist()) & set(wo.flatten().tolist()):
            return False
        try:
            ro = ro.expand(w.shape)
        except RuntimeError:            # not a broadcast of the destination (an index, a scatter's source)
            return True
        flat_w = wo.flatten()
        if flat_w.unique().numel() != flat_w.numel():
            return True                 # the destination writes a location twice
        owner = torch.full((int(max(flat_w.max(), ro.max())) + 1,), -1, dtype=torch.int64, device="cpu")
        owner[flat_w] = torch.arange(flat_w.numel(), device="cpu")
        got = owner[ro.flatten()]
        return bool(((got >= 0) & (got != torch.arange(got.numel(), device="cpu"))).any())
