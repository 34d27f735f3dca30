"""Python subclasses of the built-in containers dict, OrderedDict, set, frozenset and list.

Such an object (transformers' ModelOutput, a ``class CustomSet(set)``) is an ``ObjectVar``: its attributes
live in the overlay, and its items in ``base_part``, a ``DictVar``/``SetVar`` of the base type. Whatever the
class inherits from its C base (``add``, ``__or__``, ``__iter__``, ``super().__getitem__(k)``) acts on that
part, as CPython's base-type slots act on the object's C storage; methods the class overrides in Python run as
Python code. What a base method returns is the base type's (``SetSub("ab") | x`` is a ``set``), as in CPython.
"""
from __future__ import annotations

import collections
import types
from dataclasses import dataclass
from typing import Any

from . import dunders
from . import rules as R
from .interpreter import NULL, UserException
from .sources import Source, literal
from .values import Const, DictVar, ListVar, ObjectVar, SetVar, TupleVar, Value, is_immutable, is_python_class

BASES = (dict, collections.OrderedDict, set, frozenset, list)
NEWS = tuple(b.__dict__["__new__"] for b in (dict, set, frozenset, list))
_HEAPTYPE = 1 << 9          # Py_TPFLAGS_HEAPTYPE: a class made by a class statement


_HARMLESS = ("__init__", "__repr__", "__str__", "__init_subclass__", "__class_getitem__", "__doc__",
             "__new__", "__hash__")
_DICT_NAMES = frozenset(n for n in dir(dict) if n not in _HARMLESS)


def overrides_dict(t: type) -> bool:
    """Whether a dict subclass defines in Python a method of dict's that the trace would otherwise run as
    dict's (``__setitem__``, ``update``, ``get``...): it is then an object whose overrides run, not a plain
    dict value."""
    for k in t.__mro__:
        if k in (dict, collections.OrderedDict, collections.defaultdict):
            return False
        if not _DICT_NAMES.isdisjoint(k.__dict__):
            return True
    return False


def container_base(cls: type) -> type | None:
    """The built-in container type a Python subclass stores its items in; None when another type written in C
    (defaultdict, Counter's C helpers aside) comes first in the MRO."""
    for k in cls.__mro__:
        if k in BASES:
            return k
        if not k.__flags__ & _HEAPTYPE:
            return None
    return None


@dataclass(frozen=True, slots=True)
class BaseItemSource(Source):
    """An item of an existing container-subclass object read through its base type (``dict.__getitem__(o, k)``),
    so guards and glue do not run the class's own ``__getitem__``."""
    base: Source
    key: Any
    owner: type

    def _expr(self, cg):
        return f"{cg.bind(self.owner, self.owner.__name__)}.__getitem__({self.base.expr(cg)}, {literal(self.key, cg)})"

    def name_hint(self):
        return f"{self.base.name_hint()}_{self.key}"


@dataclass(frozen=True, slots=True)
class PartSource(Source):
    """The C storage of an existing container-subclass object: the object itself, written back through its
    base type's methods (``glue._effect``): the class's own overrides do not run when changes are replayed."""
    base: Source
    owner: type

    def _expr(self, cg):
        return self.base.expr(cg)

    def name_hint(self):
        return self.base.name_hint()


def part_of(v: Value, d=None):
    """The base part of ``v``, a container-subclass object, else None. For an object that existed before the call
    (given the domain ``d``), the part is made on first use from the object's items as its C base stores them,
    guarded on its keys (dict) or members (set); it is read-only (see ``part_method``)."""
    if not isinstance(v, ObjectVar):
        return None
    if v.base_part is None and d is not None and not v.is_new and v.source is not None:
        base = container_base(type(v.obj))
        if base is not None:
            v.base_part = _existing_part(d, v, base)
    return v.base_part


def _existing_part(d, v: ObjectVar, base: type):
    obj, src = v.obj, v.source
    e = src.expr(d.cg)
    if base in (set, frozenset):
        members = frozenset(base.__iter__(obj))
        if not all(is_immutable(k) for k in members):
            return None
        d.guards.add(f"{base.__name__}.__eq__({e}, {d.cg.bind(members, 'members')})", f"members of {d.cg.plain(src)}")
        return SetVar({k: Const(k) for k in members}, PartSource(src, base), obj, frozen=base is frozenset)
    if base is list:        # items by position (a list's iteration gives values, not keys)
        n = list.__len__(obj)
        d.guards.add(f"{d.cg.bind(list, 'list')}.__len__({e}) == {n}", f"{d.cg.plain(src)} has {n} items")
        return ListVar([d.wrap(list.__getitem__(obj, i), BaseItemSource(src, i, list)) for i in range(n)],
                       PartSource(src, list), obj)
    keys = list(base.__iter__(obj))
    if not all(is_immutable(k) for k in keys):
        return None
    d.guards.add(f"tuple({d.cg.bind(base, base.__name__)}.__iter__({e})) == {literal(tuple(keys), d.cg)}",
                 f"keys of {d.cg.plain(src)} are {keys!r}")
    items = {k: d.wrap(base.__getitem__(obj, k), BaseItemSource(src, k, base)) for k in keys}
    return DictVar(items, {k: Const(k) for k in keys}, base, PartSource(src, base), obj)


def base_operand(v: Value, dunder: str, lookup, d=None) -> Value:
    """The operand an operator acts on: the base part when ``v``'s class inherits ``dunder`` from its C base
    (not a Python override), else ``v`` itself. An existing object's part is not given to in-place operators."""
    if not isinstance(v, ObjectVar) or type(lookup(type(v.obj), dunder)) is types.FunctionType:
        return v
    if not v.is_new and dunder in dunders.INPLACE:
        return v
    part = part_of(v, d)
    return v if part is None else part


def applies(fn, v: Value, d=None) -> bool:
    """Whether ``fn``, a method of a built-in container written in C, acts on ``v``'s base part."""
    part = part_of(v, d)
    owner = getattr(fn, "__objclass__", None)
    return part is not None and isinstance(owner, type) and issubclass(part.python_type(), owner)


def construct(d, f, cls: type, args, kwargs, lookup) -> ObjectVar:
    """``cls(*args, **kwargs)`` for a subclass whose ``__new__`` is its container base's."""
    ov = new_instance(d, f, container_base(cls), cls, args, kwargs)
    run_init(d, f, ov, args, kwargs, lookup)
    return ov


def new_instance(d, f, base: type, cls: type, args, kwargs) -> Value:
    """``base.__new__(cls, *args)`` for a built-in container ``base``: the exact type gives a plain container
    value, a subclass a new ObjectVar with an empty base part (a frozenset's items come with ``__new__``;
    the others ignore the arguments, which ``__init__`` takes)."""
    if not (isinstance(cls, type) and issubclass(cls, base)):
        b = base.__name__
        raise UserException(TypeError(f"{b}.__new__({cls.__name__}): {cls.__name__} is not a subtype of {b}"
                                      if isinstance(cls, type) else
                                      f"{b}.__new__(X): X is not a type object ({type(cls).__name__})"))
    if base is frozenset:
        if kwargs:
            raise UserException(TypeError(f"{cls.__name__}() takes no keyword arguments"))
        if len(args) > 1:
            raise UserException(TypeError(f"{cls.__name__} expected at most 1 argument, got {len(args)}"))
        part = SetVar({}, frozen=True)
        for x in (d.unpack_all(f, args[0]) if args else []):
            part.items[d.hash_key(f, x)] = x
    else:
        # dict.__new__(cls) for an OrderedDict subclass (OrderedDict inherits dict's __new__) makes its
        # container part an OrderedDict: the class's C base, not the type whose __new__ ran
        store = container_base(cls) if isinstance(cls, type) else None
        store = store if store is not None and issubclass(store, base) else base
        part = SetVar({}) if base is set else ListVar([]) if base is list else DictVar({}, {}, store)
    if cls is base:
        return part
    try:
        obj = base.__new__(cls)
    except TypeError as e:
        raise UserException(e) from None
    ov = ObjectVar(obj, None, is_new=True)
    ov.base_part = part
    d.new_objects.append(ov)
    return ov


def run_init(d, f, ov: ObjectVar, args, kwargs, lookup) -> None:
    """``type(ov).__init__(ov, *args, **kwargs)``, as ``type.__call__`` runs it after ``__new__``."""
    init = lookup(type(ov.obj), "__init__")
    frozen = isinstance(ov.base_part, SetVar) and ov.base_part.frozen
    if type(init) is types.FunctionType:
        r = d.inline(f, init, [ov] + list(args), kwargs)
        if not (type(r) is Const and r.value is None):
            raise UserException(TypeError("__init__() should return None"))
    elif not frozen and getattr(init, "__objclass__", None) in BASES:
        part_method(d, f, ov, "__init__", list(args), kwargs)
    elif not frozen:
        raise d.unsupported(f, f"creating {type(ov.obj).__name__}: its __init__ is not Python code")


def part_method(d, f, ov: ObjectVar, name: str, args, kwargs) -> Value:
    """The base type's method ``name`` run on ``ov``'s items."""
    part = ov.base_part
    if not ov.is_new and name == "__init__":
        raise d.unsupported(f, f"calling {part.python_type().__name__}.__init__ again on an existing "
                               f"{type(ov.obj).__name__} object")
    if name == "__init__":
        if isinstance(part, SetVar):
            if kwargs:
                raise UserException(TypeError(f"{type(ov.obj).__name__}() takes no keyword arguments"))
            if len(args) > 1:
                raise UserException(TypeError(f"set expected at most 1 argument, got {len(args)}"))
            part.items.clear()
        elif isinstance(part, ListVar):
            if kwargs or len(args) > 1:
                raise UserException(TypeError(f"list expected at most 1 argument, got {len(args) + len(kwargs)}"))
            part.items.clear()
        elif len(args) > 1:
            raise UserException(TypeError(f"dict expected at most 1 argument, got {len(args)}"))
        name = "extend" if isinstance(part, ListVar) else "update"
        if not args and not kwargs:
            return Const(None)
    if name in ("__repr__", "__str__"):
        return Const(repr(_real_copy(d, f, ov)))
    if name == "__iter__":
        return d.iter(f, part)
    if name == "__len__":
        return Const(len(part.items))
    if name == "__contains__":
        return d.contains(f, args[0], part, False)
    r = R.METHOD.find(type(part))(d, f, part, name, args, kwargs)
    if r is part:       # an in-place operator gives the object back; a frozenset subclass copies to a frozenset
        return SetVar(dict(part.items), frozen=True) if name == "copy" else ov
    return r


def _real_copy(d, f, ov: ObjectVar):
    """A real object of ``ov``'s class holding its items (constants), made through the base type: what the
    base's ``__repr__`` prints (``CustomSet({'a'})``, a dict subclass as a dict)."""
    part, cls = ov.base_part, type(ov.obj)
    items = d.as_python(f, part)
    if isinstance(part, SetVar) and part.frozen:
        return frozenset.__new__(cls, items)
    base = part.python_type()
    real = base.__new__(cls)
    (base.extend if base is list else base.update)(real, items)
    return real


def reconstruct(glue, v: ObjectVar, name: str, cls: str) -> None:
    """Glue that rebuilds a new container-subclass object: the C base makes it and takes its items, so the
    class's own overrides (``__setitem__``, ``add``) do not run again."""
    part = v.base_part
    if isinstance(part, SetVar) and part.frozen:
        items = ", ".join(glue.expr(x) for x in part.items.values())
        glue.creations.append(f"{name} = frozenset.__new__({cls}, ({items}{',' if items else ''}))")
        return
    base = glue.cg.bind(part.python_type(), part.python_type().__name__)
    glue.creations.append(f"{name} = {base}.__new__({cls})")
    if isinstance(part, ListVar):
        glue.fills.append(f"{base}.extend({name}, [{', '.join(glue.expr(x) for x in part.items)}])")
    elif isinstance(part, SetVar):
        for x in part.items.values():
            glue.fills.append(f"{base}.add({name}, {glue.expr(x)})")
    else:
        for k, x in part.items.items():
            glue.fills.append(f"{base}.__setitem__({name}, {glue.expr(part.keys[k])}, {glue.expr(x)})")



def is_structseq(cls: type) -> bool:
    """A C struct sequence type (``torch.return_types.max``, ``os.stat_result``): a tuple of named fields."""
    return issubclass(cls, tuple) and isinstance(getattr(cls, "n_sequence_fields", None), int) \
        and not is_python_class(cls)


def structseq(d, f, cls: type, seq: Value) -> Value:
    """``cls(seq)`` of a struct sequence type: a tuple of ``cls`` holding ``seq``'s items (all of its fields
    in the sequence part; anything else is refused as CPython would or left to a graph break)."""
    items = d.call(f, Const(tuple), [seq], {}).items
    if cls.n_sequence_fields != cls.n_fields:
        raise d.unsupported(f, f"creating a {cls.__qualname__} object (it has fields outside its sequence)")
    if len(items) != cls.n_fields:
        raise UserException(TypeError(f"{cls.__module__}.{cls.__qualname__}() takes a {cls.n_fields}-sequence "
                                      f"({len(items)}-sequence given)"))
    return TupleVar(items, cls)


__all__ = ["BASES", "NEWS", "container_base", "part_of", "base_operand", "applies", "construct", "part_method",
           "reconstruct", "replay_part", "PartSource", "is_structseq", "structseq", "NULL"]


def replay_part(glue, v: Value, s: str, reads: list, read) -> str:
    """The statement that writes an existing container-subclass object's changed items back through its base
    type (``list.__setitem__(obj, slice(None), [...])``, ``dict.clear`` then ``dict.__setitem__`` per item):
    the class's own ``__setitem__``/``update`` overrides do not run again."""
    base = glue.cg.bind(v.source.owner, v.source.owner.__name__)
    if isinstance(v, ListVar):
        return f"{base}.__setitem__({s}, slice(None), {read(reads, glue.expr(ListVar(v.items)))})"
    if isinstance(v, SetVar):
        return f"{base}.clear({s}); {base}.update({s}, {read(reads, glue.expr(SetVar(v.items)))})"
    items = read(reads, glue.expr(DictVar(v.items, v.keys)))
    return f"{glue.cg.bind(_refill, 'refill')}({base}, {s}, {items})"


def _refill(base: type, obj: Any, items: dict) -> None:
    base.clear(obj)
    for k, x in items.items():
        base.__setitem__(obj, k, x)



_SCALAR_BASES = {str: "__str__", int: "__int__", float: "__float__"}     # the base value, as a plain object


def scalar_base_call(d, f, fn, args, kwargs):
    """``fn``, a method written in C of ``str``/``int``/``float``, called on an existing instance of a Python
    subclass (``torch.__version__``, a ``TorchVersion``): such a method reads only the immutable base value
    and returns base-type objects, so it runs on that value, guarded (the subclass's own attributes are not
    read). NotImplemented where this does not apply (a new instance, another owner, a class whose
    ``__str__`` or ``__repr__`` is Python code, which ``str.__format__`` may call)."""
    v, owner = args[0], getattr(fn, "__objclass__", None)
    if owner not in _SCALAR_BASES or not isinstance(v, ObjectVar) or v.is_new or v.source is None:
        return NotImplemented
    t = type(v.obj)
    own = ("__str__", "__repr__", "__format__")
    if any(n in k.__dict__ for k in t.__mro__ if is_python_class(k) for n in own):
        return NotImplemented
    conv = getattr(owner, _SCALAR_BASES[owner])
    value = conv(v.obj)
    e = v.source.expr(d.cg)
    d.guards.add(f"{d.cg.bind(conv, 'base_value')}({e}) == {literal(value, d.cg)}",
                 f"{d.cg.plain(v.source)} has the {owner.__name__} value {value!r}")
    if fn.__name__ == "__iter__":       # an iterator over the value's items, as the trace iterates one
        return d.iter(f, Const(value))
    return d.call(f, Const(fn), [Const(value), *args[1:]], kwargs)
