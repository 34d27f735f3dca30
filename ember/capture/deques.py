"""``collections.deque`` and ``types.MappingProxyType`` during capture.

A ``DequeVar`` is a list of values with a ``maxlen``: the list rules (iteration, len, truth, ``in``, indexing,
comparison) apply as they are; the methods below are deque's own, with its bounded-length semantics (an append
to a full deque drops an item from the other end). A deque the program passed in is guarded on its type, length
and maxlen, and its final contents are written back. A mappingproxy is a read-only live view of a dict value
(``ProxyVar``)."""
from __future__ import annotations

import collections
import types

from . import rules as R
from .interpreter import UserException
from .values import Const, DictVar, ListVar, MutableVar, Value

_ARITY = {"append": (1, 1), "appendleft": (1, 1), "pop": (0, 0), "popleft": (0, 0), "extend": (1, 1),
          "extendleft": (1, 1), "rotate": (0, 1), "clear": (0, 0), "copy": (0, 0), "count": (1, 1),
          "index": (1, 3), "insert": (2, 2), "remove": (1, 1), "reverse": (0, 0), "__len__": (0, 0),
          "__getitem__": (1, 1), "__contains__": (1, 1), "__iter__": (0, 0), "__setitem__": (2, 2),
          "__delitem__": (1, 1), "__copy__": (0, 0)}


class DequeVar(ListVar):
    __slots__ = ("maxlen",)

    def __init__(self, items: list[Value], maxlen: int | None = None, source=None, obj=None):
        from .interpreter import NULL
        super().__init__(items, source, NULL if obj is None else obj)
        self.maxlen = maxlen
        self._trim(True)

    def _trim(self, from_left: bool) -> None:
        if self.maxlen is not None and len(self.items) > self.maxlen:
            extra = len(self.items) - self.maxlen
            if from_left:
                del self.items[:extra]
            else:
                del self.items[-extra:]

    def python_type(self):
        return collections.deque

    def as_python(self):
        return collections.deque([i.as_python() for i in self.items], self.maxlen)


def _int(d, f, v: Value) -> int:
    n = d.as_python(f, v)
    if type(n) is not int:
        raise UserException(TypeError(f"'{type(n).__name__}' object cannot be interpreted as an integer"))
    return n


def _grow(d, f, v: DequeVar, xs: list[Value], left: bool) -> None:
    for x in xs:
        if v.maxlen == 0:
            continue
        if left:
            v.items.insert(0, x)
        else:
            v.items.append(x)
        v._trim(not left)


def _mutate(d, f, v: DequeVar, name: str, args) -> Value:
    items = v.items
    if name in ("append", "appendleft"):
        _grow(d, f, v, [args[0]], name == "appendleft")
    elif name in ("extend", "extendleft"):
        src = list(v.items) if args[0] is v else d.each(f, args[0])     # CPython copies a deque extended by itself
        for x in src:                           # added as read: the iterator may look at the deque
            _grow(d, f, v, [x], name == "extendleft")
            d.mark_mutated(v)
    elif name in ("pop", "popleft"):
        if not items:
            raise UserException(IndexError(f"{name} from an empty deque"))
        r = items.pop(-1 if name == "pop" else 0)
        d.mark_mutated(v)
        return r
    elif name == "rotate":
        n = _int(d, f, args[0]) if args else 1
        if items:
            n %= len(items)
            items[:] = items[-n:] + items[:-n] if n else items
    elif name == "insert":
        if v.maxlen is not None and len(items) >= v.maxlen:
            raise UserException(IndexError("deque already at its maximum size"))
        items.insert(_int(d, f, args[0]), args[1])
    elif name == "__setitem__":
        items[_position(d, f, v, args[0])] = args[1]
    elif name == "__delitem__":
        del items[_position(d, f, v, args[0])]
    else:
        R.METHOD.find(ListVar)(d, f, v, name, args, {})
        return Const(None)
    d.mark_mutated(v)
    return Const(None)


def _position(d, f, v: DequeVar, k: Value) -> int:
    i = d.as_python(f, k)
    if type(i) is slice or not isinstance(i, int):
        raise UserException(TypeError(f"sequence index must be integer, not '{type(i).__name__}'"))
    if not -len(v.items) <= i < len(v.items):
        raise UserException(IndexError("deque index out of range"))
    return i


@R.METHOD.register(DequeVar)
def _deque_method(d, f, v: DequeVar, name: str, args, kwargs) -> Value:
    lo, hi = _ARITY.get(name, (0, len(args)))
    if name not in _ARITY and name not in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
        raise d.unsupported(f, f"deque.{name}")
    if kwargs or not lo <= len(args) <= hi:
        raise UserException(TypeError(f"deque.{name}() got a wrong number of arguments ({len(args)} given)"))
    if name in ("copy", "__copy__"):
        return DequeVar(list(v.items), v.maxlen)
    if name == "__getitem__":
        return v.items[_position(d, f, v, args[0])]
    if name in ("count", "index", "__len__", "__contains__", "__iter__") or name.startswith("__") \
            and name[2:4] in ("eq", "ne", "lt", "le", "gt", "ge"):
        if name == "index":
            try:
                return R.METHOD.find(ListVar)(d, f, v, name, args, {})
            except UserException as e:
                if isinstance(e.exc, ValueError):
                    raise UserException(ValueError(str(e.exc).replace("in list", "in deque"))) from None
                raise
        return R.METHOD.find(ListVar)(d, f, v, name, args, {})
    return _mutate(d, f, v, name, args)


@R.GETITEM.register(DequeVar)
def _deque_getitem(d, f, v, k):
    return v.items[_position(d, f, v, k)]


@R.SETITEM.register(DequeVar)
def _deque_setitem(d, f, v, k, value):
    from .interpreter import NULL
    _mutate(d, f, v, "__delitem__" if value is NULL else "__setitem__", [k] if value is NULL else [k, value])


@R.GETATTR.register(DequeVar)
def _deque_getattr(d, f, v, name):
    if name == "maxlen":
        return Const(v.maxlen)
    from .values import MethodOf
    if hasattr(collections.deque, name):
        return MethodOf(v, name)
    raise UserException(AttributeError(f"'collections.deque' object has no attribute '{name}'"))


def make(d, f, args, kwargs) -> DequeVar:
    """``collections.deque(iterable=(), maxlen=None)``."""
    if len(args) > 2 or set(kwargs) - {"iterable", "maxlen"}:
        raise UserException(TypeError("deque() takes at most 2 arguments"))
    it = args[0] if args else kwargs.get("iterable")
    ml = args[1] if len(args) > 1 else kwargs.get("maxlen")
    maxlen = None if ml is None else d.as_python(f, ml)
    if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
        raise UserException(ValueError("maxlen must be non-negative") if type(maxlen) is int
                            else TypeError("an integer is required"))
    return DequeVar(list(d.unpack_all(f, it)) if it is not None else [], maxlen)


def wrap(d, obj: collections.deque, source, g) -> DequeVar:
    """A deque the program passed in: guarded on type, length and maxlen; items wrapped at their index."""
    from .sources import ItemSource
    if g:
        g.type_match(source, collections.deque)
        g.length(source, len(obj))
        g.add(f"{source.expr(d.cg)}.maxlen == {obj.maxlen!r}", f"{d.cg.plain(source)}.maxlen == {obj.maxlen!r}")
    items = [d.wrap(x, ItemSource(source, i) if source else None) for i, x in enumerate(obj)]
    v = DequeVar(items, obj.maxlen, source, obj)
    return v


# -- types.MappingProxyType -------------------------------------------------------------------------------
class ProxyVar(DictVar):
    """``types.MappingProxyType(d)``: a read-only live view of the mapping value ``target``. Its items are the
    target's (a later ``d[k] = v`` shows through the proxy); writes through the proxy are eager's errors."""
    __slots__ = ("target",)

    def __init__(self, target: DictVar, source=None, obj=None):
        from .interpreter import NULL
        MutableVar.__init__(self, source, NULL if obj is None else obj)
        self.target = target
        self.cls = types.MappingProxyType
        self.default_factory = None

    items = property(lambda self: self.target.items, lambda self, v: None)
    keys = property(lambda self: self.target.keys, lambda self, v: None)

    def as_python(self):
        return types.MappingProxyType(self.target.as_python())


_PROXY_READS = {"get", "keys", "values", "items", "copy", "__getitem__", "__contains__", "__len__", "__iter__"}


@R.METHOD.register(ProxyVar)
def _proxy_method(d, f, v: ProxyVar, name: str, args, kwargs) -> Value:
    if name in _PROXY_READS:
        return R.METHOD.find(DictVar)(d, f, v.target, name, args, kwargs)
    if name in ("__setitem__", "__delitem__"):
        raise UserException(TypeError("'mappingproxy' object does not support item assignment"))
    raise UserException(AttributeError(f"'mappingproxy' object has no attribute '{name}'"))


@R.SETITEM.register(ProxyVar)
def _proxy_setitem(d, f, v, k, value):
    from .interpreter import NULL
    what = "item deletion" if value is NULL else "item assignment"
    raise UserException(TypeError(f"'mappingproxy' object does not support {what}"))


@R.GETATTR.register(ProxyVar)
def _proxy_getattr(d, f, v, name):
    from .values import MethodOf
    if name in _PROXY_READS:
        return MethodOf(v, name)
    raise UserException(AttributeError(f"'mappingproxy' object has no attribute '{name}'"))


def make_proxy(d, f, args, kwargs) -> ProxyVar:
    if len(args) != 1 or kwargs:
        raise UserException(TypeError("mappingproxy() takes exactly one argument"))
    target = args[0]
    if isinstance(target, ProxyVar):
        target = target.target
    if not isinstance(target, DictVar) or type(target) is not DictVar:
        raise d.unsupported(f, f"types.MappingProxyType of {target.describe()}")
    return ProxyVar(target)


def wrap_proxy(d, obj: types.MappingProxyType, source, g) -> ProxyVar:
    """A mappingproxy the program passed in (a class's ``__dict__``, a frozen config): guarded on its keys,
    its items read at their keys."""
    from .sources import ItemSource
    if g:
        g.type_match(source, types.MappingProxyType)
        g.dict_keys(source, list(obj))
    items = {k: d.wrap(x, ItemSource(source, k) if source else None) for k, x in obj.items()}
    return ProxyVar(DictVar(items, {k: Const(k) for k in obj}), source, obj)
