"""The real key a dict or set of the trace files a value under (``SymbolicDomain.hash_key``): the constant,
the existing object (guarded by identity where the trace relies on it), a tuple or frozenset of keys, or an
identity key for an object made in the trace."""
from __future__ import annotations

import dataclasses
from typing import Any

from .identity import guard_address
from .interpreter import NULL, UserException
from .values import Const, DictVar, ListVar, NotConst, SetVar, TupleVar, Value

_HASHED_BY_VALUE = frozenset({str, bytes, int, float, complex, bool, tuple, frozenset, type(None), range, slice})


def hash_key(d, f, k: Value) -> Any:
    """The real dict/set key standing for value ``k``."""
    if type(k) is Const:
        return k.value
    own = getattr(k, "own_hash_key", None)      # a value that is its own key (a fresh hook id: hook_ids.py)
    if own is not None:
        return own()
    part = getattr(k, "base_part", None)
    if part is not None and type(k.obj).__hash__ in (None, frozenset.__hash__):
        k = part        # a new dict/set/frozenset-subclass object hashes as its base type does
    ro = k.real_object()
    if getattr(k, "is_new", False) and type(ro).__hash__ not in (object.__hash__, None):
        # an object made in the trace whose class hashes by value (a frozen dataclass): its real object is
        # a bare instance whose fields live in the trace, so neither its real hash nor identity is right
        twin = _dataclass_twin(d, f, k, type(ro))
        if twin is not None:
            return twin
        raise d.unsupported(f, f"using a new {type(ro).__name__} object (its class defines __hash__) as "
                              "a dict key or set member")
    if ro is NULL and id(k) in d.real_of:
        # an existing object whose value has no real_object (a tensor input): its identity is the key, as
        # in the existing dicts it may be looked up in; the trace then holds only for that same object
        ro = d.real_of[id(k)]
        if k.source is not None:
            d.guards.id_match(k.source, ro)
    if ro is not NULL and not isinstance(k, (ListVar, DictVar, SetVar)):
        if type(ro).__hash__ is object.__hash__:
            guard_address(d, k, ro)     # found (or not) among the other keys by identity
        return ro
    if isinstance(k, TupleVar):
        return tuple(hash_key(d, f, x) for x in k.items)
    if isinstance(k, (ListVar, DictVar, SetVar)) and not (isinstance(k, SetVar) and k.frozen):
        raise UserException(TypeError(f"unhashable type: '{k.python_type().__name__}'"))
    if isinstance(k, SetVar):       # a frozenset hashes by value: the frozenset of its items' keys
        return frozenset(k.items)
    if k.python_type() is int:          # a symbolic int: its value (specialized)
        try:
            return k.as_python()
        except NotConst:
            pass
    if k.python_type() in _HASHED_BY_VALUE:
        # a str/float/... whose value the trace does not know (a resumed frame's opaque stack entry): an
        # identity key would never match the equal key already in the container
        raise d.unsupported(f, f"using a {k.describe()} as a dict key or set member")
    return _Identity(k)


class _Identity:
    """A dict key standing for a value hashed by identity (objects made during the trace)."""
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __hash__(self):
        return id(self.v)

    def __eq__(self, other):
        return type(other) is _Identity and other.v is self.v


def _generated(fn) -> bool:
    """Whether a dataclass method is the one ``dataclasses`` wrote (exec'd source), not the class's own."""
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_filename == "<string>"


def _dataclass_twin(d, f, k: Value, cls: type) -> Any:
    """For a new instance of a dataclass whose ``__eq__`` and ``__hash__`` are the generated ones (they
    compare and hash the tuple of its fields), a real instance with the fields' keys: equal to, and hashed
    as, any existing equal instance, as the trace's object would be. None where that does not hold."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.eq or not (_generated(cls.__dict__.get("__hash__"))
                                               and _generated(cls.__dict__.get("__eq__"))):
        return None
    twin = object.__new__(cls)
    for field in dataclasses.fields(cls):
        v = d.getattr(f, k, field.name)
        key = hash_key(d, f, v)
        if not (type(v) is Const or (dataclasses.is_dataclass(key) and type(key) is not type)):
            return None         # a field the trace knows only by identity, or not at all (a tensor)
        object.__setattr__(twin, field.name, key)
    return twin
