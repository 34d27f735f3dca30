"""Rules for attribute writes and deletions on user objects and functions: a class-defined ``__setattr__``
or ``__delattr__`` is inlined, a property calls its setter, anything else goes to the instance ``__dict__``
or a ``__slots__`` member (``generic_setattr``), recorded in the object's overlay and replayed by the glue."""
from __future__ import annotations

import types
from typing import Any

from . import rules as R
from .interpreter import NULL, UserException
from .instance_attrs import container_dict
from .objects import _is_data_descriptor, lookup_type_attr
from .sources import AttrSource
from .symbolic import SymbolicDomain
from .values import Const, DictVar, FuncVar, ListVar, ObjectVar, SetVar


# -- setattr ---------------------------------------------------------------------------------------------
@R.SETATTR.register(ObjectVar)
def object_setattr(d: SymbolicDomain, f, v: ObjectVar, name: str, value: Any) -> None:
    t = type(v.obj)
    if not _class_setattr(d, f, v, t, name, value):
        generic_setattr(d, f, v, name, value)


def _class_setattr(d: SymbolicDomain, f, v: Any, t: type, name: str, value: Any) -> bool:
    """What the class defines for a write (``value``) or delete (NULL) of ``name`` on ``v`` runs, as CPython
    runs it: its own ``__setattr__``/``__delattr__``, a property, or a descriptor with ``__set__``/
    ``__delete__``. False when none applies (the caller's instance-dict write)."""
    sa = lookup_type_attr(t, "__setattr__" if value is not NULL else "__delattr__")
    if sa is not NULL and type(sa) is types.FunctionType:
        d.inline(f, sa, [v, Const(name)] + ([value] if value is not NULL else []), {})
        return True
    cattr = lookup_type_attr(t, name)
    if cattr is not NULL and type(cattr) is property:
        fn = cattr.fset if value is not NULL else cattr.fdel
        if fn is None:
            raise UserException(AttributeError(f"can't set attribute {name!r}"))
        d.call(f, Const(fn), [v] + ([value] if value is not NULL else []), {})
        return True
    if cattr is not NULL and type(cattr) is not types.MemberDescriptorType and _writes_through(cattr):
        _descriptor_set(d, f, v, cattr, name, value)
        return True
    return False


def _writes_through(cattr: Any) -> bool:
    """Whether a class attribute takes over writes of its name on instances: its type defines ``__set__`` or
    ``__delete__`` (CPython's ``tp_descr_set``), with or without a ``__get__``."""
    t = type(cattr)
    return lookup_type_attr(t, "__set__") is not NULL or lookup_type_attr(t, "__delete__") is not NULL


def _descriptor_set(d: SymbolicDomain, f, v: ObjectVar, cattr: Any, name: str, value: Any) -> None:
    """``obj.name = value`` / ``del obj.name`` through a data descriptor: its ``__set__``/``__delete__``
    runs, as CPython's generic setattr does; the instance ``__dict__`` is not written."""
    meth = "__set__" if value is not NULL else "__delete__"
    fn = lookup_type_attr(type(cattr), meth)
    if type(fn) is not types.FunctionType:
        if fn is NULL:
            raise UserException(AttributeError(meth))
        raise d.unsupported(f, f"assigning attribute {name!r} through a {type(cattr).__name__}")
    d.inline(f, fn, [d.wrap(cattr, None), v] + ([value] if value is not NULL else []), {})


def generic_setattr(d: SymbolicDomain, f, v: ObjectVar, name: str, value: Any) -> None:
    """``object.__setattr__``/``__delattr__``: instance ``__dict__`` or a slot."""
    t = type(v.obj)
    is_slot = type(lookup_type_attr(t, name)) is types.MemberDescriptorType
    if not is_slot and lookup_type_attr(t, "__dict__") is NULL:
        raise UserException(AttributeError(_no_dict_message(t, name, d.py)))
    if value is NULL and not _has_own_attr(d, f, v, name, is_slot):
        msg = name if is_slot else f"'{t.__name__}' object has no attribute '{name}'"
        raise UserException(AttributeError(msg))
    if v.is_new and value is NULL:       # a new object's overlay is its whole __dict__: no deletion marks
        del v.overlay[name]
        if v.attrs is not None:
            del v.attrs.keys[name]
    else:
        v.overlay[name] = value
        if v.attrs is not None and v.is_new:
            v.attrs.keys.setdefault(name, Const(name))
    if v.attrs is not None and not v.is_new:      # an existing object's __dict__ was read: keep it in step
        if value is NULL:
            v.attrs.items.pop(name, None)
            v.attrs.keys.pop(name, None)
        else:
            v.attrs.items[name] = value
            v.attrs.keys.setdefault(name, Const(name))
        d.mark_mutated(v.attrs)
    d.mark_mutated(v)


def _no_dict_message(t: type, name: str, py: tuple[int, int]) -> str:
    if py in ((3, 11), (3, 12)):
        return f"'{t.__name__}' object has no attribute '{name}'"
    if py == (3, 13):
        return f"'{t.__name__}' object has no attribute '{name}' and no __dict__ for setting new attributes"
    raise NotImplementedError(f"attribute error text on CPython {py[0]}.{py[1]} is not known to ember")


def _has_own_attr(d: SymbolicDomain, f, v: ObjectVar, name: str, is_slot: bool) -> bool:
    """Whether the instance itself (not its class) holds ``name``: what ``del obj.name`` needs."""
    if v.attrs is not None and not v.is_new and not is_slot:
        return name in v.attrs.items
    if name in v.overlay:
        return v.overlay[name] is not NULL
    if v.is_new:
        return False
    if is_slot:
        try:
            d.getattr(f, v, name)
            return True
        except UserException as ue:
            if isinstance(ue.exc, AttributeError):
                return False
            raise
    inst = getattr(v.obj, "__dict__", None)
    if inst is None or name not in inst:
        return False
    d.wrap(inst[name], AttrSource(v.source, name) if v.source else None)     # guards that it is there
    return True


@R.SETATTR.register(DictVar, ListVar, SetVar)
def _container_setattr(d: SymbolicDomain, f, v, name: str, value: Any) -> None:
    """An attribute write on a dict/list/set-subclass object that existed before the call: a class-defined
    ``__setattr__``/``__delattr__``, a property or a data descriptor runs; anything else goes into the
    object's instance ``__dict__`` (replayed on the real object as that dict's changes)."""
    t = v.python_type()
    if _class_setattr(d, f, v, t, name, value):
        return
    cattr = lookup_type_attr(t, name)
    dv = container_dict(d, v) if cattr is NULL or not _is_data_descriptor(cattr) else None
    if dv is None:
        raise d.unsupported(f, f"{'deleting' if value is NULL else 'setting'} attribute {name!r} on a "
                               f"{t.__name__} value")
    if value is NULL:
        d.delitem(f, dv, Const(name))
    else:
        d.setitem(f, dv, Const(name), value)


# attributes of a function made in the trace that it may set (what functools.update_wrapper writes, and any
# plain name, which goes in the function's __dict__); the glue sets them on the function it makes
_FUNC_WRITABLE = {"__module__", "__name__", "__qualname__", "__doc__", "__annotations__", "__wrapped__",
                  "__dict__"}


@R.SETATTR.register(FuncVar)
def _funcvar_setattr(d, f, v, name, value):
    if value is NULL or not (name in _FUNC_WRITABLE or not (name.startswith("__") and name.endswith("__"))):
        raise d.unsupported(f, f"{'deleting' if value is NULL else 'setting'} attribute {name!r} on a function")
    if name in ("__name__", "__qualname__") and not (type(value) is Const and type(value.value) is str):
        raise UserException(TypeError(f"{name} must be set to a string object"))
    if name == "__qualname__":
        v.qualname = value.value
    elif name.startswith("__") and name.endswith("__"):
        v.attrs[name] = value
    else:                           # a plain attribute lives in the function's __dict__
        d.setitem(f, d.getattr(f, v, "__dict__"), Const(name), value)
