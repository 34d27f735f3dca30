"""Graph inputs that share memory (``f(x, x)``, ``f(x, x[0])``, a buffer and its view): synthetic bases.

Input: the flat inputs of one call. Output: ``alias_groups`` (which tensor inputs share a storage) and, for a
graph that mutates one of them, a ``SyntheticBases`` that traces and runs the graph on one base tensor per
group (the whole storage, 1-D) from which each member is rebuilt inside the graph as an ``as_strided`` view.

Invariants:
- Fake conversion is memoized by identity and by storage (``fake.FakeMode``), so the trace already sees
  aliasing inputs as views of one storage; what a graph of independent placeholders cannot express is a
  mutation through one input that another input must see. With the members rebuilt as views of one base,
  functionalization updates the base and replays every other member's view on the new value, and the write-back
  copies the base into the real storage, so every alias sees the mutation, as in eager.
- Only groups with a mutated member are rebuilt; reads through aliases need nothing.
- A group whose members require grad, or differ in dtype, is refused (``AotError``): the graph then runs as
  captured, with eager autograd (correct, not optimized).
- The aliasing pattern of the inputs is part of the variant key of a graph that mutates inputs, so a call with
  another pattern (``f(x, x)`` after ``f(x, y)``) builds its own variant.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch.utils._python_dispatch import _disable_current_modes as _no_modes



def alias_groups(flat: Sequence[Any]) -> tuple[tuple[int, ...], ...]:
    """Groups (two or more) of tensor input indices whose storages are the same.

    Paid on every call of a graph that mutates inputs (an optimizer step passes hundreds of tensors): the
    common case, no two storages alike, is decided with C-level maps over the tensors."""
    T = torch.Tensor
    idx: Sequence[int] = range(len(flat))
    ts = flat
    try:
        try:
            ptrs = list(map(T.data_ptr, ts))    # every input a tensor (an optimizer step's lists): no filtering
        except TypeError:                       # some inputs are not tensors
            idx = [i for i, a in enumerate(flat) if isinstance(a, T)]
            ts = [flat[i] for i in idx]
            ptrs = list(map(T.data_ptr, ts))
        if any(map(T.storage_offset, ts)):
            ptrs = [p - o * e for p, o, e in zip(ptrs, map(T.storage_offset, ts), map(T.element_size, ts))]
        if len(set(ptrs)) == len(ptrs) and all(ptrs):
            return ()
    except RuntimeError:        # a tensor without data pointer (sparse): the general path below
        pass
    by_ptr: dict[int, list[int]] = {}
    strided = torch.strided
    for i in idx:
        a = flat[i]
        if a.layout is strided:
            # the storage's address without building a storage object (meta tensors give 0)
            ptr = a.data_ptr() - a.storage_offset() * a.element_size()
            if ptr:
                by_ptr.setdefault(ptr, []).append(i)
    return tuple(tuple(g) for g in by_ptr.values() if len(g) > 1)


def alias_key(flat: Sequence[Any]) -> tuple:
    """``alias_groups`` with each member's size, stride and offset in its storage: a graph built on
    synthetic bases rebuilds the members with the layouts of the call it was built for, so a call whose aliasing
    inputs sit elsewhere in their storage (``f(x, x[0])`` after ``f(x, x[1])``) needs its own variant."""
    return tuple((g, tuple((tuple(flat[i].shape), tuple(flat[i].stride()), flat[i].storage_offset()) for i in g))
                 for g in alias_groups(flat))


@dataclass
class SyntheticBases:
    """Calls with ``groups`` of aliasing inputs: the graph takes (non-members..., one base per group)."""

    groups: tuple[tuple[int, ...], ...]
    num_inputs: int
    layouts: dict[int, tuple[tuple[int, ...], tuple[int, ...], int]]

    @staticmethod
    def of(flat: Sequence[Any], groups: tuple[tuple[int, ...], ...]) -> "SyntheticBases":
        from ember.errors import AotError

        layouts = {}
        for g in groups:
            members = [flat[i] for i in g]
            if any(m.requires_grad for m in members):
                raise AotError("aot autograd: inputs that share memory, one of them mutated in place, and one of them "
                               "requiring grad are not supported yet (stage: autograd aliasing); the graph runs "
                               "with eager autograd. Pass a clone to avoid the aliasing.")
            if len({m.dtype for m in members}) > 1:
                raise AotError("aot autograd: inputs that share memory with different dtypes, one of them "
                               "mutated in place, are not supported (stage: autograd aliasing)")
            for i in g:
                t = flat[i]
                layouts[i] = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
        return SyntheticBases(groups, len(flat), layouts)

    def args(self, flat: Sequence[Any]) -> list[Any]:
        """The graph's inputs for this call: the non-members in order, then each group's base."""
        out = [a for i, a in enumerate(flat) if i not in self.layouts]
        for g in self.groups:
            t = flat[g[0]]
            n = t.untyped_storage().nbytes() // t.element_size()
            out.append(t.as_strided((n,), (1,), 0))
        return out

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` over the original inputs, as a function of ``args(flat)``."""
        n_rest = self.num_inputs - len(self.layouts)

        def with_bases(*new: Any) -> Any:
            rest, bases = list(new[:n_rest]), new[n_rest:]
            flat: list[Any] = [None] * self.num_inputs
            it = iter(rest)
            for i in range(self.num_inputs):
                if i not in self.layouts:
                    flat[i] = next(it)
            for g, base in zip(self.groups, bases):
                for i in g:
                    size, stride, offset = self.layouts[i]
                    flat[i] = base.as_strided(size, stride, offset)
            return fn(*flat)
        return with_bases



def output_views(vals: Sequence[Any], input_storages: set) -> list:
    """User outputs that are views of another user output (``t = x * 2; v = t[1]; return t, v``), as
    ``AliasInfo`` with ``base_layout`` set.

    ``vals`` are the trace's fake output values, where views share their base's storage. Generated code returns
    each output in its own buffer, so without this a caller that mutates ``v`` (the code after a graph break)
    would not see the change in ``t``. Per storage not owned by an input, the base is the largest output that is
    dense over one memory range; members within that range are rebuilt as views of it. Symbolic layouts are
    left alone."""
    from ember.autograd.runtime import AliasInfo

    groups: dict[int, list[int]] = {}
    for k, v in enumerate(vals):
        if isinstance(v, torch.Tensor) and hasattr(v, "_meta") and _static_layout(v._meta):
            key = v._meta.untyped_storage()._cdata
            if key not in input_storages:
                groups.setdefault(key, []).append(k)
    found = []
    for members in groups.values():
        if len(members) < 2:
            continue
        metas = [vals[k]._meta for k in members]
        dense = [k for k in members if _dense(vals[k]._meta)]
        if not dense or not all(_within(m, _extent(vals[max(dense, key=lambda k: vals[k]._meta.numel())]._meta))
                                for m in metas):
            # no dense member holds all the others (a scalar ``t[0]`` of a strided ``t = (x * 1)[:, 0]``)
            dense = _covering(metas, members) or dense
        if not dense:
            continue
        b = max(dense, key=lambda k: vals[k]._meta.numel())
        base = vals[b]._meta
        lo, hi = _extent(base)
        for k in members:
            m = vals[k]._meta
            if k == b or m.numel() == 0 or m.dtype != base.dtype:
                continue
            end = m.storage_offset() + sum((n - 1) * s for n, s in zip(m.shape, m.stride()))
            if lo <= m.storage_offset() and end < hi:
                found.append(AliasInfo(k, b, tuple(m.shape), tuple(m.stride()), m.storage_offset() - lo,
                                       bool(vals[k].requires_grad), (tuple(base.shape), tuple(base.stride()))))
    return found


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """The storage range ``[lo, hi)`` ``t``'s elements lie in."""
    lo = t.storage_offset()
    return lo, lo + 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))


def _within(t: torch.Tensor, extent: tuple[int, int]) -> bool:
    lo, hi = _extent(t)
    return t.numel() == 0 or (extent[0] <= lo and hi <= extent[1])


def _covering(metas: list, members: list[int]) -> list[int]:
    """When no member is dense (all are strided views of one intermediate: ``t = (x * 1)[:, :1].t()`` and
    ``t.squeeze(0)``), the members whose elements are distinct addresses that include every other member's
    (the returned buffer of such a base, in eager's strides, then holds the other members' elements too)."""
    def addresses(m: torch.Tensor) -> list[int]:
        span = m.storage_offset() + sum((n - 1) * st for n, st in zip(m.shape, m.stride())) + 1
        return torch.arange(span, device="cpu").as_strided(m.shape, m.stride(), m.storage_offset()).flatten().tolist()
    with _no_modes():
        sets = [addresses(m) for m in metas]
    return [k for k, a in zip(members, sets)
            if len(set(a)) == len(a) and all(set(o) <= set(a) for o in sets)]


def _static_layout(t: torch.Tensor) -> bool:
    return all(type(d) is int for d in (*t.shape, *t.stride(), t.storage_offset()))


def _dense(t: torch.Tensor) -> bool:
    """``t`` covers one contiguous range of its storage, each element once (any order of dimensions)."""
    if t.numel() == 0:
        return False
    expected = 1
    for n, s in sorted(((n, s) for n, s in zip(t.shape, t.stride()) if n != 1), key=lambda d: d[1]):
        if s != expected:
            return False
        expected *= n
    return True


def multi_output_views(gm: Any, num_outputs: int) -> frozenset:
    """User outputs (indices) of an unfunctionalized trace that eager returns as views made by an op with
    several view outputs (``split``, ``chunk``, ``unbind``), or views of such views: eager's autograd refuses
    to let the caller modify those in place, so the runtime keeps them as views of the custom Function's
    result, which autograd refuses the same way. Other view outputs are detached (``runtime._unviewed``)."""
    import operator

    from ember.autograd.functionalize import _is_view, _written_args

    out = next(n for n in gm.graph.nodes if n.op == "output")
    found = set()
    for k, node in enumerate(list(out.args[0])[:num_outputs]):
        seen = 0
        while hasattr(node, "op") and node.op == "call_function" and seen < 10_000:
            seen += 1
            t = node.target
            if t is operator.getitem:
                node = node.args[0]
                continue
            if _is_view(t) and isinstance(t._schema.returns[0].type, torch.ListType):
                found.add(k)
                break
            if _is_view(t) or any(i == 0 for i, _ in _written_args(t)):     # a view, or x.add_(...) -> x
                node = node.args[0]
                continue
            break
    return frozenset(found)
