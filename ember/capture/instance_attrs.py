"""Attributes of the real object behind a traced value: its instance ``__dict__`` read through the value's source,
and the guard that an attribute the trace found absent is still absent (issue 32, PyTorch's test_dicts.py)."""
from __future__ import annotations

from typing import Any

from .interpreter import NULL
from .sources import AttrSource


def is_data_descriptor(a: Any) -> bool:
    t = type(a)
    return (hasattr(t, "__set__") or hasattr(t, "__delete__")) and hasattr(t, "__get__")


def real_instance_attr(d, v, cattr: Any, name: str):
    """``name`` from the instance ``__dict__`` of the real object behind a container subclass value (a dict
    subclass is a DictVar, so ``sd.attr = 4`` set before the call lives only on the real object), read and
    guarded through its source as ObjectVar reads them; NULL when it has none. ``cattr`` is the class's
    attribute of that name: a data descriptor there wins, as in Python."""
    obj = getattr(v, "obj", NULL)
    inst = getattr(obj, "__dict__", None) if obj is not NULL else None
    if not inst or name not in inst or is_data_descriptor(cattr):
        return NULL
    return d.wrap(inst[name], AttrSource(v.source, name) if v.source else None)


def guard_absent(d, v, name: str) -> None:
    """The trace saw no attribute ``name`` on the real object behind ``v`` (``getattr(o, name, default)``,
    ``hasattr``): guard that it still has none, or a call after ``o.name = ...`` would reuse the default."""
    obj = getattr(v, "obj", NULL)
    if v.source is not None and obj is not NULL and isinstance(getattr(obj, "__dict__", None), dict):
        d.guards.attr_absent(v.source, name)
