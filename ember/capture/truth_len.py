"""Truth value and ``len`` of constants and traced objects, checked as CPython checks them: ``__bool__`` must
return a bool, ``__len__`` a non-negative int (by ``__index__``); no ``__bool__`` and no ``__len__`` is true."""
from __future__ import annotations

import operator

from . import rules as R
from .instance_attrs import lookup_type_attr
from .interpreter import NULL, UserException
from .values import BoundMethod, Const, FuncVar, IterVar, MethodOf, ObjectVar, PartialVar, SuperVar


def _of_constant(fn):
    """A rule computing ``fn(value)`` of a constant; what ``fn`` raises is the program's own error."""
    def rule(d, f, v):
        try:
            return fn(v.value)
        except Exception as e:      # noqa: BLE001
            raise UserException(e) from None
    return rule


R.TRUTH.register(Const)(_of_constant(bool))
R.LEN.register(Const)(_of_constant(len))


@R.TRUTH.register(ObjectVar)
def _object_truth(d, f, v):
    t = type(v.obj)
    if lookup_type_attr(t, "__bool__") is not NULL:
        r = d.call_method(f, v, "__bool__", [], {})
        if r.python_type() is not bool:     # CPython checks what the dunder returned
            got = r.python_type().__name__
            raise UserException(TypeError(f"__bool__ should return bool, returned {got}"))
        return d.as_python(f, r)
    if lookup_type_attr(t, "__len__") is not NULL:
        return bool(_len_result(d, f, d.call_method(f, v, "__len__", [], {})))
    return True


def _len_result(d, f, r):
    """What ``__len__`` returned, checked as CPython does (an int, by ``__index__``, and not negative)."""
    n = d.as_python(f, r)
    if not isinstance(n, int):
        if lookup_type_attr(type(n), "__index__") is NULL:
            raise UserException(TypeError(f"'{type(n).__name__}' object cannot be interpreted as an integer"))
        n = operator.index(n)
    if n < 0:
        raise UserException(ValueError("__len__() should return >= 0"))
    return int(n)


@R.TRUTH.register(FuncVar, BoundMethod, PartialVar, IterVar, MethodOf, SuperVar)
def _always_true(d, f, v):
    return True


@R.LEN.register(ObjectVar)
def _object_len(d, f, v):
    if lookup_type_attr(type(v.obj), "__len__") is NULL:
        raise UserException(TypeError(f"object of type '{type(v.obj).__name__}' has no len()"))
    return _len_result(d, f, d.call_method(f, v, "__len__", [], {}))
