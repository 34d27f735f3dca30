"""Symbolic sizes in the trace: Python ints that stand for a size (or an int argument) of the call.

A ``SymNumVar`` is an int whose value depends on the call: ``x.shape[0]`` for a dynamic dim, an int argument
made dynamic, and the ints computed from them. It holds a ``torch.SymInt`` over the trace's ``SymbolTable``
(``ember.shapes``) and the FX node that computes the same int at run time (``x.size(0)``, ``operator`` nodes),
so the graph computes every size from its inputs (docs/dynamic-contract.md). Arithmetic keeps it symbolic;
a comparison or a truth test decides through the table (recording a relation with the user's line); a use
that needs a real Python constant specializes it (records ``s == hint``) and says why under
``EMBER_LOGS=dynamic``.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np
import sympy
import torch

from ... import logs
from ...shapes import SymbolicUnsupported, hint_of, located, to_python
from .. import rules as R
from ..interpreter import UserException
from ..values import Const, Value

COMPARE_FNS = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
               ">=": operator.ge}

PREFIX = "__sym_"      # what a symbol is bound to in the guards and glue (``__sym_s0``)


def where(f) -> str:
    if f is None or f.cur is None:
        return ""
    return f"{f.code.co_filename}:{f.cur.lineno or f.code.co_firstlineno}"


def names(table) -> dict:
    return {s: PREFIX + s.name for s in table.symbols}


class SymNumVar(Value):
    """An int of the trace that is symbolic: ``sym`` (a ``torch.SymInt``) and ``node`` (computes it).
    ``np_type``: the NumPy integer type of an argument that was one (``np.int64(i)``): torch reads it as the
    int it holds (in tensor arithmetic, as a size), so it is symbolic there; any other use (NumPy's own
    arithmetic, attributes) specializes it to the NumPy value (``numpy_int``)."""
    __slots__ = ("sym", "node", "np_type")
    op_priority = 5         # below tensors: ``t * n`` is a tensor op

    def __init__(self, sym, node, np_type=None):
        super().__init__(None)
        self.sym = sym
        self.node = node
        self.np_type = np_type

    def python_type(self):
        return self.np_type or int

    def as_python(self):
        n = specialize(self, "its value is needed as a Python constant")
        return self.np_type(n) if self.np_type is not None else n

    def describe(self):
        return f"int {self.sym.node.expr} (a symbolic size, {hint_of(self.sym)} on this call)"


def specialize(v: SymNumVar, why: str, f=None) -> int:
    """The hint of ``v``, recorded as a relation (``expr == hint``): the entry is valid for this value only.
    A data-dependent size (an unbacked ``u<k>``) has no hint to specialize to: its value is known only when the
    graph runs, so needing it as a plain number is ``DataDependent`` (a graph break), never its stand-in."""
    expr, hint = v.sym.node.expr, hint_of(v.sym)
    table = v.sym.node.table
    syms = sorted(sympy.sympify(expr).free_symbols & table.unbacked, key=str) if table.unbacked else ()
    if syms:
        from ember.errors import DataDependent
        srcs = "; ".join(f"{s} = {table.sources.get(s, '?')}" for s in syms)
        raise DataDependent(f"the int {to_python(expr)} is needed as a plain number ({why}), but it depends on "
                            f"a data-dependent size ({srcs}) known only when the graph runs")
    loc = where(f)
    with located(loc) if loc else _nothing():
        v.sym.node.table.decide(sympy.Eq(expr, hint))
    if logs.enabled("dynamic"):
        logs.log("dynamic", f"specialized {expr} = {hint}: {why}" + (f" (at {loc})" if loc else ""))
    return int(hint)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def make(st, sym, node) -> Value:
    """A ``SymNumVar`` for ``sym`` computed by ``node``, or a ``Const`` where ``sym`` is a plain int."""
    if not isinstance(sym, torch.SymInt) or not sym.node.is_symbolic():
        if node is not None and not node.users:
            st.graph.erase_node(node)
        return Const(int(sym))
    node.meta["example_value"] = sym
    node.meta["ember_sym"] = True
    return SymNumVar(sym, node)


def operand(v: Value):
    """(SymInt or int, node argument) of an int operand, or None when ``v`` is not an int."""
    if type(v) is SymNumVar:
        return v.sym, v.node
    if type(v) is Const and type(v.value) in (int, bool):
        return int(v.value), int(v.value)
    return None


_INT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
            "%": operator.mod}


def _numpy_int(d, f, op: str, a: Value, b: Value | None = None):
    """An operation on a NumPy integer argument (``np_type``) without a tensor: NumPy's own arithmetic and
    result types (``np.int64(3) / 2`` is an ``np.float64``), so the argument is specialized to its value;
    None when no operand is one."""
    vals = [a] if b is None else [a, b]
    if not any(type(v) is SymNumVar and v.np_type is not None for v in vals):
        return None
    if op in ("/", "/=") and b is not None:
        r = _numpy_true_division(d, f, op, a, b)
        if r is not None:
            return r
    why = f"NumPy arithmetic ({op}) on a NumPy integer argument (its result types are NumPy's)"
    c = [Const(v.np_type(specialize(v, why, f))) if type(v) is SymNumVar and v.np_type is not None else v
         for v in vals]
    return d.unary(f, op, c[0]) if b is None else (
        d.compare(f, op, *c) if op in COMPARE_FNS else d.binary(f, op, *c))


def _numpy_true_division(d, f, op: str, a: Value, b: Value):
    """``np.int64(n) / 2``: NumPy divides the two integers as doubles, which is Python's int division for
    sizes (below 2**53), so the quotient stays symbolic, typed as NumPy's result (``np.float64``); None
    where an operand is not an integer of the trace or a constant one."""
    def plain(v):
        if type(v) is SymNumVar:
            return SymNumVar(v.sym, v.node), v.np_type or int
        if type(v) is Const and isinstance(v.value, (int, np.integer)) and type(v.value) is not bool:
            return Const(int(v.value)), type(v.value)
        return None
    pa, pb = plain(a), plain(b)
    if pa is None or pb is None or (type(pb[0]) is Const and pb[0].value == 0):
        return None
    kind = type(pa[1](3) / pb[1](2))
    r = FLOAT["arithmetic"](d, f, op, pa[0], pb[0])
    if type(r).__name__ == "SymFloatVar":
        r.np_type = kind
        return r
    return Const(kind(r.value)) if type(r) is Const else None


def _binary(d, f, op: str, a: Value, b: Value):
    if type(a).__name__ != "TensorVar" and type(b).__name__ != "TensorVar":
        r = _numpy_int(d, f, op, a, b)
        if r is not None:
            return r
    base = op[:-1] if op.endswith("=") else op
    pa, pb = operand(a), operand(b)
    if pa is None or pb is None:
        if type(a).__name__ == "TensorVar" or type(b).__name__ == "TensorVar":
            return NotImplemented
        if type(a) is Const and type(a.value) is float or type(b) is Const and type(b.value) is float:
            return FLOAT["arithmetic"](d, f, op, a, b)      # a symbolic float (symfloat.py)
        return NotImplemented
    fn = _INT_OPS.get(base)
    if base in ("/", "**"):     # a float (or, for **, an int) that stays symbolic (symfloat.py)
        return FLOAT["arithmetic"](d, f, op, a, b)
    if fn is None:      # shifts, bit operations: computed on the specialized values
        va = specialize(a, f"the operator {op}", f) if type(a) is SymNumVar else pa[0]
        vb = specialize(b, f"the operator {op}", f) if type(b) is SymNumVar else pb[0]
        return d.binary(f, op, Const(va), Const(vb))
    if base in ("//", "%") and pb[0] == 0:
        raise UserException(ZeroDivisionError("integer division or modulo by zero"))
    with located(where(f)):
        sym = fn(pa[0], pb[0])
    st = d.torch
    node = st.graph.call_function(fn, (pa[1], pb[1]))
    return make(st, sym, node)


def _compare(d, f, op: str, a: Value, b: Value):
    nps = [v.np_type for v in (a, b) if type(v) is SymNumVar and v.np_type is not None]
    if nps and operand(a) is not None and operand(b) is not None:
        # a NumPy integer with an int: the same relation as for ints (no specialization), NumPy's bool
        r = _compare(d, f, op, *[SymNumVar(v.sym, v.node) if type(v) is SymNumVar else v for v in (a, b)])
        return Const(np.bool_(r.value)) if type(r) is Const else r
    if nps and type(a).__name__ != "TensorVar" and type(b).__name__ != "TensorVar":
        return _numpy_int(d, f, op, a, b)
    pa, pb = operand(a), operand(b)
    if pa is None or pb is None:
        if type(a).__name__ == "TensorVar" or type(b).__name__ == "TensorVar":
            return NotImplemented
        if op in ("==", "!="):
            return Const(op == "!=")
        other = b if pb is None else a
        if type(other) is Const and type(other.value) is float:
            sv = a if pa is not None else b
            if not (type(sv) is SymNumVar and sv.sym.node.table.unbacked):     # a relation (``s0 > 3.5``)
                xa, xb = (sv.sym, other.value) if sv is a else (other.value, sv.sym)
                with located(where(f)):
                    return Const(bool(COMPARE_FNS[op](xa, xb)))
            x = specialize(sv, "compared with a float", f)
            va, vb = (x, other.value) if sv is a else (other.value, x)
            return Const(COMPARE_FNS[op](va, vb))
        return NotImplemented
    if type(pa[0]) is torch.SymInt and pa[0].node.table.unbacked or \
            type(pb[0]) is torch.SymInt and pb[0].node.table.unbacked:
        # a condition on a size computed from tensor data (unbacked.py registers the handler)
        return UNBACKED["compare"](d, f, COMPARE_FNS[op], op, pa, pb)
    with located(where(f)):
        return Const(bool(COMPARE_FNS[op](pa[0], pb[0])))


def _unary(d, f, op: str, v: SymNumVar):
    r = _numpy_int(d, f, op, v)
    if r is not None:
        return r
    st = d.torch
    if op == "-":
        return make(st, -v.sym, st.graph.call_function(operator.neg, (v.node,)))
    if op == "+":
        return v
    if op == "abs":
        with located(where(f)):
            neg = bool(v.sym < 0)
        return _unary(d, f, "-", v) if neg else v
    return Const(operator.invert(specialize(v, f"the operator {op}", f)))


def _truth(d, f, v: SymNumVar) -> bool:
    with located(where(f)):
        return bool(v.sym != 0)


def _reconstruct(glue, v: SymNumVar) -> str:
    table = v.sym.node.table
    expr = table.simplify(v.sym.node.expr)
    nm = names(table)
    if table.unbacked and expr.free_symbols & table.unbacked:     # read from the graph's outputs
        nm = UNBACKED["reconstruct_names"](glue, table, expr, nm)
    if v.np_type is not None:       # a NumPy integer argument given back: its own type again
        return f"{glue.cg.bind(v.np_type, v.np_type.__name__)}({to_python(expr, nm)})"
    return to_python(expr, nm)


# ``symfloat.py`` (which imports this module) registers ``arithmetic`` here: int arithmetic whose result is a
# float (``/``, ``**``, a float operand).
FLOAT: dict[str, Any] = {}

# Handlers for data-dependent (unbacked) sizes: ``unbacked.py`` (which imports this module) registers
# ``compare`` and ``reconstruct_names`` here when it is imported (tensor.py and ops.py import it).
UNBACKED: dict[str, Any] = {}

R.BINARY.register(SymNumVar)(_binary)
R.COMPARE.register(SymNumVar)(_compare)
R.UNARY.register(SymNumVar)(_unary)
R.TRUTH.register(SymNumVar)(_truth)
R.RECONSTRUCT.register(SymNumVar)(_reconstruct)


# -- sizes of tensors -----------------------------------------------------------------------------------
def dim_value(d, f, t, i: int) -> Value:
    """``t.size(i)`` as a value: a ``Const`` for a static dim, else the ``SymNumVar`` read from ``t``'s node."""
    sym = getattr(t, "sym", None)
    n = t.meta.dim()
    if i < -n or i >= n:
        raise UserException(IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                                       f"but got {i})"))
    i %= max(n, 1)
    if sym is None:
        return Const(int(t.meta.shape[i]))
    e = sym[i]
    if e is None:
        raise SymbolicUnsupported(f"capture: the size of a tensor computed at {t.node.meta.get('ember_loc', '?')} "
                                  "is read, but ember could not compute it symbolically")
    if isinstance(e, int):
        return Const(e)
    st = d.torch
    key = (st.graph, t.node, i)     # a size read inside a subgraph (subgraph.py) is a node of that graph
    hit = st.size_nodes.get(key)
    if hit is None:
        node = st.graph.call_method("size", (t.node, i))
        hit = st.size_nodes[key] = make(st, st.table.symint(e), node)
    return hit


def shape_value(d, f, t, cls=torch.Size) -> Value:
    from ..values import TupleVar
    return TupleVar([dim_value(d, f, t, i) for i in range(t.meta.dim())], cls)


def numel_value(d, f, t) -> Value:
    sym = t.sym
    if any(e is None for e in sym):
        raise SymbolicUnsupported("capture: numel() of a tensor whose sizes ember could not compute symbolically")
    st = d.torch
    total = sympy.Integer(1)
    for e in sym:
        total = total * e
    return make(st, st.table.symint(total), st.graph.call_method("numel", (t.node,)))


def relation_guards(d, table) -> None:
    """Every relation the trace and the backend relied on, as a guard over the bound symbols."""
    nm = names(table)
    for r in table.relations:
        d.guards.add(to_python(r.expr, nm), f"relation {r}")
