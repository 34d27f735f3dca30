"""The errors CPython's eval loop words itself for calls with ``*``/``**`` arguments, unpacking into
displays and ``except`` clauses (ceval.c: ``format_kwargs_error``, ``check_args_iterable``,
``check_except_type_valid``). They work on values of either domain: the domain's ``python_type`` gives the
type of a value, and a symbolic value's ``real_object`` (when it has one) names a callable. Torch-free."""
from __future__ import annotations

from typing import Any

from .bytecode import since
from .interpreter import NULL, UserException

CANNOT_CATCH = "catching classes that do not inherit from BaseException is not allowed"


class DuplicateKeyword(KeyError):
    """A keyword given twice to a call (``_PyDict_MergeEx`` in DICT_MERGE); DICT_MERGE words the TypeError."""


def function_str(fn: Any) -> str:
    """``_PyObject_FunctionStr``: ``module.qualname()`` (no module for builtins)."""
    real_object = getattr(fn, "real_object", None)
    if callable(real_object):           # a symbolic value
        obj = real_object()
        if obj is NULL:
            return f"{getattr(fn, 'qualname', None) or fn.describe()}()"
        fn = obj
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(qualname, str):
        return str(fn)
    module = getattr(fn, "__module__", None)
    if isinstance(module, str) and module != "builtins":
        return f"{module}.{qualname}()"
    return f"{qualname}()"


def not_iterable(t: type) -> bool:
    """No ``tp_iter`` and not ``PySequence_Check`` (``__getitem__`` on a non-dict)."""
    return not hasattr(t, "__iter__") and not (hasattr(t, "__getitem__") and not issubclass(t, dict))


def check_star_args(f, fn, args) -> None:
    t = f.dom.python_type(args)
    if t is not tuple and not_iterable(t):
        raise UserException(TypeError(
            f"{function_str(fn)} argument after * must be an iterable, not {t.__name__}"))


def kwargs_error(f, fn, kwargs, ue: UserException) -> UserException:
    """DICT_MERGE's error for a ``**`` argument: not a mapping, a repeated keyword or a non-string key."""
    exc = ue.exc
    if isinstance(exc, AttributeError):
        t = f.dom.python_type(kwargs)
        return UserException(TypeError(
            f"{function_str(fn)} argument after ** must be a mapping, not {t.__name__}"))
    if isinstance(exc, KeyError) and len(exc.args) == 1 and (
            isinstance(exc, DuplicateKeyword) or _any_key_error_is_a_duplicate()):
        key = exc.args[0]
        if not isinstance(key, str):
            return UserException(TypeError(f"{function_str(fn)} keywords must be strings"))
        return UserException(TypeError(f"{function_str(fn)} got multiple values for keyword argument '{key}'"))
    return ue


def _any_key_error_is_a_duplicate() -> bool:
    """3.11 only rewords the KeyError of a repeated keyword; 3.12+ any KeyError while merging (also one
    raised by a mapping's ``__getitem__``)."""
    return since((3, 12), "DICT_MERGE error wording")


def check_except_type(t: Any) -> None:
    items = t if isinstance(t, tuple) else (t,)
    for c in items:
        if not (isinstance(c, type) and issubclass(c, BaseException)):
            raise UserException(TypeError(CANNOT_CATCH))
