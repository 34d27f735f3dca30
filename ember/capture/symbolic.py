"""The symbolic domain: operations on ``Value``s, recording guards and side effects.

A ``SymbolicDomain`` lives for one trace. It wraps the objects the frame reads (arguments, globals, closure
cells, attributes) into values with guards, dispatches every operation to the rule tables in ``rules.py``,
inlines Python callees, and remembers which existing objects were changed so the glue can replay it.
Torch-free: plugins (``ember.capture.torch``) add tensor and module values.
"""
from __future__ import annotations

import builtins
import enum
import functools
import types
from typing import Any

from . import exc_values
from . import rules as R
from .subclasses import overrides_dict
from .bytecode import PY
from ..emit import py_str
from .guards import GuardSet
from .opcode_errors import DuplicateKeyword, not_iterable
from .interpreter import CO_GENERATOR, NULL, Frame, UserException, bind_arguments
from .sources import AttrSource, CellSource, Codegen, ConstSource, GlobalSource, ItemSource, Source
from .subclasses import BaseItemSource
from .hashkeys import hash_key
from .identity import identical
from .live_iters import wrap as wrap_live_iter
from .values import (MethodOf, IDENTITY_TYPES, BoundMethod, CellVar, Const, DictVar, FuncVar, IterVar, ListVar,
                     MutableVar, NotConst, ObjectVar, PartialVar, RealCellVar, SetVar, SuperVar, TupleVar, Value,
                     is_immutable, is_plain_builtin, tuple_override, NUMPY_INTS, NUMPY_SCALARS, NUMPY_VALUES)


def _cell_is_empty(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return True
    return False


class SymbolicDomain:
    py = PY

    def __init__(self, plugins: list | None = None, options: Any = None) -> None:
        self.cg = Codegen()
        self.guards = GuardSet(self.cg)
        self.plugins = list(plugins or [])
        self.options = options
        self.by_source: dict[Source, Value] = {}
        self.by_id: dict[int, Value] = {}
        self.real_of: dict[int, Any] = {}      # id(value) -> the existing object it wraps (a tensor input too)
        self.keepalive: list[Any] = []
        self.new_ids: dict[int, tuple[Value, object]] = {}    # id() of values made by the trace
        self.side_effects: list[Value] = []          # mutated existing values, in first-mutation order
        self.global_writes: dict[tuple[int, str], tuple[dict, str, Any]] = {}
        self.class_writes: dict[tuple[int, str], tuple[type, str, Any]] = {}     # see class_attrs
        self.new_objects: list[ObjectVar] = []
        self.dynamic: set[str] = set()      # sources of numbers not to guard (they changed between calls)
        self.is_resume = False              # tracing a continuation after a graph break
        self.static_shapes = False          # dynamic shapes off for this trace (a backend could not take them)
        self.frame_state: dict | None = None    # sizes and ints seen by earlier compiles of the frame
        self.number_hooks = [p.wrap_number for p in self.plugins if hasattr(p, "wrap_number")]
        self.generators: list[IterVar] = []          # user generators started by the trace
        self.deferred_calls: list[tuple[Value, list[Value]]] = []   # logging calls run after the graph
        self.runtime_asserts: list[tuple] = []  # (condition, message, user frames): checked after the graph
        for p in self.plugins:
            p.start(self)

    def release(self) -> None:
        """Drop every reference the finished trace holds. The domain and its frames form reference cycles
        (a frame holds its domain, the domain its top frame), and through them the user's arguments (``real_of``,
        the torch plugin's inputs): without this, a tensor passed in stayed alive after the call until the
        cycle collector ran (eager frees it when the caller drops it). Entries copy what they keep."""
        vars(self).clear()

    # -- errors ----------------------------------------------------------------------------------------
    def unsupported(self, f: Frame | None, reason: str, hint: str = ""):
        from ..errors import Unsupported
        if f is None:
            return Unsupported(reason, hint)
        return f.unsupported(reason, hint)

    # -- making values ---------------------------------------------------------------------------------
    def const(self, v: Any) -> Value:
        if type(v) is tuple:
            return TupleVar([self.const(x) for x in v])
        return Const(v)

    def builtin(self, name: str) -> Value:
        return Const(getattr(builtins, name))

    def from_python(self, v: Any) -> Value:
        """A value made fresh during the trace (no source): containers become mutable values."""
        t = type(v)
        if t is list:
            return ListVar([self.from_python(x) for x in v])
        if t is tuple:
            return TupleVar([self.from_python(x) for x in v])
        if t is dict:
            return DictVar({k: self.from_python(x) for k, x in v.items()}, {k: self.from_python(k) for k in v})
        if t is set:
            return SetVar({k: self.from_python(k) for k in v})
        if t is types.MappingProxyType:     # a fresh read-only view (a Signature's parameters)
            return DictVar({k: self.from_python(x) for k, x in v.items()}, {k: self.from_python(k) for k in v}, t)
        return Const(v)

    def wrap(self, obj: Any, source: Source | None) -> Value:
        """The value for an object that existed before the call, found at ``source``; installs guards."""
        if source is not None:
            v = self.by_source.get(source)
            if v is not None:
                return v
            if (type(obj) is int or isinstance(obj, (float, *NUMPY_SCALARS))) and self.number_hooks:  # maybe symbolic
                for hook in self.number_hooks:
                    v = hook(self, obj, source)
                    if v is not None:
                        self.by_source[source] = v
                        return v
            if self.dynamic and type(obj) in (int, float) and self.is_resume and self.cg.plain(source) in self.dynamic:
                from .values import OpaqueVar       # automatic dynamic: this number changed between calls
                v = self.by_source[source] = OpaqueVar(obj, source)
                return v
        if not is_immutable(obj):
            v = self.by_id.get(id(obj))
            if v is not None:
                if source is not None and v.source is not None and v.source != source:
                    self.guards.add(f"{source.expr(self.cg)} is {v.source.expr(self.cg)}",
                                    f"{source.expr(self.cg)} is the same object as {v.source.expr(self.cg)}")
                    self.by_source[source] = v
                return v
        v = self._wrap_new(obj, source)
        if source is not None:
            self.by_source[source] = v
        if not is_immutable(obj):
            self.by_id[id(obj)] = v
            self.real_of[id(v)] = obj
            self.keepalive.append(obj)
        return v

    def _wrap_new(self, obj: Any, source: Source | None) -> Value:
        g = self.guards if source is not None else None
        for p in self.plugins:
            v = p.wrap(self, obj, source)
            if v is not None:
                return v
        for wrap in (self._wrap_atom, self._wrap_sequence, self._wrap_set, self._wrap_dict, self._wrap_callable):
            v = wrap(obj, source, g)
            if v is not None:
                return v
        if type(obj) is types.CellType:
            return RealCellVar(obj, CellSource(id(obj), obj))
        v = wrap_live_iter(self, obj, source, g)        # a builtin iterator handed to a continuation
        if v is not None:
            return v
        if source is None and isinstance(obj, BaseException):
            return self.wrap_exception(obj)     # like the exceptions the trace raises and catches
        if g:
            g.type_match(source, type(obj))
        return ObjectVar(obj, source)

    def _wrap_atom(self, obj: Any, source: Source | None, g: GuardSet | None) -> Value | None:
        t = type(obj)
        if t in (int, float, bool, str, bytes, complex, type(None)):
            if g:
                g.equals(source, obj)
            return Const(obj, source)
        if t is types.BuiltinMethodType and g and not isinstance(obj.__self__, type) \
                and not is_plain_builtin(obj) and not is_immutable(obj.__self__):
            # a bound method of a container (``lst.append`` handed over at a graph break): calls mutate the
            # receiver, which must be the traced value
            e = source.expr(self.cg)
            self.guards.add(f"type({e}) is {self.cg.bind(t, 'builtin_method')} and {e}.__name__ == "
                            f"{py_str(obj.__name__)}", f"{self.cg.plain(source)} is a method {obj.__name__}")
            return MethodOf(self.wrap(obj.__self__, AttrSource(source, "__self__")), obj.__name__)
        if t is types.FunctionType and g and is_local_function(obj):
            # nested functions and lambdas are new objects on every call of their maker: the same code is
            # the same function; defaults and closure cells are read through the source when inlined
            e = source.expr(self.cg)
            self.guards.add(f"type({e}) is {self.cg.bind(t, 'function')} and {e}.__code__ is "
                            f"{self.cg.bind(obj.__code__, 'code')}", f"{self.cg.plain(source)} runs {obj.__qualname__}")
            return Const(obj, source)
        if t is slice and not all(type(b) in (int, type(None)) for b in (obj.start, obj.stop, obj.step)):
            # a slice holding a tensor or another object: its bounds are values of the trace (a constant
            # would put the tensor into the graph's code, and compare it by value in the guard)
            if g:
                g.type_match(source, slice)
            return SliceVar([self.wrap(getattr(obj, a), AttrSource(source, a) if source else None)
                             for a in ("start", "stop", "step")])
        if isinstance(obj, enum.Enum) or isinstance(obj, IDENTITY_TYPES) or t in (type(Ellipsis), range, slice):
            if g:
                g.id_match(source, obj) if not isinstance(obj, (range, slice)) else g.equals(source, obj)
            return Const(obj, source)
        if isinstance(obj, NUMPY_VALUES):      # np.float32(2.0), np.dtype, np.finfo(...): constants, as numbers are
            if g and t.__name__ in ("finfo", "iinfo"):
                g.id_match(source, obj)         # numpy caches them: one object per dtype
            elif g:                             # repr tells the type's width, -0.0 and nan apart
                e = source.expr(self.cg)
                g.add(f"type({e}) is {self.cg.bind(t, t.__name__)} and repr({e}) == {repr(obj)!r}",
                      f"{self.cg.plain(source)} is {obj!r}")
            return Const(obj, source)
        return None

    def _wrap_sequence(self, obj: Any, source: Source | None, g: GuardSet | None) -> Value | None:
        t = type(obj)
        if t is __import__("collections").deque:
            from .deques import wrap
            return wrap(self, obj, source, g)
        if not (t is tuple or t is list or (isinstance(obj, tuple) and hasattr(t, "_fields"))):
            return None
        if g and t is tuple and isinstance(source, AttrSource) and obj and all(map(_plain_constant, obj)):
            # an attribute holding a tuple of plain constants (a conv's stride, a config's sizes): one guard
            g.tuple_of_constants(source, obj)
            return TupleVar([Const(x, ItemSource(source, i)) for i, x in enumerate(obj)], None, source)
        # a namedtuple class may override __getitem__/__len__ (to index its fields another way): its items and
        # length are read through tuple's own, in guards and glue as here
        own = t is not tuple and t is not list and (t.__getitem__ is not tuple.__getitem__
                                                    or t.__len__ is not tuple.__len__)
        if g:
            g.type_match(source, t)
            g.length(source, tuple.__len__(obj) if own else len(obj), tuple if own else None)
        items = [self.wrap(x, (BaseItemSource(source, i, tuple) if own else ItemSource(source, i)) if source else None)
                 for i, x in enumerate(tuple.__iter__(obj) if own else obj)]
        if t is list:
            return ListVar(items, source, obj)
        return TupleVar(items, None if t is tuple else t, source)

    def _wrap_set(self, obj: Any, source: Source | None, g: GuardSet | None) -> Value | None:
        t = type(obj)
        if t not in (set, frozenset):
            return None
        if t is frozenset and all(is_immutable(x) for x in obj):
            if g:
                g.type_match(source, t)
                self.guards.add(f"{source.expr(self.cg)} == {self.cg.bind(obj, 'fs')}", f"{source.expr(self.cg)} == {obj!r}")
            return Const(obj, source)
        # A member that is not a plain value (a tensor, a user object) is the live object, as dict keys are (a
        # Const would bake a tensor's data in), guarded by identity (an equal object may hold other state).
        by_identity = not all(is_immutable(x) for x in obj)
        if g:
            g.type_match(source, t)
            e = source.expr(self.cg)
            ids = frozenset(map(id, obj))
            self.guards.add(f"set(map(id, {e})) == {self.cg.bind(ids, 'ids')}" if by_identity
                            else f"{e} == {self.cg.bind(frozenset(obj), 'set')}", f"{e} == {set(obj)!r}")
        live = {k: self.wrap(k, ConstSource(id(k), k)) for k in obj if by_identity and not is_immutable(k)}
        return SetVar({k: live.get(k) or Const(k) for k in obj}, source, obj, frozen=t is frozenset)

    def _wrap_dict(self, obj: Any, source: Source | None, g: GuardSet | None) -> Value | None:
        t = type(obj)
        if t is types.MappingProxyType and all(is_immutable(k) for k in obj):
            from .deques import wrap_proxy
            return wrap_proxy(self, obj, source, g)
        import collections
        if not (isinstance(obj, dict) and t.__iter__ in (dict.__iter__, collections.OrderedDict.__iter__)
                and t.__getitem__ in (dict.__getitem__,) + _dict_getitems()) or overrides_dict(t):
            return None
        if g:
            g.type_match(source, t)
            g.dict_keys(source, list(obj))
            live = frozenset(id(k) for k in obj if not is_immutable(k))
            if live:        # keys equal to the old ones are not enough: the trace reads these very objects
                e = source.expr(self.cg)
                self.guards.add(f"{self.cg.bind(live, 'ids')} <= set(map(id, {e}))",
                                f"{e} has the same {len(live)} keys")
        items = {k: self.wrap(v, ItemSource(source, k) if source else None) for k, v in obj.items()}
        keys = {k: self.wrap(k, ConstSource(id(k), k)) if not is_immutable(k) else Const(k) for k in obj}
        df = None
        if hasattr(obj, "default_factory"):
            df = self.wrap(obj.default_factory, AttrSource(source, "default_factory") if source else None)
        return DictVar(items, keys, t, source, obj, df)

    def _wrap_callable(self, obj: Any, source: Source | None, g: GuardSet | None) -> Value | None:
        t = type(obj)
        if t is not types.MethodType and t is not functools.partial:
            return None
        if g:
            g.type_match(source, t)
        sub = (lambda n: AttrSource(source, n)) if source else (lambda n: None)
        if t is types.MethodType:
            return BoundMethod(self.wrap(obj.__func__, sub("__func__")), self.wrap(obj.__self__, sub("__self__")),
                               source)
        fn = self.wrap(obj.func, sub("func"))
        args = self.wrap(obj.args, sub("args"))
        kw = self.wrap(obj.keywords, sub("keywords"))
        return PartialVar(fn, list(args.items), dict(kw.items), source)

    def wrap_exception(self, exc: BaseException) -> Value:
        return exc_values.lookup(self, exc) or Const(exc)

    def exception_of(self, f: Frame, v: Value) -> BaseException:
        if type(v) is exc_values.ExcVar:
            return v.exc
        if type(v) is Const:
            x = v.value
            if isinstance(x, type) and issubclass(x, BaseException):
                return x()
            if isinstance(x, BaseException):
                return x
        if isinstance(v, ObjectVar) and isinstance(v.obj, BaseException):
            raise self.unsupported(f, "raising a user-defined exception object with traced state")
        raise UserException(TypeError("exceptions must derive from BaseException"))

    def as_python(self, f: Frame | None, v: Value) -> Any:
        try:
            return v.as_python()
        except NotConst:
            raise self.unsupported(f, f"a {v.describe()} value is needed as a Python constant here") from None

    def is_const(self, v: Value) -> bool:
        try:
            v.as_python()
            return True
        except NotConst:
            return False

    # -- side effects ----------------------------------------------------------------------------------
    def mark_mutated(self, v: MutableVar) -> None:
        if not v.mutated:
            v.mutated = True
            if v.source is not None:
                self.side_effects.append(v)

    # -- names -----------------------------------------------------------------------------------------
    def load_global(self, f: Frame, name: str) -> Value:
        g = f.f_globals
        w = self.global_writes.get((id(g), name))
        if w is not None and w[2] is not NULL:
            return w[2]
        trusted = w is None and self._trusted_globals(g)
        if w is None and name in g:
            v = g[name]
            if trusted and isinstance(v, IDENTITY_TYPES):     # library code's imports: not guarded
                return Const(v)
            return self.wrap(v, GlobalSource(id(g), name, g))
        if w is None and not trusted:
            gn = self.cg.bind(g, "G")
            self.guards.add(f"{py_str(name)} not in {gn}",
                            f"global {name!r} is not defined (the builtin is used)")
        b = g.get("__builtins__", builtins)
        b = b if isinstance(b, dict) else b.__dict__
        found = b.get(name, NULL)
        if w is None and not trusted:       # the builtin (or its absence) is part of what the trace assumed
            bn, key = self.cg.bind(b, "builtins"), py_str(name)
            if found is NULL:
                self.guards.add(f"{key} not in {bn}", f"builtin {name!r} is not defined")
            else:
                self.guards.add(f"{bn}[{key}] is {self.cg.bind(found, name)}",
                                f"builtin {name!r} is unchanged")
        if found is not NULL:
            return Const(found)
        raise UserException(NameError(f"name '{name}' is not defined"))

    TRUSTED_PREFIXES: tuple[str, ...] = ("collections", "functools", "itertools", "typing", "enum", "dataclasses",
                                         "contextlib", "abc", "operator", "copy", "math", "warnings")

    def _trusted_globals(self, g: dict) -> bool:
        """Globals of library modules whose imported names (functions, classes, modules) do not change: ember
        does not guard them. Plugins add their library (``trusted_prefixes``)."""
        name = g.get("__name__", "")
        prefixes = self.TRUSTED_PREFIXES + tuple(p for pl in self.plugins for p in getattr(pl, "trusted_prefixes", ()))
        return isinstance(name, str) and name.split(".")[0] in prefixes

    def store_global(self, f: Frame, name: str, v: Value) -> None:
        self.global_writes[(id(f.f_globals), name)] = (f.f_globals, name, v)

    def delete_global(self, f: Frame, name: str) -> None:
        g = f.f_globals
        w = self.global_writes.get((id(g), name))
        if (w[2] is NULL) if w is not None else name not in g:
            raise UserException(NameError(f"name '{name}' is not defined"))
        if w is None:
            self.wrap(g[name], GlobalSource(id(g), name, g))     # guards that the name exists
        self.global_writes[(id(g), name)] = (g, name, NULL)

    def new_cell(self, v):
        return CellVar(v)

    def cell_get(self, c):
        if type(c) is CellVar:
            return c.contents
        if c.written is not NULL:
            return c.written if c.written is not _DELETED else NULL
        try:
            contents = c.cell.cell_contents
        except ValueError:      # empty: so must it be on the calls this entry serves (a guard on the
            # contents, taken when the cell is full, fails on an empty one by raising)
            cell = c.cell_source.expr(self.cg) if c.cell_source is not None else self.cg.bind(c.cell, "cell")
            self.guards.add(f"{self.cg.bind(_cell_is_empty, 'cell_is_empty')}({cell})",
                            f"the closure cell {self.cg.plain(c.source)} is empty")
            return NULL
        return self.wrap(contents, c.source)

    def cell_set(self, c, v):
        if type(c) is CellVar:
            c.contents = v
            return
        if c.written is NULL:
            self.side_effects.append(c)
        c.written = _DELETED if v is NULL else v

    # -- operations, dispatched to rules ---------------------------------------------------------------
    def _rule(self, table: R.Rules, f: Frame, v: Value, what: str):
        fn = table.find(type(v))
        if fn is None:
            raise self.unsupported(f, f"{what} on a {v.describe()} value is not supported")
        return fn

    def getattr(self, f, v, name):
        return self._rule(R.GETATTR, f, v, f"reading attribute {name!r}")(self, f, v, name)

    def setattr(self, f, v, name, value):
        self._rule(R.SETATTR, f, v, f"setting attribute {name!r}")(self, f, v, name, value)

    def delattr(self, f, v, name):
        self._rule(R.SETATTR, f, v, f"deleting attribute {name!r}")(self, f, v, name, NULL)

    def call(self, f, fn, args, kwargs):
        return self._rule(R.CALL, f, fn, "calling")(self, f, fn, list(args), dict(kwargs))

    def call_ex(self, f, fn, args, kwargs):
        a = self.unpack_all(f, args)
        kw = {}
        if kwargs is not None:
            if not isinstance(kwargs, DictVar):
                kwargs = self.call(f, Const(dict), [kwargs], {})
            for k, v in kwargs.items.items():
                if type(k) is not str:
                    raise UserException(TypeError("keywords must be strings"))
                kw[k] = v
        return self.call(f, fn, a, kw)

    def getitem(self, f, o, k):
        return self._rule(R.GETITEM, f, o, "indexing")(self, f, o, k)

    def setitem(self, f, o, k, v):
        self._rule(R.SETITEM, f, o, "item assignment")(self, f, o, k, v)

    def delitem(self, f, o, k):
        self._rule(R.SETITEM, f, o, "item deletion")(self, f, o, k, NULL)

    def iter(self, f, v):
        return self._rule(R.ITER, f, v, "iterating")(self, f, v)

    def yield_from_iter(self, f, v):
        """GET_YIELD_FROM_ITER: a user object's ``__iter__`` result stays that object (not wrapped as a plain
        iterator), so `yield from` reaches its ``send``/``throw``/``close`` (generators.py)."""
        if type(v) is ObjectVar:
            from .lookups import resolved_type_attr
            if resolved_type_attr(self, type(v.obj), "__iter__") is not NULL:
                return self.call_method(f, v, "__iter__", [], {})
        return self.iter(f, v)

    def next(self, f, it):
        """(True, item), or (False, the iterator's return value) when it is exhausted."""
        from .generators import next_value
        return next_value(self, f, it)

    def send(self, f, it, v):
        from .generators import send_value
        return send_value(self, f, it, v)

    def len(self, f, v) -> int:
        return self._rule(R.LEN, f, v, "len()")(self, f, v)

    def truth(self, f, v) -> bool:
        return self._rule(R.TRUTH, f, v, "truth testing")(self, f, v)

    def to_bool(self, f, v):
        return Const(self.truth(f, v))

    def python_type(self, v) -> type:
        return v.python_type()

    def is_none(self, f, v) -> bool:
        return type(v) is Const and v.value is None

    def is_(self, f, a, b, negate):
        return Const(identical(self, a, b) != negate)

    def binary(self, f, op, a, b):
        from .operators import binary
        return binary(self, f, op, a, b)

    def compare(self, f, op, a, b):
        from .operators import compare
        return compare(self, f, op, a, b)

    def unary(self, f, op, v):
        from .operators import unary
        return unary(self, f, op, v)

    def contains(self, f, a, b, negate):
        from .operators import contains
        r = contains(self, f, a, b)
        return Const(r != negate)

    def call_method(self, f, v, name, args, kwargs):
        return self.call(f, self.getattr(f, v, name), args, kwargs)

    # -- building --------------------------------------------------------------------------------------
    def build_slice(self, f, parts):
        return Const(slice(*[self.as_python(f, p) for p in parts])) if all(
            type(p) is Const for p in parts) else SliceVar(parts)

    def build_tuple(self, f, items):
        return TupleVar(items)

    def build_list(self, f, items):
        return ListVar(items)

    def build_set(self, f, items):
        s = SetVar({})
        for it in items:
            s.items[self.hash_key(f, it)] = it
        return s

    def build_map(self, f, keys, vals):
        d = DictVar({}, {})
        for k, v in zip(keys, vals):
            hk = self.hash_key(f, k)
            d.items[hk] = v
            d.keys.setdefault(hk, k)
        return d

    def build_string(self, f, parts):
        return Const("".join(self.as_python(f, p) for p in parts))

    def format(self, f, v, spec):
        s = "" if spec is None else self.as_python(f, spec)
        if type(v) is Const:
            try:
                return Const(format(v.value, s))
            except Exception as e:          # noqa: BLE001
                raise UserException(e) from None
        if isinstance(v, ObjectVar):
            from .lookups import resolved_type_attr
            if resolved_type_attr(self, type(v.obj), "__format__") is object.__format__:    # str(v), as CPython's
                if s:
                    raise UserException(TypeError(f"unsupported format string passed to "
                                                  f"{type(v.obj).__name__}.__format__"))
                return self.call(f, Const(str), [v], {})
            return self.call_method(f, v, "__format__", [Const(s)], {})
        try:
            return Const(format(v.as_python(), s))
        except NotConst:
            raise self.unsupported(f, f"formatting a {v.describe()} value into a string",
                                   "format the value outside the compiled function") from None

    def hash_key(self, f, k: Value) -> Any:
        """The real dict/set key standing for value ``k`` (``hashkeys.hash_key``)."""
        return hash_key(self, f, k)

    def set_key(self, f, k: Value) -> Any:
        """The key a set looks ``k`` up by (``in``, ``remove``, ``discard``): a set stands for the frozenset of
        its items, as CPython's set_contains does; anything else is its hash_key."""
        part = getattr(k, "base_part", None)
        if isinstance(part, SetVar) and not part.frozen:
            k = part
        if isinstance(k, SetVar) and not k.frozen:
            return frozenset(k.items)
        return self.hash_key(f, k)

    def list_to_tuple(self, f, v):
        return TupleVar(list(v.items))

    def list_append(self, f, lst, v):
        self.call_method(f, lst, "append", [v], {})

    def list_extend(self, f, lst, v):
        self.call_method(f, lst, "extend", [v], {})

    def set_add(self, f, s, v):
        self.call_method(f, s, "add", [v], {})

    def set_update(self, f, s, v):
        self.call_method(f, s, "update", [v], {})

    def dict_update(self, f, d, v, merge):
        if merge:
            other = v if isinstance(v, DictVar) else self.call(f, Const(dict), [v], {})
            for k in other.items:
                if k in d.items:
                    raise UserException(DuplicateKeyword(k))     # DICT_MERGE words the call's TypeError
        self.call_method(f, d, "update", [v], {})

    def unpack_all(self, f, v) -> list[Value]:
        return list(self.each(f, v))

    def each(self, f, v):
        """The items of iterable ``v``, one at a time, as CPython's C loops (``list.extend``, ``set.update``,
        ``dict.update``, ``deque.extendleft``) consume them: the caller acts on each item before the next is
        produced, so an iterator that reads the container being filled sees the items already added. A list
        or tuple is read as a snapshot (no user code runs between its items)."""
        if isinstance(v, (TupleVar, ListVar)) and tuple_override(v, "__iter__") is None:
            yield from list(v.items)
            return
        it = self.iter(f, v)
        while True:
            ok, x = self.next(f, it)
            if not ok:
                return
            yield x

    def unpack(self, f, v, n):
        return self._unpack(f, v, n, -1)

    def unpack_ex(self, f, v, before, after):
        items = self._unpack(f, v, before, after)
        return items[:before] + [ListVar(items[before:len(items) - after])] + items[len(items) - after:]

    def _unpack(self, f, v, n: int, after: int) -> list[Value]:
        """CPython's ``unpack_iterable``: ``n`` items, then one too many is an error (``after`` < 0) or the
        rest is collected; an iterator is only advanced as far as CPython would."""
        if isinstance(v, (TupleVar, ListVar)) and tuple_override(v, "__iter__") is None:
            items = list(v.items)
            extra = len(items) > n and after < 0
        else:
            if not_iterable(v.python_type()):
                raise UserException(TypeError(f"cannot unpack non-iterable {v.python_type().__name__} object"))
            it, items, extra = self.iter(f, v), [], False
            while len(items) < n + (1 if after < 0 else 0) or after >= 0:
                ok, x = self.next(f, it)
                if not ok:
                    break
                items.append(x)
            extra = after < 0 and len(items) > n
        if extra:
            raise UserException(ValueError(f"too many values to unpack (expected {n})"))
        need = n if after < 0 else n + after
        if len(items) < need:
            exp = f"{n}" if after < 0 else f"at least {need}"
            raise UserException(ValueError(f"not enough values to unpack (expected {exp}, got {len(items)})"))
        return items

    def enter_context(self, f, mgr):
        from .objects import lookup_type_attr
        t = mgr.python_type()
        if lookup_type_attr(t, "__enter__") is NULL or lookup_type_attr(t, "__exit__") is NULL:
            raise UserException(TypeError(f"'{t.__name__}' object does not support the context manager protocol"))
        exit_fn = self.getattr(f, mgr, "__exit__")
        return exit_fn, self.call_method(f, mgr, "__enter__", [], {})

    def make_super(self, f, cls, obj):
        return SuperVar(self.as_python(f, cls), obj)

    def load_build_class(self, f):
        raise self.unsupported(f, "defining a class inside a compiled function",
                               "define the class at module level, outside the compiled function")

    def import_name(self, f, name, fromlist, level):
        try:
            mod = __import__(name, f.f_globals, None, self.as_python(f, fromlist), self.as_python(f, level))
        except Exception as e:      # noqa: BLE001
            raise UserException(e) from None
        return Const(mod)

    def import_from(self, f, mod, name):
        try:
            return self.getattr(f, mod, name)
        except UserException as ue:
            if not isinstance(ue.exc, AttributeError):
                raise
        if type(mod) is not Const:
            raise UserException(ImportError(f"cannot import name {name!r}"))
        from .concrete import import_from_fallback
        return self.wrap(import_from_fallback(mod.value, name), None)

    # -- functions -------------------------------------------------------------------------------------
    def make_function(self, f, code, attrs):
        fn = FuncVar(code, f.f_globals)
        for k, v in attrs.items():
            self.set_function_attr(f, fn, k, v)
        return fn

    def set_function_attr(self, f, fn, name, v):
        if name == "closure":
            fn.closure = list(v.items)
        else:
            setattr(fn, name, v)
        return fn

    def inline(self, f: Frame, func: Any, args: list[Value], kwargs: dict[str, Value],
               src: Source | None = None) -> Value:
        """Run a Python function (real, or a FuncVar made in the trace) on values, in a new frame. ``src`` is
        where a local function was found (its defaults and cells are read through it)."""
        if type(func) is FuncVar:
            code, g, name = func.code, func.f_globals, func.qualname
            defaults = tuple(func.defaults.items) if func.defaults is not None else ()
            kwdefaults = (dict(func.kwdefaults.items) if func.kwdefaults is not None else None)
            cells = func.closure or []
        else:
            code, g, name = func.__code__, func.__globals__, func.__qualname__
            local = src is not None and is_local_function(func)
            fsrc = src if local else ConstSource(id(func), func)
            defaults = self._defaults(func, AttrSource(fsrc, "__defaults__"))
            kwdefaults = ({k: self.wrap(d, ItemSource(AttrSource(fsrc, "__kwdefaults__"), k))
                           for k, d in func.__kwdefaults__.items()} if func.__kwdefaults__ else None)
            if local:
                from .resume import wrap_cell
                cells = [wrap_cell(self, c, ItemSource(AttrSource(src, "__closure__"), i))
                         for i, c in enumerate(func.__closure__ or ())]
            else:
                cells = [self.wrap(c, None) for c in (func.__closure__ or ())]
        try:
            locals_ = bind_arguments(code, defaults, kwdefaults, args, kwargs, TupleVar, self._kwargs_dict,
                                     name)
        except TypeError as e:
            raise UserException(e) from None
        for n, c in zip(code.co_freevars, cells):
            locals_[n] = c
        frame = Frame(self, code, g, locals_, f, func)
        if code.co_flags & CO_GENERATOR:
            from .generators import drive
            it = IterVar(drive(frame), f"generator {name}", frame, (func, list(args), dict(kwargs)))
            self.generators.append(it)
            return it
        if code.co_flags & 0x80 or code.co_flags & 0x200:
            raise self.unsupported(f, f"calling async function {name}")
        return frame.run().value

    def _defaults(self, func: Any, src: Source) -> tuple:
        """The values of a real function's positional defaults. All plain constants (HF's ``forward(self,
        input_ids=None, ..., use_cache=None)``: a dozen Nones and flags): one guard on the whole tuple, whose
        first test is its identity (one clause per function instead of one per default: ~60 ns each on every
        call, ~65 clauses in a GPT-2 decode step); otherwise each default is guarded as it is wrapped."""
        dflt = func.__defaults__ or ()
        if len(dflt) > 1 and all(map(_plain_constant, dflt)):
            v = self.wrap(dflt, src)
            if type(v) is TupleVar:
                return tuple(v.items)
        return tuple(self.wrap(d, ItemSource(src, i)) for i, d in enumerate(dflt))

    def _kwargs_dict(self, d: dict[str, Value]) -> DictVar:
        return DictVar(dict(d), {k: Const(k) for k in d})


def is_local_function(fn: types.FunctionType) -> bool:
    """A function made by running a def/lambda inside another function (a new object per call)."""
    return fn.__closure__ is not None or "<locals>" in fn.__qualname__


class SliceVar(Value):
    """A slice whose bounds are not all constants (e.g. tensors); only usable as an index."""
    __slots__ = ("parts",)

    def __init__(self, parts):
        super().__init__(None)
        self.parts = parts

    def python_type(self):
        return slice




class _Deleted:
    pass


_DELETED = _Deleted()


def _dict_getitems():
    import collections
    return (collections.OrderedDict.__getitem__, collections.defaultdict.__getitem__)


def _plain_constant(x: Any) -> bool:
    """A constant whose equality (with its type) says it all: no float zero (signed) or nan."""
    t = type(x)
    return t in (int, bool, str, type(None)) or (t is float and x == x and x != 0)
