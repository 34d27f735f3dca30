"""Symbolic floats in the trace: Python floats computed from symbolic sizes (``torch.SymFloat``).

``100.0 * x.shape[0]``, ``x.shape[0] / 2``, ``x.shape[-1] ** -0.5``, ``float(n)`` and ``math.sqrt(d)`` of
a symbolic size are a ``SymFloatVar``: a ``torch.SymFloat`` over the trace's ``SymbolTable`` and the FX node
that computes the same float at run time (``operator.truediv(x.size(0), 2)``), as ``SymNumVar`` is for
ints. The attention scale ``q * q.shape[-1] ** -0.5`` so stays a function of the size: the graph takes it as a
scalar operand, the AOT trace rebuilds it from the size nodes (``autograd.symnodes.build_float``) and the
kernels compute it from their size arguments (``loopir.values._float_size``); no guard pins the size. Before,
any float arithmetic on a symbolic int specialized it (one graph per size).

What needs a Python float (``int()``, a ``math`` function other than ``sqrt``, formatting) specializes the
symbols the expression reads (``EMBER_LOGS=dynamic`` says why); comparisons and truth tests decide through the
table as int ones do, recording a relation.
"""
from __future__ import annotations

import math
import operator
from typing import Any

import sympy
import torch

from ... import logs
from ...shapes import hint_of, located, to_python
from .. import rules as R
from ..interpreter import UserException
from ..values import Const, Value
from .symsize import COMPARE_FNS, FLOAT, PREFIX, SymNumVar, make, where, _nothing

_FLOAT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
              "**": operator.pow}


class SymFloatVar(Value):
    """A float of the trace that is symbolic: ``sym`` (a ``torch.SymFloat``) and ``node`` (computes it).
    ``np_type``: a NumPy float result (``np.int64(n) / 2`` is an ``np.float64``): given back as one; NumPy's
    own arithmetic on it specializes it (``settle_numpy``)."""
    __slots__ = ("sym", "node", "np_type")
    op_priority = 6         # above symbolic ints (``n * s`` is a float op), below .item() floats and tensors

    def __init__(self, sym, node, np_type=None):
        super().__init__(None)
        self.sym = sym
        self.node = node
        self.np_type = np_type

    def python_type(self):
        return self.np_type or float

    def as_python(self):
        return specialize(self, "its value is needed as a Python constant")

    def describe(self):
        return f"float {self.sym.node.expr} (computed from symbolic sizes, {hint_of(self.sym)} on this call)"


def specialize(v: SymFloatVar, why: str, f=None) -> float:
    """The hint of ``v``, with every symbol it reads pinned to its hint (``s0 == 64``): a float relation would
    have to be printed and re-evaluated exactly, an int one is exact."""
    table = v.sym.node.table
    loc = where(f)
    expr = sympy.sympify(v.sym.node.expr)
    with located(loc) if loc else _nothing():
        for s in sorted(expr.free_symbols, key=str):
            table.decide(sympy.Eq(s, table.hint(s)))
    if logs.enabled("dynamic"):
        logs.log("dynamic", f"specialized the symbols of float {expr} = {hint_of(v.sym)}: {why}"
                 + (f" (at {loc})" if loc else ""))
    return float(hint_of(v.sym))


def make_number(st, sym, node) -> Value:
    """The value of a result of symbolic arithmetic: ``SymFloatVar``, ``SymNumVar`` (``symsize.make``) or a
    constant."""
    if isinstance(sym, torch.SymFloat):
        if not sym.node.is_symbolic():
            if node is not None and not node.users:
                st.graph.erase_node(node)
            return Const(float(hint_of(sym)))
        node.meta["example_value"] = sym
        node.meta["ember_sym"] = True
        return SymFloatVar(sym, node)
    if isinstance(sym, float):
        if node is not None and not node.users:
            st.graph.erase_node(node)
        return Const(sym)
    return make(st, sym, node)


def operand(v: Value):
    """(number, node argument) of a numeric operand (symbolic int or float, plain number), else None."""
    t = type(v)
    if t is SymFloatVar or t is SymNumVar:
        return v.sym, v.node
    if t is Const and type(v.value) in (int, float, bool):
        return v.value, v.value
    return None


def arithmetic(d, f, op: str, a: Value, b: Value):
    """``a op b`` where one side is symbolic and the result may be a float (``/``, ``**``, a float operand);
    NotImplemented where this does not apply (a tensor operand, another kind of value)."""
    base = op[:-1] if op.endswith("=") else op
    pa, pb = operand(a), operand(b)
    if pa is None or pb is None:
        return NotImplemented
    fn = _FLOAT_OPS.get(base)
    if fn is None or _unbacked(pa[0]) or _unbacked(pb[0]):
        # //, % and bit operations on floats, and floats of data-dependent sizes (known only when the graph
        # runs: a graph break, ``symsize.specialize``): on the specialized values
        va = _plain(a, f"the operator {op} on a float", f)
        vb = _plain(b, f"the operator {op} on a float", f)
        return d.binary(f, op, Const(va), Const(vb))
    if base == "/" and _is_zero(pb[0]):
        raise UserException(ZeroDivisionError("float division by zero" if type(b) is not SymNumVar
                                              else "division by zero"))
    with located(where(f)):
        sym = fn(pa[0], pb[0])
    if base == "**" and not isinstance(sym, (torch.SymInt, torch.SymFloat, int, float)):
        return NotImplemented   # a complex power: Python's own rules, on the specialized values
    st = d.torch
    return make_number(st, sym, st.graph.call_function(fn, (pa[1], pb[1])))


def _unbacked(x) -> bool:
    """Whether ``x`` (a number of the trace) depends on a data-dependent size (an unbacked ``u<k>``)."""
    if not isinstance(x, (torch.SymInt, torch.SymFloat)):
        return False
    table = x.node.table
    return bool(table.unbacked and sympy.sympify(x.node.expr).free_symbols & table.unbacked)


def _is_zero(x) -> bool:
    if isinstance(x, (torch.SymInt, torch.SymFloat)):
        return False        # a size is positive; a float of sizes at 0 divides by zero in eager as well
    return x == 0


def _plain(v: Value, why: str, f) -> Any:
    t = type(v)
    if t is SymFloatVar:
        return specialize(v, why, f)
    if t is SymNumVar:
        from .symsize import specialize as spec_int
        return spec_int(v, why, f)
    return v.value


def settle_numpy(v: Value, f=None) -> Value:
    """A NumPy float of symbolic ints as its NumPy value (specialized); anything else as it is."""
    if type(v) is SymFloatVar and v.np_type is not None:
        return Const(v.np_type(specialize(v, "NumPy arithmetic on a NumPy float", f)))
    return v


def _binary(d, f, op: str, a: Value, b: Value):
    if type(a).__name__ == "TensorVar" or type(b).__name__ == "TensorVar":
        return NotImplemented
    if any(type(v) is SymFloatVar and v.np_type is not None for v in (a, b)):
        return d.binary(f, op, settle_numpy(a, f), settle_numpy(b, f))
    return arithmetic(d, f, op, a, b)


def _compare(d, f, op: str, a: Value, b: Value):
    if any(type(v) is SymFloatVar and v.np_type is not None for v in (a, b)):
        return d.compare(f, op, settle_numpy(a, f), settle_numpy(b, f))
    pa, pb = operand(a), operand(b)
    if pa is None or pb is None:
        if type(a).__name__ == "TensorVar" or type(b).__name__ == "TensorVar":
            return NotImplemented
        if op in ("==", "!="):
            return Const(op == "!=")
        return NotImplemented
    with located(where(f)):
        return Const(bool(COMPARE_FNS[op](pa[0], pb[0])))


def _unary(d, f, op: str, v: SymFloatVar):
    if v.np_type is not None:
        return d.unary(f, op, settle_numpy(v, f))
    st = d.torch
    if op == "-":
        return make_number(st, -v.sym, st.graph.call_function(operator.neg, (v.node,)))
    if op == "+":
        return v
    if op == "abs":
        with located(where(f)):
            neg = bool(v.sym < 0)
        return _unary(d, f, "-", v) if neg else v
    raise UserException(TypeError(f"bad operand type for unary {op}: 'float'"))


def _truth(d, f, v: SymFloatVar) -> bool:
    with located(where(f)):
        return bool(v.sym != 0)


def _reconstruct(glue, v: SymFloatVar) -> str:
    """Python source for the float over the bound symbols (``float(...)``: ``float(n)`` prints as ``n``)."""
    table = v.sym.node.table
    names = {s: PREFIX + s.name for s in table.symbols}
    text = f"float({to_python(sympy.sympify(v.sym.node.expr), names, floats=True)})"
    return f"{glue.cg.bind(v.np_type, v.np_type.__name__)}({text})" if v.np_type is not None else text


R.BINARY.register(SymFloatVar)(_binary)
R.COMPARE.register(SymFloatVar)(_compare)
R.UNARY.register(SymFloatVar)(_unary)
R.TRUTH.register(SymFloatVar)(_truth)
R.RECONSTRUCT.register(SymFloatVar)(_reconstruct)
FLOAT["arithmetic"] = arithmetic        # symsize defers int arithmetic with a float result here


# -- calls: float(n), math.sqrt(n) ---------------------------------------------------------------------
def _symbolic_arg(args, kwargs) -> Value | None:
    if len(args) == 1 and not kwargs and type(args[0]) in (SymNumVar, SymFloatVar):
        return None if _unbacked(args[0].sym) else args[0]
    return None


def _float_call(d, f, args, kwargs):
    v = _symbolic_arg(args, kwargs)
    if v is None:
        return None
    if type(v) is SymFloatVar:
        return v
    st = d.torch
    return make_number(st, torch.sym_float(v.sym), st.graph.call_function(torch.sym_float, (v.node,)))


def _sqrt_call(d, f, args, kwargs):
    v = _symbolic_arg(args, kwargs)
    if v is None:
        return None
    with located(where(f)):
        negative = bool(v.sym < 0)
    if negative:
        raise UserException(ValueError("math domain error"))
    st = d.torch
    return make_number(st, torch._sym_sqrt(v.sym), st.graph.call_function(torch._sym_sqrt, (v.node,)))


CALLS = {float: _float_call, math.sqrt: _sqrt_call}


def call(d, f, fn, args, kwargs) -> Value | None:
    """A call this module keeps symbolic (``float(n)``, ``math.sqrt(n)``), else None."""
    try:
        h = CALLS.get(fn)
    except TypeError:
        return None
    return None if h is None else h(d, f, args, kwargs)
