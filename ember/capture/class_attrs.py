"""Writes of plain data attributes on classes inside the trace (``Counter.n += 1``, ``cls.cache = {}``).

A class attribute that the program writes is kept in the domain's ``class_writes`` table (like module globals
in ``global_writes``): reads of that name on the class, on a subclass that does not define it itself, and on
instances that fall back to the class, see the written value for the rest of the trace; the glue replays the
write with ``setattr`` on the real class after the graph, in program order with the other side effects.

PyTorch's own ``RemovableHandle`` counts hook registrations with such a counter, so this is what lets a hook
registered inside the trace (``module.register_forward_hook(h)``) be captured.

Only data is handled: a write that would replace or add a function, a descriptor or a class (which method
lookups through ``lookup_type_attr`` would not see), a write on a class whose metaclass defines
``__setattr__``, on a built-in type, and deletions stay graph breaks.
"""
from __future__ import annotations

import enum
from typing import Any

from . import rules as R
from .instance_attrs import lookup_type_attr
from .interpreter import NULL, UserException
from .values import BoundMethod, Const, FuncVar, Value

_HEAPTYPE = 1 << 9      # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (built-in types are not)


def class_written(d: Any, t: type, name: str) -> Any:
    """The value the trace wrote to ``name`` on ``t`` or the base that ``t`` inherits it from; NULL if none."""
    writes = d.class_writes
    if not writes:
        return NULL
    for k in t.__mro__:
        w = writes.get((id(k), name))
        if w is not None:
            return w[2]
        if name in k.__dict__:
            return NULL
    return NULL


def _is_plain_data(x: Any) -> bool:
    """Not something attribute lookup treats specially: no function, descriptor, class or callable."""
    return not (callable(x) or isinstance(x, type)
                or lookup_type_attr(type(x), "__get__") is not NULL)


def _plain_value(v: Value) -> bool:
    if isinstance(v, (FuncVar, BoundMethod)):
        return False
    if type(v) is Const:
        return _is_plain_data(v.value)
    try:
        t = v.python_type()
    except Exception:       # noqa: BLE001 - a value that cannot say its type is not known to be plain
        return False
    return not (isinstance(t, type) and (lookup_type_attr(t, "__call__") is not NULL
                                         or lookup_type_attr(t, "__get__") is not NULL))


@R.SETATTR.register(Const)
def _const_setattr(d: Any, f, v: Const, name: str, value: Any) -> None:
    cls = v.value
    what = f"{'deleting' if value is NULL else 'setting'} attribute {name!r} on {cls!r}"
    if not isinstance(cls, type) or isinstance(cls, enum.EnumMeta):
        raise d.unsupported(f, f"{what} is not supported")
    if not cls.__flags__ & _HEAPTYPE:
        raise UserException(TypeError(f"cannot set {name!r} attribute of immutable type '{cls.__name__}'"))
    if lookup_type_attr(type(cls), "__setattr__") is not type.__setattr__:
        raise d.unsupported(f, f"{what}: its metaclass {type(cls).__name__} defines __setattr__")
    old = class_written(d, cls, name)
    if old is NULL:
        old_real = lookup_type_attr(cls, name)
        old_ok = old_real is NULL or _is_plain_data(old_real)
    else:
        old_ok = True
    if value is NULL or not old_ok or not _plain_value(value):
        raise d.unsupported(f, f"{what} (only plain data attributes of a class can be written in a trace)",
                            "write class attributes outside the compiled function")
    d.class_writes.pop((id(cls), name), None)       # replayed in the order of the last writes
    d.class_writes[(id(cls), name)] = (cls, name, value)


def replay_class_writes(glue: Any, reads: list[str], writes: list[str]) -> None:
    """The glue's ``setattr(cls, name, value)`` for each class attribute the trace wrote."""
    from ..emit import py_str
    for cls, name, v in glue.d.class_writes.values():
        c = glue.cg.bind(cls, getattr(cls, "__name__", "cls"))
        writes.append(f"setattr({c}, {py_str(name)}, {glue._value(reads, v)})")

