"""Loop IR: buffers and the loop nests that compute them.

Input: a prim graph (see ``ember.decomp``) lowered by ``ember.loopir.lower``. Output of this module: a
``LoopGraph``, an ordered list of nodes, each producing named buffers:
- ``InputBuffer``: a graph input (placeholder), with the layout it was traced with.
- ``Pointwise``: ``buf[layout.index(x)] = body(x)`` for every ``x`` in ``ranges``.
- ``Reduction``: ``buf[layout.index(x)] = reduce_r body(x, r)`` over ``reduction_ranges``; ``reduce_type`` is
  one of ``REDUCTION_TYPES``.
- ``Scatter``: ``buf[index(x)] = body(x)`` (or ``+=``) for every ``x`` in ``ranges``, where ``index`` depends on
  loaded values (scatter, index_put, embedding backward); ``buf`` is the memory of ``target``, a buffer
  computed for this node alone (zeros, or a copy of the tensor scattered into).
- ``Extern``: an ATen call (matmul, convolution, attention, any op without a lowering) on whole buffers.
Views, broadcasts, slicing, concatenation and padding never appear as nodes: they are index arithmetic inside
bodies. Every buffer knows its shape, stride (elements), dtype and device; sizes are ints or sympy
expressions. ``LoopGraph.python()`` prints the graph as Python.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import sympy
import torch

from .expr import Expr, rvars, xvars

# "welford": the sum of squared deviations from the mean over the reduced points (Welford's M2), in one pass
REDUCTION_TYPES = ("sum", "prod", "amax", "amin", "any", "all", "welford")


def contiguous_stride(shape: Sequence[Any]) -> tuple:
    out, acc = [], 1
    for s in reversed(tuple(shape)):
        out.append(acc)
        acc = acc * s
    return tuple(reversed(out))


def same_size(a: Any, b: Any) -> bool:
    """Whether two sizes are equal for every value of their symbols: structurally, or after expanding (a stride
    ``8*floor(s3/2 - 1/2) + 8`` is the product ``8*(floor(s3/2 - 1/2) + 1)`` of the sizes inside it)."""
    if a == b:
        return True
    if not isinstance(a, sympy.Basic) and not isinstance(b, sympy.Basic):
        return False
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def prod(xs: Sequence[Any]) -> Any:
    out: Any = 1
    for x in xs:
        out = out * x
    return out


@dataclass(frozen=True)
class Layout:
    shape: tuple
    stride: tuple
    dtype: torch.dtype
    device: torch.device
    offset: Any = 0

    @staticmethod
    def contiguous(shape: Sequence[Any], dtype: torch.dtype, device: torch.device) -> "Layout":
        return Layout(tuple(shape), contiguous_stride(shape), dtype, torch.device(device))

    def index(self, idx: Sequence[sympy.Expr]) -> sympy.Expr:
        return self.offset + sum((i * s for i, s in zip(idx, self.stride) if s != 0), sympy.Integer(0))

    def is_contiguous(self) -> bool:
        return self.offset == 0 and all(same_size(st, c) for sz, st, c in
                                        zip(self.shape, self.stride, contiguous_stride(self.shape)) if sz != 1)

    def numel(self) -> Any:
        return prod(self.shape)

    def storage_size(self) -> Any:
        if any(s == 0 for s in self.shape):
            return 0
        return self.offset + 1 + sum((sz - 1) * st for sz, st in zip(self.shape, self.stride))

    def __repr__(self) -> str:
        off = f", offset={self.offset}" if self.offset else ""
        return f"{list(self.shape)}:{list(self.stride)}{off} {str(self.dtype).replace('torch.', '')}"


@dataclass
class Node:
    name: str
    layout: Layout

    @property
    def dtype(self) -> torch.dtype:
        return self.layout.dtype

    @property
    def device(self) -> torch.device:
        return self.layout.device

    def reads(self) -> set[str]:
        return set()


@dataclass
class InputBuffer(Node):
    position: int = 0

    def python(self) -> str:
        return f"{self.name} = input({self.position})  # {self.layout}"


class _Computed:
    """What loop nodes share: they read the buffers their body loads and store at ``layout.index(x)``."""
    body: Expr
    ranges: tuple
    layout: Layout

    def reads(self) -> set[str]:
        from .expr import loads
        return {ld.buf for ld in loads(self.body)}

    def store_index(self) -> sympy.Expr:
        return self.layout.index(xvars(len(self.ranges)))


@dataclass
class Pointwise(_Computed, Node):
    ranges: tuple = ()
    body: Expr = None  # type: ignore[assignment]

    def python(self) -> str:
        xs = ", ".join(map(str, xvars(len(self.ranges)))) or "_"
        return (f"{self.name} = pointwise({list(self.ranges)}, lambda {xs}: {self.body!r})  # {self.layout}")


@dataclass
class Reduction(_Computed, Node):
    ranges: tuple = ()
    reduction_ranges: tuple = ()
    reduce_type: str = "sum"
    body: Expr = None  # type: ignore[assignment]

    def python(self) -> str:
        xs = ", ".join(map(str, xvars(len(self.ranges)) + rvars(len(self.reduction_ranges))))
        return (f"{self.name} = reduction({self.reduce_type!r}, {list(self.ranges)}, "
                f"{list(self.reduction_ranges)}, lambda {xs}: {self.body!r})  # {self.layout}")


@dataclass
class Scatter(_Computed, Node):
    """For every ``x`` in ``ranges`` where ``mask`` holds: ``buf[index] = body(x)``, or ``buf[index] += body(x)``
    with ``accumulate``. ``binds`` are ``(symbol, value, extent)``: ``index`` (a sympy expression over ``x`` and
    the symbols) reads each symbol as the integer ``value(x)``, which lies in ``[0, extent)`` where ``mask``
    holds (``mask`` tests that, so an index out of range writes nothing). The node's buffer is the memory of
    ``target`` (a buffer no other node reads), holding the result once every point is written."""
    ranges: tuple = ()
    body: Expr = None  # type: ignore[assignment]
    target: str = ""
    binds: tuple = ()
    index: Any = 0
    mask: Any = None
    accumulate: bool = False

    def reads(self) -> set[str]:
        from .expr import loads
        out = {ld.buf for ld in loads(self.body)} | {self.target}
        for _, v, _ in self.binds:
            out |= {ld.buf for ld in loads(v)}
        return out

    def python(self) -> str:
        xs = ", ".join(map(str, xvars(len(self.ranges)))) or "_"
        binds = ", ".join(f"{s}={v!r}" for s, v, _ in self.binds)
        op = "+=" if self.accumulate else "="
        where = f" if {self.mask}" if self.mask is not None else ""
        return (f"{self.name} = scatter({self.target}, {list(self.ranges)}, lambda {xs}: ({binds}) -> "
                f"[{self.index}] {op} {self.body!r}{where})  # {self.layout}")


@dataclass
class Extern(Node):
    """``target(*args, **kwargs)`` on realized buffers; args hold ``BufferRef``s. Multi-output externs
    produce ``ExternOutput`` nodes that pick item ``index``; their own layout is then unused."""
    target: Any = None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    multi: bool = False
    fresh: bool = False       # returns a new tensor nothing else holds (mm, convolution): its memory may be reused
    op: str = ""              # the prim it runs ("mm", "addmm", "bmm", ...), when it is one

    def reads(self) -> set[str]:
        from torch.utils._pytree import tree_leaves
        return {a.name for a in tree_leaves((self.args, self.kwargs)) if isinstance(a, BufferRef)}

    def python(self) -> str:
        name = getattr(self.target, "__name__", str(self.target))
        kw = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        tail = "" if self.multi else f"  # {self.layout}"
        return f"{self.name} = extern({name}, {', '.join(map(repr, self.args))}{kw}){tail}"


@dataclass
class ExternOutput(Node):
    source: str = ""
    index: int = 0

    def reads(self) -> set[str]:
        return {self.source}

    def python(self) -> str:
        return f"{self.name} = {self.source}[{self.index}]  # {self.layout}"


@dataclass(frozen=True)
class BufferRef:
    """A whole buffer passed to an extern (seen through ``layout``, which may be a view of it)."""
    name: str
    layout: Layout

    def __repr__(self) -> str:
        return self.name if self.layout is None else f"{self.name}<{self.layout}>"


@dataclass
class LoopGraph:
    nodes: list[Node]
    inputs: list[str]
    outputs: list[Any]          # BufferRef (a buffer seen through a layout) or a Python constant
    name: str = "graph"
    constants: dict = field(default_factory=dict)   # buffer name -> tensor held by the graph (get_attr)
    hoisted: set = field(default_factory=set)       # small values stored so large kernels load them (lower._hoist)
    symbols: Any = None             # the ember.shapes.SymbolTable of a graph with symbolic sizes, else None
    symbol_inputs: dict = field(default_factory=dict)   # int inputs: name -> the expression it holds
    items: dict = field(default_factory=dict)   # unbacked int symbol -> input buffer it is the .item() of

    def node(self, name: str) -> Node:
        return self._by_name()[name]

    def _by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def users(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {n.name: set() for n in self.nodes}
        for n in self.nodes:
            for r in n.reads():
                out[r].add(n.name)
        return out

    def output_names(self) -> set[str]:
        return {o.name for o in self.outputs if isinstance(o, BufferRef)}

    def python(self) -> str:
        lines = [f"def {self.name}({', '.join(self.inputs)}):"]
        lines += ["    " + n.python() for n in self.nodes if not isinstance(n, InputBuffer)]
        lines.append(f"    return ({', '.join(map(repr, self.outputs))},)")
        return "\n".join(lines)

    __str__ = python
