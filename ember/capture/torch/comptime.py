"""The ``torch._dynamo.comptime`` helpers that state facts about sizes, read in the trace.

``comptime(fn)`` runs ``fn`` on Dynamo's own compile-time context, which ember does not have: a call of it
stays a graph break. Its static helpers that only ask about or pin a size have a meaning of their own here:
- ``comptime.assert_static(v)``: an ``AssertionError`` when ``v`` is a symbolic number of the trace;
- ``comptime.force_static(v)`` (what ``torch._dynamo.mark_static(t, i)`` runs inside compiled code): ``v``
  is specialized to its value (a relation, so the entry is guarded on it);
- ``comptime.graph_break()``: a graph break.
They are found by module and qualified name: the pipeline does not import ``torch._dynamo``.
"""
from __future__ import annotations

from typing import Any

from ..interpreter import UserException
from ..values import Const, Value

_MODULE = "torch._dynamo.comptime"


def _symbolic(d, v: Value) -> bool:
    if type(v).__name__ not in ("SymNumVar", "SymFloatVar"):
        return type(v).__name__ in ("FloatItemVar",)
    node = v.sym.node
    expr = node.table.simplify(node.expr)
    return bool(expr.free_symbols) and expr not in getattr(d.torch, "forced_static", ())


def _assert_static(d, f, args, kwargs) -> Value:
    v = args[0] if args else kwargs.get("val")
    if v is not None and _symbolic(d, v):
        raise UserException(AssertionError(f"expected static but got {v.describe()}"))
    return Const(None)


def _force_static(d, f, args, kwargs) -> Value:
    v = args[0] if args else kwargs.get("val")
    if v is not None and type(v).__name__ == "SymNumVar" and _symbolic(d, v):
        from .symsize import specialize
        specialize(v, "comptime.force_static / torch._dynamo.mark_static inside compiled code", f)
        # (a relation pins a symbol of a plain size; an expression such as 2*s1 stays one, remembered here)
        forced = getattr(d.torch, "forced_static", None)
        if forced is None:
            forced = d.torch.forced_static = set()
        forced.add(v.sym.node.table.simplify(v.sym.node.expr))
    elif v is not None and type(v).__name__ == "SymFloatVar":
        v.as_python()
    return Const(None)


def _graph_break(d, f, args, kwargs) -> Value:
    raise d.unsupported(f, "comptime.graph_break() asks for a graph break", "remove it to capture one graph")


_RULES = {"_Comptime.assert_static": _assert_static, "_Comptime.force_static": _force_static,
          "_Comptime.graph_break": _graph_break}


def call(d, f, fn: Any, args, kwargs) -> Value | None:
    if getattr(fn, "__module__", None) != _MODULE:
        return None
    rule = _RULES.get(getattr(fn, "__qualname__", ""))
    return rule(d, f, args, kwargs) if rule is not None else None
