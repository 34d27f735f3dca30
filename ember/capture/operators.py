"""Python operators on values: binary (incl. in-place and reflected), comparisons, unary and ``in``.

A value class with a ``BINARY``/``COMPARE``/``UNARY`` rule (tensors) takes precedence on either side; known
constants compute for real; containers follow list/tuple/dict/set semantics; user objects run their dunder
methods with the ``NotImplemented`` protocol."""
from __future__ import annotations

import operator
import types

from . import rules as R
from .concrete import BINARY as REAL_BINARY
from .concrete import COMPARE as REAL_COMPARE
from .concrete import UNARY as REAL_UNARY
from .identity import identical
from .interpreter import NULL, UserException
from .objects import lookup_type_attr
from .subclasses import base_operand
from .values import (NUMPY_INTS, OpaqueVar, Const, DictVar, ListVar, NotConst, ObjectVar, SetVar, TupleVar, Value)

DUNDER = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod", "**": "pow",
          "@": "matmul", "<<": "lshift", ">>": "rshift", "&": "and", "|": "or", "^": "xor"}
CMP_DUNDER = {"<": ("__lt__", "__gt__"), "<=": ("__le__", "__ge__"), "==": ("__eq__", "__eq__"),
              "!=": ("__ne__", "__ne__"), ">": ("__gt__", "__lt__"), ">=": ("__ge__", "__le__")}


def _prio_rule(table, a, b):
    ra, rb = table.find(type(a)), table.find(type(b))
    if ra is None:
        return rb
    if rb is None:
        return ra
    return ra if getattr(type(a), "op_priority", 0) >= getattr(type(b), "op_priority", 0) else rb


def _real(fn, *vals):
    try:
        return fn(*vals)
    except Exception as e:      # noqa: BLE001
        raise UserException(e) from None


def _both_python(a: Value, b: Value):
    if type(a) is Const and type(b) is Const:
        return a.value, b.value
    return None


def _opaque(d, f, *vals) -> None:
    for v in vals:
        if type(v) is OpaqueVar:
            raise d.unsupported(f, f"using a {v.describe()} in Python arithmetic",
                                "keep the value a tensor (no .item()), or do this outside the compiled function")


def _value_rule(d, f, table, op: str, a: Value, b: Value):
    """The operation by the operands' own rule (tensors), else NotImplemented; values from outside the
    graph (opaque) cannot take part in Python-level arithmetic."""
    rule = _prio_rule(table, a, b)
    if rule is not None:
        r = rule(d, f, op, a, b)
        if r is not NotImplemented:
            return r
    _opaque(d, f, a, b)
    return NotImplemented


def binary(d, f, op: str, a: Value, b: Value) -> Value:
    r = _value_rule(d, f, R.BINARY, op, a, b)
    if r is not NotImplemented:
        return r
    pv = _both_python(a, b)
    if pv is not None:
        return d.from_python(_real(REAL_BINARY[op], *pv))
    inplace = op.endswith("=")
    base = op[:-1] if inplace else op
    name = DUNDER.get(base)
    pa = base_operand(a, f"__i{name}__" if inplace else f"__{name}__", lookup_type_attr, d) if name else a
    pb = base_operand(b, f"__r{name}__", lookup_type_attr, d) if name else b
    r = _container_binary(d, f, base, inplace, pa, pb)
    if r is not NotImplemented:
        return a if r is pa and pa is not a else r     # `s |= t` on a set subclass is s itself
    r = _dunder_binary(d, f, base, inplace, a, b)
    if r is not NotImplemented:
        return r
    try:
        return d.from_python(_real(REAL_BINARY[op], a.as_python(), b.as_python()))
    except NotConst:
        pass
    if base == "%" and a.python_type() in (str, bytes):     # printf-style formatting of values not known
        raise d.unsupported(f, f"formatting {b.describe()} into a string with %",
                            "format values after the compiled function returns")
    raise UserException(TypeError(f"unsupported operand type(s) for {op}: '{a.python_type().__name__}' "
                                  f"and '{b.python_type().__name__}'"))


def _view_set_op(d, f, op, a, b):
    """``&``, ``|``, ``-``, ``^`` with a dict keys/items view on either side: CPython's view slots make a new
    set of the left operand's items and update it from the right one (``set(a).difference_update(b)``), so the
    result is a plain set and neither operand changes, even for ``s |= d.keys()``."""
    from .containers import DictView
    if op not in _VIEW_SET_OPS or not any(type(x) is DictView and x.kind != "values" for x in (a, b)):
        return NotImplemented
    for x in (a, b):
        if not _is_iterable(x):
            raise UserException(TypeError(f"unsupported operand type(s) for {op}: '{a.python_type().__name__}' "
                                          f"and '{b.python_type().__name__}'"))
    r = SetVar({})
    R.METHOD.find(SetVar)(d, f, r, "update", [a], {})
    R.METHOD.find(SetVar)(d, f, r, _VIEW_SET_OPS[op], [b], {})
    return r


_VIEW_SET_OPS = {"&": "intersection_update", "|": "update", "-": "difference_update",
                 "^": "symmetric_difference_update"}


def _is_iterable(v) -> bool:
    from .objects import lookup_type_attr as attr
    t = v.python_type()
    return attr(t, "__iter__") is not NULL or attr(t, "__getitem__") is not NULL


def _container_binary(d, f, op, inplace, a, b):
    r = _view_set_op(d, f, op, a, b)
    if r is not NotImplemented:
        return r
    ta, tb = type(a), type(b)
    if op == "+" and ta is tb and ta in (ListVar, TupleVar) and (ta is ListVar or a.cls is None):
        if inplace and ta is ListVar:
            a.items.extend(b.items)
            d.mark_mutated(a)
            return a
        return ListVar(a.items + b.items) if ta is ListVar else TupleVar(a.items + b.items)
    if op == "+" and inplace and ta is ListVar:
        for x in d.each(f, b):                  # list.__iadd__ is list.extend: appended as read
            a.items.append(x)
            d.mark_mutated(a)
        d.mark_mutated(a)
        return a
    if op == "*" and (ta in (ListVar, TupleVar) and tb is Const or tb in (ListVar, TupleVar) and ta is Const):
        seq, n = (a, b) if ta in (ListVar, TupleVar) else (b, a)
        if type(n.value) is not int and type(n.value) is not bool and not isinstance(n.value, NUMPY_INTS):
            # CPython repeats by any integer with __index__ (a NumPy integer): the plain constants here
            raise UserException(TypeError(f"can't multiply sequence by non-int of type '{type(n.value).__name__}'"))
        items = seq.items * int(n.value)
        if inplace and seq is a and ta is ListVar:
            a.items[:] = items
            d.mark_mutated(a)
            return a
        return ListVar(items) if type(seq) is ListVar else TupleVar(items)
    if op == "|" and inplace and ta is DictVar:     # dict.__ior__ is update: any mapping or iterable of pairs
        R.METHOD.find(DictVar)(d, f, a, "update", [b], {})
        return a
    if op == "|" and ta is DictVar and tb is DictVar:
        if inplace:
            d.call_method(f, a, "update", [b], {})
            return a
        from .containers import copy_class
        # a right operand of a proper subclass with its own __ror__ (OrderedDict, defaultdict) goes first and
        # makes its own class: dict(od1) | od2 is an OrderedDict, {} | defaultdict(int) a defaultdict
        right = b.cls is not a.cls and issubclass(b.cls, a.cls) and \
            any("__ror__" in vars(k) for k in b.cls.__mro__[:b.cls.__mro__.index(a.cls)])
        owner = b if right else a
        r = DictVar(a.items, a.keys, copy_class(d, f, owner.cls), default_factory=owner.default_factory)
        d.call_method(f, r, "update", [b], {})
        return r
    if ta is SetVar and tb is SetVar and op in ("|", "&", "-", "^"):
        name = {"|": "union", "&": "intersection", "-": "difference", "^": "symmetric_difference"}[op]
        r = d.call_method(f, a, name, [b], {})
        if inplace:
            a.items = r.items
            d.mark_mutated(a)
            return a
        return r
    return NotImplemented


def _dunder_binary(d, f, op, inplace, a, b):
    name = DUNDER[op]
    attempts = []
    if inplace:
        attempts.append((a, f"__i{name}__", b))
    attempts += [(a, f"__{name}__", b), (b, f"__r{name}__", a)]
    for recv, meth, other in attempts:
        if not isinstance(recv, (ObjectVar, TupleVar)) or (isinstance(recv, TupleVar) and recv.cls is None):
            continue
        fn = lookup_type_attr(recv.python_type(), meth)
        if fn is NULL or (isinstance(recv, TupleVar) and fn is lookup_type_attr(tuple, meth)):
            continue
        r = d.call_method(f, recv, meth, [other], {}) if type(fn) is types.FunctionType else NotImplemented
        if not (type(r) is Const and r.value is NotImplemented):
            return r
    return NotImplemented


def compare(d, f, op: str, a: Value, b: Value) -> Value:
    r = _value_rule(d, f, R.COMPARE, op, a, b)
    if r is not NotImplemented:
        return r
    pv = _both_python(a, b)
    if pv is not None:
        return Const(_real(REAL_COMPARE[op], *pv))
    meth, rmeth = CMP_DUNDER[op]
    a, b = base_operand(a, meth, lookup_type_attr, d), base_operand(b, rmeth, lookup_type_attr, d)
    ta, tb = type(a), type(b)
    if ta in (ListVar, TupleVar) and ta is tb:
        return Const(_seq_compare(d, f, op, a.items, b.items))
    for recv, m, other in ((a, meth, b), (b, rmeth, a)):
        if isinstance(recv, ObjectVar):
            fn = lookup_type_attr(type(recv.obj), m)
            if type(fn) is types.FunctionType:
                r = d.call_method(f, recv, m, [other], {})
                if not (type(r) is Const and r.value is NotImplemented):
                    return r
    if op not in ("==", "!=") and _both_decline(a, b, meth, rmeth):
        raise UserException(TypeError(f"'{op}' not supported between instances of '{a.python_type().__name__}' "
                                      f"and '{b.python_type().__name__}'"))
    if op in ("==", "!="):
        if isinstance(a, (ObjectVar,)) or isinstance(b, (ObjectVar,)) or ta is not tb:
            try:
                same = REAL_COMPARE["=="](a.as_python(), b.as_python())
            except NotConst:
                same = identical(d, a, b)
            return Const(same if op == "==" else not same)
        if ta in (DictVar, SetVar):
            same = a.items.keys() == b.items.keys() and all(
                d.truth(f, compare(d, f, "==", a.items[k], b.items[k])) for k in a.items) if ta is DictVar \
                else a.items.keys() == b.items.keys()
            return Const(same if op == "==" else not same)
    try:
        return Const(_real(REAL_COMPARE[op], a.as_python(), b.as_python()))
    except NotConst:
        raise d.unsupported(f, f"comparing {a.describe()} {op} {b.describe()}") from None


def _declines(v: Value, other: Value, m: str) -> bool:
    """Whether ``v``'s comparison dunder ``m`` has answered, or must answer, NotImplemented to ``other``: a
    user object's Python dunder has (the caller tried it), object's default does, and a built-in constant's
    does for an operand whose type is not a subclass of its own."""
    if isinstance(v, ObjectVar):
        fn = lookup_type_attr(type(v.obj), m)
        return type(fn) is types.FunctionType or fn is getattr(object, m)
    if type(v) is Const and type(v.value).__module__ == "builtins" and isinstance(other, ObjectVar):
        return not isinstance(other.obj, type(v.value))
    return False


def _both_decline(a: Value, b: Value, meth: str, rmeth: str) -> bool:
    """An ordering whose operands both answer NotImplemented is CPython's TypeError."""
    return (isinstance(a, ObjectVar) or isinstance(b, ObjectVar)) and _declines(a, b, meth) \
        and _declines(b, a, rmeth)


def _seq_compare(d, f, op, xs, ys) -> bool:
    for x, y in zip(xs, ys):
        if x is y:
            continue
        if not d.truth(f, compare(d, f, "==", x, y)):
            if op == "==":
                return False
            if op == "!=":
                return True
            return d.truth(f, compare(d, f, op, x, y))
    return REAL_COMPARE[op](len(xs), len(ys))


def unary(d, f, op: str, v: Value) -> Value:
    if op == "not":
        return Const(not d.truth(f, v))
    rule = R.UNARY.find(type(v))
    if rule is not None:
        return rule(d, f, op, v)
    _opaque(d, f, v)
    if type(v) is Const:
        return Const(_real(REAL_UNARY[op], v.value))
    name = {"-": "__neg__", "+": "__pos__", "~": "__invert__", "abs": "__abs__"}[op]
    if isinstance(v, ObjectVar) and lookup_type_attr(type(v.obj), name) is not NULL:
        return d.call_method(f, v, name, [], {})
    raise UserException(TypeError(f"bad operand type for unary {op}: '{v.python_type().__name__}'"))


def contains(d, f, item: Value, container: Value) -> bool:
    container = base_operand(container, "__contains__", lookup_type_attr, d)
    t = type(container)
    if t in (ListVar, TupleVar):
        return any(x is item or d.truth(f, compare(d, f, "==", x, item)) for x in container.items)
    if t is SetVar:
        return d.set_key(f, item) in container.items
    if t is DictVar:
        return d.hash_key(f, item) in container.items
    if t is Const:
        try:
            return _real(operator.contains, container.value, d.as_python(f, item))
        except NotConst:
            raise d.unsupported(f, f"`in` on {container.describe()}") from None
    if isinstance(container, ObjectVar) and lookup_type_attr(type(container.obj), "__contains__") is not NULL:
        return d.truth(f, d.call_method(f, container, "__contains__", [item], {}))
    from .containers import DictView
    if t is DictView:
        if container.kind == "keys":
            return d.hash_key(f, item) in container.d.items
        return any(d.truth(f, compare(d, f, "==", x, item)) for x in container.list())
    it = d.iter(f, container)
    while True:
        ok, x = d.next(f, it)
        if not ok:
            return False
        if d.truth(f, compare(d, f, "==", x, item)):
            return True
