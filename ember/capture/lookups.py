"""Guards for how an attribute lookup was resolved: where the name was found, and where it was not.

A trace that read ``obj.name`` from the instance guards the value at that source, which fails once the
attribute is gone. Every other outcome depends on places where the name was *absent*:
``getattr(self, "scale", 1)`` falling back to its default, ``hasattr(cfg, "flag")`` being False, a method
found on the class because the instance does not shadow it, a ``__getattr__`` fallback, a name missing from
a module. Those absences are guarded here, both ways:

* the instance ``__dict__``: ``'name' not in __d`` on the dict read once per call (the source
  ``obj.__dict__`` is hoisted, and shared with the module attribute reads of ``InstAttrSource``);
* a module's ``_parameters``/``_buffers``/``_modules`` (read once per call too);
* the class MRO: for each class up to the one that defines the name, ``'name' not in <its __dict__>``, and
  ``<owner's __dict__>.get('name') is <what was found>``. Immutable types (``object``, builtins) are skipped,
  and the check depends only on the class, so it is shared by every instance of it (guards are deduplicated);
* a ``__slots__`` member that was unset: the descriptor still finds nothing;
* a module or class used as a namespace (``utils.act``, ``getattr(Cls, "x", 0)``): its ``__dict__``
  (trusted libraries such as torch are not guarded, like their globals).

Names are emitted through ``ember.emit`` (any string is safe). Costs ~20-40 ns per clause, and only lookups
whose outcome rests on an absence get them.
"""
from __future__ import annotations

from typing import Any

from ..emit import py_str
from .interpreter import NULL
from .sources import InstAttrSource, Source, instance_dict_source

_IMMUTABLETYPE = 1 << 8     # Py_TPFLAGS_IMMUTABLETYPE: attributes cannot be set (object, int, ...)


def _mutable(k: type) -> bool:
    return not (k.__flags__ & _IMMUTABLETYPE)


def class_lookup(d: Any, t: type, name: str, found: Any = NULL) -> None:
    """Guard that looking ``name`` up on class ``t`` (guarded by identity elsewhere) still resolves to
    ``found`` (NULL: to nothing)."""
    cg, key = d.cg, py_str(name)
    parts = []
    for k in t.__mro__:
        kd = k.__dict__
        if name in kd:
            if _mutable(k):
                # a subscript, not ``.get``: cheaper, and a deleted name raises (a miss) where ``.get`` gave
                # None, which passed for a name that resolved to None
                parts.append(f"{cg.bind_class_dict(k)}[{key}] is {cg.bind(kd[name], 'found')}")
            break
        if _mutable(k):
            parts.append(f"{key} not in {cg.bind_class_dict(k)}")
    if parts:
        what = "nothing" if found is NULL else f"the {type(found).__name__} it found"
        d.guards.add(" and ".join(parts), f"{t.__qualname__}.{name} resolves to {what}")


def resolved_type_attr(d: Any, t: type, name: str) -> Any:
    """``name`` looked up on class ``t`` (without the descriptor protocol; NULL when absent), guarded to
    resolve the same way on every later call. For the methods a trace finds on the class and inlines (a
    module's ``forward`` and ``__call__``, an object's ``__call__``): a method patched onto the class after
    the compile (``Block.forward = ...``) must run, not the one traced."""
    found = NULL
    for k in t.__mro__:
        if name in k.__dict__:
            found = k.__dict__[name]
            break
    class_lookup(d, t, name, found)
    return found


def namespace_lookup(d: Any, obj: Any, name: str, found: Any = NULL) -> None:
    """Guard ``getattr(obj, name)`` on a module or class (known by identity) still finding ``found`` (NULL:
    nothing). The namespaces of trusted libraries (``SymbolicDomain._trusted_globals``: torch, the standard
    library) are not guarded, like their globals."""
    if isinstance(obj, type):
        if not d._trusted_globals({"__name__": getattr(obj, "__module__", "")}):
            class_lookup(d, obj, name, found)
        return
    ns = getattr(obj, "__dict__", None)
    if type(ns) is not dict or d._trusted_globals(ns):
        return
    key = py_str(name)
    if found is NULL:
        d.guards.add(f"{key} not in {d.cg.bind(ns, 'G')}", f"module {obj.__name__}.{name} is not defined")
    elif ns.get(name, NULL) is found:   # (not one a module-level __getattr__ makes)
        d.guards.add(f"{d.cg.bind(ns, 'G')}[{key}] is {d.cg.bind(found, 'found')}",
                     f"module {obj.__name__}.{name} is the same object")


def has_instance_dict(obj: Any) -> bool:
    try:
        return type(object.__getattribute__(obj, "__dict__")) is dict
    except AttributeError:
        return False


def not_in_instance(d: Any, src: Source | None, obj: Any, name: str) -> None:
    """Guard that ``name`` is not in the instance ``__dict__`` of the object at ``src``."""
    if src is None or not has_instance_dict(obj):
        return
    inst = instance_dict_source(src, obj)
    d.cg.hoist(inst)
    d.guards.add(f"{py_str(name)} not in {inst.expr(d.cg)}",
                 f"{d.cg.plain(src)} has no instance attribute {name!r}")


MODULE_DICTS = ("_parameters", "_buffers", "_modules")


def not_in_module(d: Any, src: Source | None, obj: Any, name: str) -> None:
    """Guard that ``name`` is not in a module's instance ``__dict__``, parameters, buffers or submodules."""
    if src is None:
        return
    not_in_instance(d, src, obj, name)
    key = py_str(name)
    parts = []
    for dict_name in MODULE_DICTS:
        if isinstance(obj.__dict__.get(dict_name), dict):
            holder = InstAttrSource(src, dict_name)
            d.cg.hoist(holder)
            parts.append(f"{key} not in {holder.expr(d.cg)}")
    if parts:
        d.guards.add(" and ".join(parts), f"{d.cg.plain(src)} has no parameter, buffer or submodule {name!r}")


def _slot_empty(desc: Any, obj: Any) -> bool:
    try:
        desc.__get__(obj, type(obj))
    except AttributeError:
        return True
    return False


def slot_empty(d: Any, src: Source | None, desc: Any, name: str) -> None:
    """Guard that the ``__slots__`` member ``desc`` of the object at ``src`` is still unset."""
    if src is None:
        return
    d.guards.add(f"{d.cg.bind(_slot_empty, 'slot_empty')}({d.cg.bind(desc, 'slot')}, {src.expr(d.cg)})",
                 f"{d.cg.plain(src)}.{name} is unset")


def not_readable(d: Any, src: Source | None, name: str) -> None:
    """Guard that reading ``name`` from the object at ``src`` still raises AttributeError (a class with its
    own ``__getattribute__``, read through it)."""
    if src is None:
        return
    d.guards.add(f"not hasattr({src.expr(d.cg)}, {py_str(name)})",
                 f"{d.cg.plain(src)} has no attribute {name!r}")
