"""The glue: Python source for one cache entry of a compiled frame.

It checks the entry's guards, pulls the graph's inputs from the frame's arguments by their sources, calls the
compiled graph, replays side effects on objects that existed before the call (lists, dicts, attributes,
globals, closure cells) and rebuilds the return value. Everything it needs is bound into its namespace by
name, so ``EMBER_LOGS=output_code`` shows exactly what runs. Torch-free: graph outputs are requested through
``output_ref``, and the torch plugin supplies the graph call line.
"""
from __future__ import annotations

import collections
import functools
import inspect
import types
from typing import Any

from ..emit import attr, is_attr_name, py_str
from . import rules as R
from . import subclasses
from .deques import DequeVar, ProxyVar
from .class_attrs import replay_class_writes
from .containers import DictView
from .interpreter import NULL
from .live_iters import LiveIterVar, advance as advance_live_iter
from .sources import Codegen, literal
from .symbolic import SliceVar, SymbolicDomain, _DELETED
from .values import (MethodOf, OpaqueVar, SeqIterVar, BoundMethod, CellVar, Const, DictVar, FuncVar, IterVar, ListVar, ObjectVar, PartialVar,
                     RealCellVar, SetVar, SuperVar, TupleVar, Value, make_mapping,
                     is_python_class)


class GlueBuilder:
    def __init__(self, d: SymbolicDomain) -> None:
        self.d = d
        self.cg: Codegen = d.cg
        self.graph_outputs: list[Value] = []
        self._out_index: dict[int, int] = {}
        self.creations: list[str] = []
        self.fills: list[str] = []
        self._temps: dict[int, str] = {}
        self._filled: set[int] = set()

    # -- expressions -----------------------------------------------------------------------------------
    def output_ref(self, v: Value) -> str:
        """An expression for a value computed by the graph (its output slot)."""
        i = self._out_index.get(id(v))
        if i is None:
            i = self._out_index[id(v)] = len(self.graph_outputs)
            self.graph_outputs.append(v)
        return f"__out[{i}]"

    def cell_expr(self, v: RealCellVar) -> str:
        return v.cell_source.expr(self.cg) if v.cell_source is not None else self.cg.bind(v.cell, "cell")

    def expr(self, v: Any) -> str:
        if type(v) is RealCellVar:
            return self.cell_expr(v)
        if v.source is not None and not isinstance(v, TupleVar):
            return v.source.expr(self.cg)
        rule = R.RECONSTRUCT.find(type(v))
        if rule is not None:
            return rule(self, v)
        t = type(v)
        if t is Const:
            return literal(v.value, self.cg)
        if t is TupleVar:
            if v.source is not None and all(x.source is not None for x in v.items):
                return v.source.expr(self.cg)
            # made once, as every new object: a tuple stored in two places is one object (``is`` holds, and
            # an attribute set on a tuple subclass's instance is seen through each)
            name, fresh = self._temp(v, "tup")
            if fresh:
                self.creations.append(f"{name} = {self._tuple(v)}")
            return name
        if t in (ListVar, DictVar, SetVar, DequeVar, ProxyVar):     # new mutable containers: made once
            name, fresh = self._temp(v, "new")
            if fresh:
                self.creations.append(f"{name} = {self._container(v)}")
            return name
        if isinstance(v, ObjectVar) and v.is_new:
            return self._new_object(v)
        if t is BoundMethod:
            return f"{self.cg.bind(types.MethodType, 'MethodType')}({self.expr(v.func)}, {self.expr(v.self_)})"
        if t is PartialVar:
            args = "".join(f", {self.expr(a)}" for a in v.args)
            kw = "".join(f", {k}={self.expr(x)}" if is_attr_name(k)
                         else f", **{{{py_str(k)}: {self.expr(x)}}}"      # a keyword that is no identifier
                         for k, x in v.kwargs.items())
            return f"{self.cg.bind(functools.partial, 'partial')}({self.expr(v.func)}{args}{kw})"
        if t is FuncVar:
            return self._function(v)
        if t is CellVar:
            return self._cell(v)
        if t is DictView:
            return f"{self.expr(v.d)}.{v.kind}()"
        if t is SliceVar:
            return f"slice({', '.join(self.expr(p) for p in v.parts)})"
        raise self.d.unsupported(None, f"returning or storing a {v.describe()} ({type(v).__name__}) out of "
                                       "compiled code is not supported")

    def _tuple(self, v: TupleVar) -> str:
        inner = ", ".join(self.expr(x) for x in v.items)
        if v.cls is None:
            return f"({inner}{',' if len(v.items) == 1 else ''})"
        cls = self.cg.bind(v.cls, v.cls.__name__)
        if is_python_class(v.cls):       # not the class's own __new__ again (see values.make_tuple)
            return f"tuple.__new__({cls}, ({inner}{',' if v.items else ''}))"
        return f"{cls}({inner})" if hasattr(v.cls, "_fields") else f"{cls}(({inner},))"

    def _temp(self, v: Value, prefix: str) -> tuple[str, bool]:
        hit = self._temps.get(id(v))
        if hit is not None:
            return hit[0], False
        name = f"__{prefix}{len(self._temps)}"
        self._temps[id(v)] = (name, v)      # the value is kept alive so its id is not reused
        return name, True

    def _new_object(self, v: ObjectVar) -> str:
        name, fresh = self._temp(v, "obj")
        if fresh:
            cls = self.cg.bind(type(v.obj), type(v.obj).__name__)
            if v.base_part is None:
                self.creations.append(f"{name} = object.__new__({cls})")
            else:       # a container subclass: its items go in through the base type, not the class's overrides
                subclasses.reconstruct(self, v, name, cls)
            for k, x in v.overlay.items():
                if x is not NULL:
                    self.fills.append(f"object.__setattr__({name}, {py_str(k)}, {self.expr(x)})")
        return name

    def _cell(self, v: CellVar) -> str:
        name, fresh = self._temp(v, "cell")
        if fresh:
            self.creations.append(f"{name} = {self.cg.bind(types.CellType, 'CellType')}()")
            if v.contents is not NULL:
                self.fills.append(f"{name}.cell_contents = {self.expr(v.contents)}")
        return name

    def _container(self, v: Any) -> str:
        t = type(v)
        if t is ListVar:
            return "[" + ", ".join(self.expr(x) for x in v.items) + "]"
        if t is ProxyVar:
            return f"{self.cg.bind(types.MappingProxyType, 'MappingProxyType')}({self.expr(v.target)})"
        if t is DequeVar:
            items = "[" + ", ".join(self.expr(x) for x in v.items) + "]"
            return f"{self.cg.bind(collections.deque, 'deque')}({items}, {v.maxlen!r})"
        if t is DictVar:
            body = "{" + ", ".join(f"{self.expr(v.keys[k])}: {self.expr(x)}" for k, x in v.items.items()) + "}"
            if v.cls is dict:
                return body
            if is_python_class(v.cls):      # not the class's own __init__ again (see values.make_mapping)
                df = self.expr(v.default_factory) if v.default_factory is not None else "None"
                make = self.cg.bind(make_mapping, "make_mapping")
                return f"{make}({self.cg.bind(v.cls, v.cls.__name__)}, {body}, {df})"
            if v.default_factory is not None:
                return f"{self.cg.bind(v.cls, v.cls.__name__)}({self.expr(v.default_factory)}, {body})"
            return f"{self.cg.bind(v.cls, v.cls.__name__)}({body})"
        items = ", ".join(self.expr(x) for x in v.items.values())
        s = f"{{{items}}}" if v.items else "set()"
        return f"frozenset({s})" if v.frozen else s

    def _function(self, v: FuncVar) -> str:
        code = self.cg.bind(v.code, "code")
        g = self.cg.bind(v.f_globals, "G")
        defaults = self.expr(v.defaults) if v.defaults is not None else "None"
        closure = ("(" + "".join(f"{self.expr(c)}, " for c in v.closure) + ")") if v.closure else "None"
        fn = (f"{self.cg.bind(types.FunctionType, 'FunctionType')}({code}, {g}, {py_str(v.code.co_name)}, "
              f"{defaults}, {closure})")
        name, fresh = self._temp(v, "fn")
        if fresh:
            self.creations.append(f"{name} = {fn}")
            self.fills.append(f"{name}.__qualname__ = {py_str(v.qualname)}")
            if v.kwdefaults is not None:
                self.fills.append(f"{name}.__kwdefaults__ = {self.expr(v.kwdefaults)}")
            if v.annotations is not None:
                ann = self.expr(v.annotations)
                if isinstance(v.annotations, TupleVar):      # MAKE_FUNCTION's (name, value, ...) pairs
                    ann = f"dict(zip({ann}[::2], {ann}[1::2]))"
                self.fills.append(f"{name}.__annotations__ = {ann}")
            for k, x in v.attrs.items():        # functools.wraps and the like, in the order they were set
                if k == "__dict__":
                    self.fills.append(f"{name}.__dict__.update({self.expr(x)})")
                else:
                    self.fills.append(f"setattr({name}, {py_str(k)}, {self.expr(x)})")
        return name

    # -- side effects ----------------------------------------------------------------------------------
    def side_effect_lines(self) -> list[str]:
        """Replay of the changes to existing objects, in two phases: first every target object and every new
        value is read (they may be reached through objects that change), then every write happens."""
        reads: list[str] = []
        writes: list[str] = []
        for v in self.d.side_effects:
            self._effect(v, reads, writes)
        for (_, name), (g, _, v) in self.d.global_writes.items():
            gn = self.cg.bind(g, "G")
            if v is NULL:
                writes.append(f"{gn}.pop({py_str(name)}, None)")
            else:
                writes.append(f"{gn}[{py_str(name)}] = {self._value(reads, v)}")
        replay_class_writes(self, reads, writes)
        for fn, args in self.d.deferred_calls:      # logging, in program order, after the changes above
            writes.append(f"{self.expr(fn)}({', '.join(self._value(reads, a) for a in args)})")
        return reads + writes

    def _read(self, reads: list[str], expr: str) -> str:
        name = f"__se{len(reads)}"
        reads.append(f"{name} = {expr}")
        return name

    def _value(self, reads: list[str], v: Value) -> str:
        if type(v) is Const and v.source is None:
            return self.expr(v)         # reads nothing that a write could change
        return self._read(reads, self.expr(v))

    def _effect(self, v: Value, reads: list[str], writes: list[str]) -> None:
        if isinstance(v, RealCellVar):
            c = self.cell_expr(v)
            writes.append(f"del {c}.cell_contents" if v.written is _DELETED
                          else f"{c}.cell_contents = {self._value(reads, v.written)}")
            return
        if type(v) is LiveIterVar:      # the trace's next() calls on a live iterator (live_iters.py)
            if v.direct:
                writes.append(f"{self.cg.bind(advance_live_iter, 'advance')}({self._read(reads, self.expr(v))}, "
                              f"{v.direct})")
            return
        s = self._read(reads, v.source.expr(self.cg))
        if type(v.source) is subclasses.PartSource:     # the items of an existing container-subclass object
            writes.append(subclasses.replay_part(self, v, s, reads, self._read))
        elif type(v) is ListVar:
            writes.append(f"{s}[:] = {self._read(reads, self.expr(ListVar(v.items)))}")
        elif type(v) is DequeVar:
            writes.append(f"{s}.clear(); {s}.extend({self._read(reads, self.expr(ListVar(v.items)))})")
        elif type(v) is DictVar:
            writes.append(f"{s}.clear(); {s}.update({self._read(reads, self.expr(DictVar(v.items, v.keys)))})")
        elif type(v) is SetVar:
            writes.append(f"{s}.clear(); {s}.update({self._read(reads, self.expr(SetVar(v.items)))})")
        elif isinstance(v, ObjectVar):
            plain = not getattr(v, "use_setattr", False)
            setter = "object.__setattr__" if plain else "setattr"
            deleter = self.cg.bind(_delattr_plain if plain else _delattr_quiet, "delattr")
            for k, x in v.overlay.items():
                writes.append(f"{deleter}({s}, {py_str(k)})" if x is NULL
                              else f"{setter}({s}, {py_str(k)}, {self._value(reads, x)})")
        else:
            raise self.d.unsupported(None, f"replaying a change to a {v.describe()}")


def _delattr_plain(obj: Any, name: str) -> None:
    """Replays ``del obj.name``; the attribute may have been added by the same trace (then it is absent)."""
    try:
        object.__delattr__(obj, name)
    except AttributeError:
        pass


def _delattr_quiet(obj: Any, name: str) -> None:
    try:
        delattr(obj, name)
    except AttributeError:
        pass


_ = (IterVar, SuperVar)


def _iter_at(seq, n):
    it = iter(seq)
    for _ in range(n):
        next(it)
    return it


@R.RECONSTRUCT.register(SeqIterVar)
def _seq_iter_reconstruct(glue: GlueBuilder, v: SeqIterVar) -> str:
    if isinstance(v.seq, list):
        rest = v.seq[v.pos:]
        return "iter((" + "".join(f"{glue.expr(x)}, " for x in rest) + "))"
    return f"{glue.cg.bind(_iter_at, 'iter_at')}({glue.expr(v.seq)}, {v.pos})"


@R.RECONSTRUCT.register(IterVar)
def _generator_reconstruct(glue: GlueBuilder, v: IterVar) -> str:
    """A generator the trace made but never started (``return gen_fn(t)``) is made again by calling its
    function on the same argument values: it runs lazily, when the caller iterates, as eager's would. One that
    has started is rebuilt in its state (gen_rebuild.py)."""
    if v.call is None:
        raise glue.d.unsupported(None, f"returning or storing a {v.describe()} (IterVar) out of compiled code is "
                                       "not supported")
    if inspect.getgeneratorstate(v.gen) != inspect.GEN_CREATED:
        if v.frame is None:     # a started builtin iterator (map, filter) over values only the trace has
            raise glue.d.unsupported(None, f"a started {v.describe()} iterator is live across a graph break; "
                                           "its state cannot be rebuilt")
        from .gen_rebuild import rebuild_started
        return rebuild_started(glue, v)
    name, fresh = glue._temp(v, "gen")
    if fresh:
        func, args, kwargs = v.call
        fn = glue.expr(func) if isinstance(func, Value) else glue.cg.bind(func, getattr(func, "__name__", "fn"))
        params = [glue.expr(a) for a in args] + [f"**{{{py_str(k)}: {glue.expr(x)}}}" for k, x in kwargs.items()]
        glue.creations.append(f"{name} = {fn}({', '.join(params)})")
    return name


@R.RECONSTRUCT.register(OpaqueVar)
def _opaque_reconstruct(glue: GlueBuilder, v: OpaqueVar) -> str:
    return v.source.expr(glue.cg)


@R.RECONSTRUCT.register(MethodOf)
def _methodof_reconstruct(glue: GlueBuilder, v: MethodOf) -> str:
    return attr(glue.expr(v.recv), v.name)
