"""Rules for tuples, lists, dicts and sets of values: indexing, iteration, length and their methods."""
from __future__ import annotations

import collections
import itertools

from . import dunders
from . import rules as R
from .interpreter import NULL, UserException
from .symbolic import SymbolicDomain
from .values import SeqIterVar, Const, DictVar, IterVar, ListVar, SetVar, TupleVar, Value, tuple_override


def _index(d: SymbolicDomain, f, k: Value):
    if type(k) is Const and type(k.value) in (int, bool, slice):
        return k.value
    try:
        return d.as_python(f, d.call(f, Const(__import__("operator").index), [k], {}))
    except UserException:
        raise
    except Exception:
        raise d.unsupported(f, f"indexing a sequence with a {k.describe()}") from None


@R.ITER.register(TupleVar, ListVar)
def _seq_iter_rule(d, f, v):
    fn = tuple_override(v, "__iter__")
    if fn is not None:
        return d.inline(f, fn, [v], {})
    return SeqIterVar(v, f"{v.python_type().__name__} iterator")


@R.ITER.register(DictVar)
def _dict_iter_rule(d, f, v):
    return SeqIterVar([v.keys[k] for k in v.items], "dict key iterator")


@R.ITER.register(SetVar)
def _set_iter_rule(d, f, v):
    return SeqIterVar(list(v.items.values()), "set iterator")


@R.LEN.register(TupleVar, ListVar, DictVar, SetVar)
def _len(d, f, v):
    fn = tuple_override(v, "__len__")
    if fn is not None:
        return d.as_python(f, d.call(f, Const(__import__("operator").index), [d.inline(f, fn, [v], {})], {}))
    return len(v.items)


@R.TRUTH.register(TupleVar, ListVar, DictVar, SetVar)
def _truth(d, f, v):
    return bool(v.items)


@R.GETITEM.register(TupleVar, ListVar)
def _seq_getitem(d, f, v, k):
    fn = tuple_override(v, "__getitem__")
    if fn is not None:
        return d.inline(f, fn, [v, k], {})
    i = _index(d, f, k)
    try:
        r = v.items[i]
    except IndexError:
        raise UserException(IndexError(f"{v.python_type().__name__} index out of range")) from None
    except TypeError as e:
        raise UserException(e) from None
    if type(i) is slice:
        if isinstance(v, TupleVar) and v.cls is None and i.indices(len(v.items)) == (0, len(v.items), 1):
            return v            # a whole-tuple slice is the tuple itself, as in CPython
        return ListVar(r) if isinstance(v, ListVar) else TupleVar(r)
    return r


@R.SETITEM.register(ListVar)
def _list_setitem(d, f, v, k, value):
    i = _index(d, f, k)
    try:
        if value is NULL:
            del v.items[i]
        elif type(i) is slice:
            v.items[i] = d.unpack_all(f, value)
        else:
            v.items[i] = value
    except (IndexError, ValueError, TypeError) as e:
        raise UserException(type(e)(*e.args)) from None
    d.mark_mutated(v)


@R.GETITEM.register(DictVar)
def _dict_getitem(d, f, v, k):
    hk = d.hash_key(f, k)
    r = v.items.get(hk, NULL)
    if r is NULL:
        if v.default_factory is not None and not (type(v.default_factory) is Const and v.default_factory.value is None):
            r = d.call(f, v.default_factory, [], {})
            v.items[hk] = r
            v.keys[hk] = k
            d.mark_mutated(v)
            return r
        raise UserException(KeyError(hk))
    return r


@R.SETITEM.register(DictVar)
def _dict_setitem(d, f, v, k, value):
    hk = d.hash_key(f, k)
    if value is NULL:
        if hk not in v.items:
            raise UserException(KeyError(hk))
        del v.items[hk]
        del v.keys[hk]
    else:
        v.items[hk] = value
        v.keys.setdefault(hk, k)
    d.mark_mutated(v)


# -- methods ---------------------------------------------------------------------------------------------
# (fewest, most) positional arguments of the list/tuple and set methods ember runs itself, checked before they
# run: a wrong count is eager's TypeError (list.clear(1) was accepted, set.isdisjoint() an internal error)
_SEQ_ARITY = {"append": (1, 1), "extend": (1, 1), "insert": (2, 2), "pop": (0, 1), "remove": (1, 1),
              "clear": (0, 0), "reverse": (0, 0), "sort": (0, 0), "index": (1, 3), "count": (1, 1),
              "copy": (0, 0), "__getitem__": (1, 1), "__len__": (0, 0), "__contains__": (1, 1), "__iter__": (0, 0),
              "__setitem__": (2, 2), "__delitem__": (1, 1)}
_SET_ARITY = {"add": (1, 1), "discard": (1, 1), "remove": (1, 1), "pop": (0, 0), "clear": (0, 0), "copy": (0, 0),
              "isdisjoint": (1, 1), "issubset": (1, 1), "issuperset": (1, 1), "symmetric_difference": (1, 1),
              "symmetric_difference_update": (1, 1), "__contains__": (1, 1), "__len__": (0, 0),
              "__iter__": (0, 0), "__hash__": (0, 0)}


def _check_arity(table, owner: str, name: str, args) -> None:
    lo, hi = table.get(name, (0, len(args)))
    if not lo <= len(args) <= hi:
        want = f"exactly {lo}" if lo == hi else f"from {lo} to {hi}"
        raise UserException(TypeError(f"{owner}.{name}() takes {want} arguments ({len(args)} given)"))


def _args(d, f, name, args, lo, hi):
    if not lo <= len(args) <= hi:
        raise UserException(TypeError(f"{name}() takes from {lo} to {hi} arguments ({len(args)} given)"))
    return args


def _sort_key_values(d, f, items, key):
    vals = items if key is None or (type(key) is Const and key.value is None) else [
        d.call(f, key, [x], {}) for x in items]
    return [d.as_python(f, x) for x in vals]


def sort_values(d, f, items: list[Value], key=None, reverse=False) -> list[Value]:
    keys = _sort_key_values(d, f, items, key)
    try:
        order = sorted(range(len(items)), key=keys.__getitem__, reverse=bool(reverse))
    except TypeError as e:
        raise UserException(e) from None
    return [items[i] for i in order]


def _eq(d, f, a, b) -> bool:
    """PyObject_RichCompareBool(a, b, Py_EQ), as list/tuple index, count and remove compare: identity first
    (a value whose __eq__ is False, a nan, still matches itself), then ==."""
    return a is b or d.truth(f, d.compare(f, "==", a, b))


@R.METHOD.register(ListVar)
def _list_method(d: SymbolicDomain, f, v: ListVar, name, args, kwargs):
    if name in dunders.NAMES:
        return dunders.call(d, f, v, name, args)
    _check_arity(_SEQ_ARITY, "list", name, args)
    items = v.items
    if name == "append":
        items.append(_args(d, f, name, args, 1, 1)[0])
    elif name == "extend":
        src = args[0]
        if src is v or getattr(src, "base_part", None) is v:
            # the list itself (a list subclass as itself too): CPython copies its items first
            items.extend(list(items))
            d.mark_mutated(v)
            return Const(None)
        for x in d.each(f, src):            # appended as read: the iterator may look at the list
            items.append(x)
            d.mark_mutated(v)
    elif name == "insert":
        i, x = _args(d, f, name, args, 2, 2)
        items.insert(d.as_python(f, i), x)
    elif name == "pop":
        _args(d, f, name, args, 0, 1)
        if not items:
            raise UserException(IndexError("pop from empty list"))
        try:
            r = items.pop(d.as_python(f, args[0]) if args else -1)
        except IndexError as e:
            raise UserException(e) from None
        d.mark_mutated(v)
        return r
    elif name == "remove":
        for i, x in enumerate(items):
            if _eq(d, f, x, args[0]):
                del items[i]
                break
        else:
            raise UserException(ValueError("list.remove(x): x not in list"))
    elif name == "clear":
        items.clear()
    elif name == "reverse":
        items.reverse()
    elif name == "sort":
        kw = {k: x for k, x in kwargs.items()}
        rev = d.as_python(f, kw["reverse"]) if "reverse" in kw else False
        items[:] = sort_values(d, f, items, kw.get("key"), rev)
    elif name in ("index", "count", "copy", "__getitem__", "__len__", "__contains__", "__iter__"):
        return _seq_query(d, f, v, name, args)
    elif name in ("__setitem__", "__delitem__"):
        if name == "__setitem__":
            d.setitem(f, v, *args)
        else:
            d.delitem(f, v, *args)
        return Const(None)
    else:
        raise d.unsupported(f, f"list.{name}")
    d.mark_mutated(v)
    return Const(None)


def _seq_query(d, f, v, name, args):
    items = v.items
    if name == "index":         # index(x[, start[, stop]]): start and stop clamp as a slice's bounds do
        start, stop = ([d.as_python(f, a) for a in args[1:]] + [None, None])[:2]
        for i in range(*slice(start, stop).indices(len(items))):
            if _eq(d, f, items[i], args[0]):
                return Const(i)
        if isinstance(v, TupleVar):     # CPython's own wording of each type's message
            raise UserException(ValueError("tuple.index(x): x not in tuple"))
        what = d.as_python(f, d.call(f, Const(repr), [args[0]], {}))
        raise UserException(ValueError(f"{what} is not in {v.python_type().__name__}"))
    if name == "count":
        return Const(sum(1 for x in items if _eq(d, f, x, args[0])))
    if name == "copy":
        return ListVar(list(items))
    if name == "__getitem__":
        return d.getitem(f, v, args[0])
    if name == "__len__":
        return Const(len(items))
    if name == "__contains__":
        return d.contains(f, args[0], v, False)
    if name == "__iter__":
        return d.iter(f, v)
    raise d.unsupported(f, f"{v.python_type().__name__}.{name}")


@R.METHOD.register(TupleVar)
def _tuple_method(d, f, v, name, args, kwargs):
    if name in dunders.NAMES:
        return dunders.call(d, f, v, name, args)
    if v.cls is not None and name == "_asdict":
        return DictVar({k: x for k, x in zip(v.cls._fields, v.items)}, {k: Const(k) for k in v.cls._fields})
    if name in ("index", "count", "__getitem__", "__len__", "__contains__", "__iter__"):
        _check_arity(_SEQ_ARITY, "tuple", name, args)
        return _seq_query(d, f, v, name, args)
    raise d.unsupported(f, f"tuple.{name}")


def _dict_get(d, f, v, args, kwargs):
    _args(d, f, "get", args, 1, 2)
    return v.items.get(d.hash_key(f, args[0]), args[1] if len(args) > 1 else Const(None))


def _dict_setdefault(d, f, v, args, kwargs):
    hk = d.hash_key(f, args[0])
    if hk not in v.items:
        v.items[hk] = args[1] if len(args) > 1 else Const(None)
        v.keys[hk] = args[0]
        d.mark_mutated(v)
    return v.items[hk]


def _dict_pop(d, f, v, args, kwargs):
    hk = d.hash_key(f, args[0])
    if hk in v.items:
        r = v.items.pop(hk)
        del v.keys[hk]
        d.mark_mutated(v)
        return r
    if len(args) > 1:
        return args[1]
    raise UserException(KeyError(hk))


def _dict_popitem(d, f, v, args, kwargs):
    if not v.items:
        raise UserException(KeyError("popitem(): dictionary is empty"))
    last = d.as_python(f, args[0] if args else kwargs.get("last", Const(True)))    # OrderedDict's `last`
    hk = next(reversed(v.items)) if last else next(iter(v.items))
    r = TupleVar([v.keys.pop(hk), v.items.pop(hk)])
    d.mark_mutated(v)
    return r


def _update_pairs(d, f, src):
    """``dict.update``'s argument as (key, value) pairs, produced lazily (the caller stores each pair before
    the next is read, as CPython does): a mapping (``keys()``) or an iterable of pairs."""
    if isinstance(src, DictVar):
        yield from [(src.keys[k], x) for k, x in src.items.items()]
        return
    from .objects import lookup_type_attr
    t = src.python_type()
    if t is not list and lookup_type_attr(t, "keys") is not NULL and type(src) is not Const:
        for k in d.unpack_all(f, d.call_method(f, src, "keys", [], {})):    # PyMapping_Keys makes a list
            yield k, d.getitem(f, src, k)
        return
    for i, p in enumerate(d.each(f, src)):
        kv = d.unpack_all(f, p)
        if len(kv) != 2:
            raise UserException(ValueError(f"dictionary update sequence element #{i} has length {len(kv)}; 2 "
                                           "is required"))
        yield tuple(kv)


def _dict_update(d, f, v, args, kwargs):
    if len(args) > 1:
        raise UserException(TypeError(f"update expected at most 1 argument, got {len(args)}"))
    pairs = itertools.chain(_update_pairs(d, f, args[0]) if args else (),
                            [(Const(k), x) for k, x in kwargs.items()])
    for k, x in pairs:
        hk = d.hash_key(f, k)
        v.items[hk] = x
        v.keys.setdefault(hk, k)
        d.mark_mutated(v)
    d.mark_mutated(v)
    return Const(None)


def _dict_clear(d, f, v, args, kwargs):
    v.items.clear()
    v.keys.clear()
    d.mark_mutated(v)
    return Const(None)


def _dict_move_to_end(d, f, v, args, kwargs):
    hk = d.hash_key(f, args[0])
    last = d.as_python(f, args[1]) if len(args) > 1 else d.as_python(f, kwargs.get("last", Const(True)))
    if hk not in v.items:
        raise UserException(KeyError(hk))
    x, k = v.items.pop(hk), v.keys.pop(hk)
    if last:
        v.items[hk], v.keys[hk] = x, k
    else:
        v.items = {hk: x, **v.items}
        v.keys = {hk: k, **v.keys}
    d.mark_mutated(v)
    return Const(None)


def _dict_dunder(d, f, v, name, args):
    if name == "__getitem__":
        return d.getitem(f, v, args[0])
    if name == "__setitem__":
        d.setitem(f, v, args[0], args[1])
        return Const(None)
    if name == "__delitem__":
        d.delitem(f, v, args[0])
        return Const(None)
    if name == "__contains__":
        return d.contains(f, args[0], v, False)
    if name == "__len__":
        return Const(len(v.items))
    return d.iter(f, v)


def copy_class(d, f, cls: type) -> type:
    """The class of ``m.copy()`` / ``m | other`` for a mapping of class ``cls``: dict's C methods make a plain
    dict, even for a subclass; OrderedDict and defaultdict make ``type(self)(...)``, which for a subclass that
    defines its own ``__init__``/``__new__`` would run that code (not done here: a graph break)."""
    for k in cls.__mro__:
        if k in (collections.OrderedDict, collections.defaultdict):
            if cls is not k and any(n in vars(c) for c in cls.__mro__[:cls.__mro__.index(k)]
                                    for n in ("__init__", "__new__")):
                raise d.unsupported(f, f"copying a {cls.__name__}: its class's own __init__/__new__ would run")
            return cls
        if k is dict:
            return dict
    return cls


def _dict_copy(d, f, v, args, kwargs):
    return DictVar(v.items, v.keys, copy_class(d, f, v.cls), default_factory=v.default_factory)


_DICT_METHODS = {
    "get": _dict_get, "setdefault": _dict_setdefault, "pop": _dict_pop, "popitem": _dict_popitem,
    "update": _dict_update, "clear": _dict_clear, "move_to_end": _dict_move_to_end,
    "keys": lambda d, f, v, a, k: _view(v, "keys"), "values": lambda d, f, v, a, k: _view(v, "values"),
    "items": lambda d, f, v, a, k: _view(v, "items"),
    "copy": _dict_copy,
}
_DICT_DUNDERS = {"__getitem__", "__setitem__", "__delitem__", "__contains__", "__len__", "__iter__"}


# (fewest, most) positional arguments of the dict methods above, checked before they run: a wrong count is
# eager's TypeError (d.clear(1) and d.pop() were accepted or an internal error). Only update takes any keyword
# and OrderedDict's popitem/move_to_end take `last`.
_DICT_ARITY = {"get": (1, 2), "setdefault": (1, 2), "pop": (1, 2), "popitem": (0, 0), "update": (0, 1),
               "clear": (0, 0), "keys": (0, 0), "values": (0, 0), "items": (0, 0), "copy": (0, 0),
               "__getitem__": (1, 1), "__setitem__": (2, 2), "__delitem__": (1, 1), "__contains__": (1, 1),
               "__len__": (0, 0), "__iter__": (0, 0)}
_ODICT_ARITY = {**_DICT_ARITY, "popitem": (0, 1), "move_to_end": (1, 2)}


def _check_dict_call(v: DictVar, name: str, args, kwargs) -> None:
    ordered = issubclass(v.cls, collections.OrderedDict)
    owner = v.cls.__name__
    if name == "move_to_end" and not ordered:
        raise UserException(AttributeError(f"'{owner}' object has no attribute 'move_to_end'"))
    table = _ODICT_ARITY if ordered else _DICT_ARITY
    if name not in table or name == "update":
        _check_arity(table, owner, name, args)
        return
    allowed = ("last",) if ordered and name in ("popitem", "move_to_end") else ()
    extra = [k for k in kwargs if k not in allowed]
    if extra:
        raise UserException(TypeError(f"{owner}.{name}() takes no keyword arguments"))
    _check_arity(table, owner, name, list(args) + list(kwargs.values()))


@R.METHOD.register(DictVar)
def _dict_method(d: SymbolicDomain, f, v: DictVar, name, args, kwargs):
    _check_dict_call(v, name, args, kwargs)
    fn = _DICT_METHODS.get(name)
    if fn is not None:
        return fn(d, f, v, args, kwargs)
    if name in _DICT_DUNDERS:
        return _dict_dunder(d, f, v, name, args)
    if name in dunders.NAMES:
        return dunders.call(d, f, v, name, args)
    raise d.unsupported(f, f"dict.{name}")


class DictView(Value):
    """dict.keys()/values()/items(): a live view of a DictVar."""
    __slots__ = ("d", "kind")

    def __init__(self, d: DictVar, kind: str):
        super().__init__(None)
        self.d = d
        self.kind = kind

    def python_type(self):
        return type(getattr({}, self.kind)())

    def list(self) -> list[Value]:
        dv = self.d
        if self.kind == "keys":
            return [dv.keys[k] for k in dv.items]
        if self.kind == "values":
            return list(dv.items.values())
        return [TupleVar([dv.keys[k], x]) for k, x in dv.items.items()]

    def as_python(self):
        """A real view of the same kind over a copy of the items: it compares, combines (``keys() & s``) and
        iterates as the view would (a list would make ``d.keys() == {...}`` False). A keys view needs only the
        keys: its dict's values (tensors) stay out of it."""
        if self.kind == "keys":
            return dict.fromkeys(self.d.keys[k].as_python() for k in self.d.items).keys()
        real = {self.d.keys[k].as_python(): x.as_python() for k, x in self.d.items.items()}
        return getattr(real, self.kind)()


def _view(v, kind):
    return DictView(v, kind)


@R.ITER.register(DictView)
def _view_iter(d, f, v):
    return SeqIterVar(v.list(), f"dict_{v.kind} iterator")


@R.LEN.register(DictView)
def _view_len(d, f, v):
    return len(v.d.items)


@R.TRUTH.register(DictView)
def _view_truth(d, f, v):
    return bool(v.d.items)


@R.METHOD.register(SetVar)
def _set_method(d: SymbolicDomain, f, v: SetVar, name, args, kwargs):
    if name in dunders.NAMES:
        return dunders.call(d, f, v, name, args)
    _check_arity(_SET_ARITY, "frozenset" if v.frozen else "set", name, args)
    items = v.items
    if name == "difference_update" and not v.frozen and not any(isinstance(a, (SetVar, DictVar)) for a in args):
        for a in args:                          # CPython discards each item as read from a plain iterable
            for x in d.each(f, a):
                items.pop(d.hash_key(f, x), None)
                d.mark_mutated(v)
        d.mark_mutated(v)
        return Const(None)
    if name in ("difference_update", "intersection_update", "symmetric_difference_update") and not v.frozen:
        v.items = _set_method(d, f, v, name[:-len("_update")], args, kwargs).items
        d.mark_mutated(v)
        return Const(None)
    if name == "add":
        items[d.hash_key(f, args[0])] = args[0]
    elif name in ("discard", "remove"):
        hk = d.set_key(f, args[0])
        if hk not in items and name == "remove":
            raise UserException(KeyError(hk))
        items.pop(hk, None)
    elif name == "update":
        for a in args:
            for x in d.each(f, a):              # added as read: the iterator may look at the set
                items[d.hash_key(f, x)] = x
                d.mark_mutated(v)
    elif name == "clear":
        items.clear()
    elif name == "pop":
        if not items:
            raise UserException(KeyError("pop from an empty set"))
        k = next(iter(items))
        r = items.pop(k)
        d.mark_mutated(v)
        return r
    elif name in ("isdisjoint", "issuperset") and len(args) == 1 and isinstance(args[0], IterVar):
        # CPython reads an iterator only until the answer is known (a generator's side effects stop there):
        # isdisjoint at the first item in the set, issuperset at the first item not in it
        while True:
            ok, x = d.next(f, args[0])
            if not ok:
                return Const(True)
            if (d.hash_key(f, x) in items) == (name == "isdisjoint"):
                return Const(False)
    elif name == "copy":        # a frozenset's copy is the frozenset itself
        return v if v.frozen else SetVar(dict(items), frozen=v.frozen)
    elif name == "__len__":
        return Const(len(items))
    elif name == "__contains__":
        return Const(d.set_key(f, args[0]) in items)
    elif name == "__iter__":
        return d.iter(f, v)
    elif name == "__hash__" and v.frozen and all(type(x) is Const for x in items.values()):
        return Const(hash(frozenset(items)))
    elif name in ("union", "intersection", "difference", "symmetric_difference", "issubset", "issuperset",
                  "isdisjoint"):
        others = [{d.hash_key(f, x): x for x in d.unpack_all(f, a)} for a in args]
        real = getattr(set(items), name)(*[set(o) for o in others])
        if isinstance(real, bool):
            return Const(real)
        pool = dict(items)
        for o in others:
            for k, x in o.items():
                pool.setdefault(k, x)
        return SetVar({k: pool[k] for k in pool if k in real}, frozen=v.frozen)
    else:
        raise d.unsupported(f, f"set.{name}")
    if v.frozen:
        raise UserException(AttributeError(f"'frozenset' object has no attribute '{name}'"))
    d.mark_mutated(v)
    return Const(None)
