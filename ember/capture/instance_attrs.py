"""Attribute reads that are not an object's own lookup: the instance ``__dict__`` of the real object behind a
container subclass value, the guard that an attribute the trace found absent is still absent, and the attributes
of iterators, partials, bound container methods and cells (issue 32, found by PyTorch's Dynamo tests)."""
from __future__ import annotations

import types
from typing import Any

from . import rules as R
from .interpreter import NULL, UserException
from .lookups import not_in_instance
from .sources import AttrSource, instance_dict_source
from .values import BoundMethod, CellVar, Const, IterVar, MethodOf, PartialVar, RealCellVar, TupleVar, is_immutable


def attr_error(obj_desc: str, name: str) -> UserException:
    return UserException(AttributeError(f"'{obj_desc}' object has no attribute '{name}'"))


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
    if inst is None or is_data_descriptor(cattr):
        return NULL
    seen = d.by_id.get(id(inst))
    if seen is not None and hasattr(seen, "items"):     # its __dict__ was read in the trace: it holds the writes
        return seen.items.get(name, NULL)
    if name not in inst:
        return NULL
    return d.wrap(inst[name], AttrSource(v.source, name) if v.source else None)


def container_dict(d, v):
    """The instance ``__dict__`` of the real object behind a container-subclass value that existed before the
    call (a dict/list/set subclass with attributes): its real dict, wrapped once (the same value on every
    read), so writes through it are replayed on the object and reads by name see them; None otherwise."""
    obj = v.real_object()
    if obj is NULL or v.source is None or type(obj) in (list, dict, set) or not hasattr(obj, "__dict__"):
        return None
    return d.wrap(obj.__dict__, instance_dict_source(v.source, obj))


def guard_absent(d, v, name: str) -> None:
    """The trace saw no attribute ``name`` on the real object behind ``v`` (``getattr(o, name, default)``,
    ``hasattr``): guard that it still has none, or a call after ``o.name = ...`` would reuse the default."""
    obj = getattr(v, "obj", NULL)
    if obj is not NULL:
        not_in_instance(d, v.source, obj, name)


def _method_attr(v: MethodOf, name: str):
    """``__name__``, ``__qualname__`` and ``__self__`` of a container's bound method (``lst.append``); unittest's
    ``assertRaises(exc, lst.append)`` reads ``__name__``. NULL for other names."""
    if name == "__self__":
        return v.recv
    if name not in ("__name__", "__qualname__"):
        return NULL
    owner = next((k for k in v.recv.python_type().__mro__ if v.name in vars(k)), v.recv.python_type())
    return Const(v.name if name == "__name__" else f"{owner.__qualname__}.{v.name}")


def lookup_type_attr(t: type, name: str) -> Any:
    """``name`` in the ``__dict__`` of ``t`` or a class of its MRO (no descriptor protocol), else NULL."""
    for k in t.__mro__:
        d = k.__dict__
        if name in d:
            return d[name]
    return NULL


def _partial_instance_attr(d, v: PartialVar, name: str):
    """A name that ``functools.partial`` itself does not define is an instance attribute or absent
    (``hasattr(p, "__name__")`` is False): read from the real partial's ``__dict__``, or AttributeError with
    the absence guarded. NULL for the type's own attributes (left to the caller)."""
    import functools
    if lookup_type_attr(functools.partial, name) is not NULL:
        return NULL
    real = d.real_of.get(id(v), NULL) if v.source is not None else NULL
    inst = getattr(real, "__dict__", None) if real is not NULL else None
    if inst and name in inst:
        return d.wrap(inst[name], AttrSource(v.source, name))
    if real is not NULL:
        not_in_instance(d, v.source, real, name)
    raise attr_error("functools.partial", name)


def _partial_type_attr(d, v: PartialVar, name: str):
    """An attribute ``functools.partial`` defines (``p.__eq__``, ``p.__class__``, ``p.__dict__``,
    ``hasattr(p, "__reduce__")``): its C methods bound to the partial, its class-level methods and constants as
    they are; NULL for what this does not model."""
    import functools
    a = lookup_type_attr(functools.partial, name)
    if type(a) in (types.WrapperDescriptorType, types.MethodDescriptorType):
        return BoundMethod(Const(a), v)
    if type(a) in (types.ClassMethodDescriptorType, types.BuiltinFunctionType) or is_immutable(a):
        return Const(getattr(functools.partial, name))      # __init_subclass__, __new__, __doc__, __module__
    if name == "__class__":
        return Const(functools.partial)
    if name == "__dict__":
        real = d.real_of.get(id(v), NULL) if v.source is not None else NULL
        if real is not NULL:
            return d.wrap(real.__dict__, AttrSource(v.source, "__dict__"))
        return d.from_python({})        # a partial made in the trace has no instance attributes
    return NULL


@R.GETATTR.register(IterVar, PartialVar, MethodOf, CellVar, RealCellVar)
def _misc_getattr(d, f, v, name):
    if isinstance(v, PartialVar):
        if name == "func":
            return v.func
        if name == "args":
            return TupleVar(v.args)
        if name == "keywords":
            return d._kwargs_dict(v.kwargs)
        r = _partial_instance_attr(d, v, name)
        if r is not NULL:
            return r
        r = _partial_type_attr(d, v, name)
        if r is not NULL:
            return r
    if isinstance(v, MethodOf) and _method_attr(v, name) is not NULL:
        return _method_attr(v, name)
    if isinstance(v, IterVar) and (name in ("__next__", "__iter__")
                                   or v.frame is not None and name in ("send", "throw", "close")):
        return MethodOf(v, name)
    if isinstance(v, IterVar) and v.frame is None and name in ("send", "throw", "close"):
        raise attr_error(v.describe(), name)
    raise d.unsupported(f, f"reading attribute {name!r} of a {v.describe()}")
