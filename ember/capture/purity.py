"""Which callables ember may run for real at trace time on known arguments (``objects.call_real``): built-in
functions and types without side effects, functions of pure modules (math, operator, string...), methods of
immutable values and of ``str``/``bytes``/``int``/``float``/``dict``/``tuple`` that change nothing."""
from __future__ import annotations

import builtins
import operator
import re
import sys
import types
from typing import Any

from .values import NUMPY_VALUES, is_immutable, is_plain_builtin

_PURE_MODULES = {"math", "cmath", "operator", "_operator", "string", "keyword", "unicodedata"}
_IMPURE_BUILTINS = {print, input, open, exec, eval, compile, setattr, delattr, globals, locals, vars, iter,
                    next, help, breakpoint, __import__, id}
PURE_BUILTINS = {getattr(builtins, n) for n in dir(builtins)
                 if isinstance(getattr(builtins, n), (types.BuiltinFunctionType, type))} - _IMPURE_BUILTINS
PURE_BUILTINS.add(sys.intern)       # collections.namedtuple() calls it on each field name
# functions of "pure" modules and types that change an argument: running them on copies would lose the change
_MUTATING = {getattr(operator, n) for n in ("setitem", "delitem", "iadd", "iand", "iconcat", "ifloordiv",
                                            "ilshift", "imod", "imul", "imatmul", "ior", "ipow", "irshift",
                                            "isub", "itruediv", "ixor")}
_PURE_PATTERN_METHODS = {"search", "match", "fullmatch", "findall", "split"}
_CMETHOD = type(re.compile("").search)      # builtin_method: a C method bound to its object (METH_METHOD)
_MUTATING_DICT_METHODS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__",
                          "__init__", "__ior__"}


def is_pure_callable(fn: Any) -> bool:
    try:
        if fn in PURE_BUILTINS:
            return True
        if fn in _MUTATING:
            return False
    except TypeError:
        pass
    t = type(fn)
    if t is types.BuiltinFunctionType or t is _CMETHOD:
        self_ = fn.__self__
        if is_plain_builtin(fn):
            return (getattr(fn, "__module__", None) or getattr(self_, "__name__", "")) in _PURE_MODULES
        if isinstance(self_, re.Pattern) and fn.__name__ not in _PURE_PATTERN_METHODS:
            return False        # sub/subn may call a user function with each match
        return is_immutable(self_) or isinstance(self_, type) and self_ in (str, bytes, int, float, dict, tuple)
    if t in (types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType):
        if fn.__objclass__ is dict:
            return fn.__name__ not in _MUTATING_DICT_METHODS
        return fn.__objclass__ in (str, bytes, int, float, complex, tuple, frozenset, range)
    if t is types.MethodWrapperType:
        return is_immutable(fn.__self__)
    if isinstance(fn, (operator.itemgetter, operator.attrgetter)):
        return False
    if isinstance(fn, type) and issubclass(fn, NUMPY_VALUES):       # np.float32(x), np.finfo(np.float32)
        return True
    return is_numpy_function(fn)


try:
    import numpy as _np
except ImportError:     # pragma: no cover - torch brings numpy along
    _np = None
# NumPy array functions that write into an argument (or only exist for their effect)
_NUMPY_MUTATING = {"copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis", "shares_memory",
                   "may_share_memory", "save", "savez", "savez_compressed", "savetxt", "tofile"}


def is_numpy_function(fn: Any) -> bool:
    """A NumPy ufunc or array function of ``numpy``/``numpy.linalg``/``numpy.fft`` (``np.sqrt``, ``np.prod``,
    ``np.log2``): on constant numbers it computes a number and changes nothing (``plain_numpy_call`` checks
    the arguments and the result). ``numpy.random`` is not among them."""
    if _np is None:
        return False
    if isinstance(fn, _np.ufunc):
        return True
    return (type(fn).__name__ == "_ArrayFunctionDispatcher"
            and getattr(fn, "__module__", "") in ("numpy", "numpy.linalg", "numpy.fft")
            and getattr(fn, "__name__", "") not in _NUMPY_MUTATING)


def plain_numpy_args(args: list, kwargs: dict) -> bool:
    """Arguments a NumPy function may take at trace time: numbers, strings, None, dtypes, and tuples or lists
    of those (no array that it could write into or return a view of)."""
    def plain(x: Any) -> bool:
        if isinstance(x, (list, tuple)):
            return all(plain(y) for y in x)
        return is_immutable(x)
    return "out" not in kwargs and all(plain(a) for a in args) and all(plain(v) for v in kwargs.values())
