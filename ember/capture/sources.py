"""Sources: where a traced value lives in the caller's world, as an expression the glue can evaluate.

A source renders to Python source through a ``Codegen`` context that binds the real objects it refers to
(global dicts, modules, cells) to names in the generated function's namespace. Torch-free.
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

from ..emit import attr, c_name, py_literal, py_str


class Codegen:
    """Names for the objects generated code refers to (bound into its globals)."""

    def __init__(self) -> None:
        self.bindings: dict[str, Any] = {}
        self._by_id: dict[int, str] = {}
        self.hoisted: dict[Source, list] = {}      # source -> [local name, already assigned?]
        self._plain = 0
        self.assigned: list[tuple[str, str]] = []  # (first rendering of a hoisted source, its name), in order
        self._class_dicts: dict[int, str] = {}

    def bind_class_dict(self, k: type) -> str:
        """The live ``__dict__`` of class ``k`` (a mappingproxy: a new object on every read, so bound once per
        class here and rendered the same in every guard that reads it)."""
        name = self._class_dicts.get(id(k))
        if name is None:
            name = self._class_dicts[id(k)] = self.bind(k.__dict__, f"{k.__name__}_dict")
            self.bindings.setdefault(f"__keep_{name}", k)        # keeps ``id(k)`` unique
        return name

    def hoist(self, src: Source) -> None:
        """Evaluate ``src`` once per call: its first rendering assigns a local (walrus), later ones reuse it.
        Only valid for code that evaluates renderings in the order they were made (guards, then the body)."""
        if src not in self.hoisted and not isinstance(src, LocalSource):
            self.hoisted[src] = [f"__s{len(self.hoisted)}", False]

    def plain(self, src: Source) -> str:
        """``src`` as a readable expression that assigns nothing (for messages)."""
        self._plain += 1
        try:
            return src.expr(self)
        finally:
            self._plain -= 1

    def bind(self, obj: Any, hint: str = "c") -> str:
        name = self._by_id.get(id(obj))
        if name is None:
            hint = c_name(hint)[:24]
            name = f"__{hint}_{len(self.bindings)}"
            self.bindings[name] = obj
            self._by_id[id(obj)] = name
        return name


def literal(v: Any, cg: Codegen) -> str:
    """``v`` as a literal where one reads back exactly (``ember.emit.py_literal``), else as a bound name."""
    lit = py_literal(v)
    return lit if lit is not None else cg.bind(v, type(v).__name__)


class Source:
    __slots__ = ()

    def expr(self, cg: Codegen) -> str:
        h = cg.hoisted.get(self)
        if h is None or cg._plain:
            return self._expr(cg)
        if h[1]:
            return h[0]
        h[1] = True
        text = f"({h[0]} := {self._expr(cg)})"
        cg.assigned.append((text, h[0]))
        return text

    def _expr(self, cg: Codegen) -> str:
        raise NotImplementedError(type(self).__name__)

    def name_hint(self) -> str:
        return "v"


@dataclass(frozen=True, slots=True)
class LocalSource(Source):
    name: str

    def _expr(self, cg):
        return self.name

    def name_hint(self):
        return self.name


@dataclass(frozen=True, slots=True)
class GlobalSource(Source):
    globals_id: int
    name: str
    globals_dict: Any = None

    def _expr(self, cg):
        return f"{cg.bind(self.globals_dict, 'G')}[{py_str(self.name)}]"

    def name_hint(self):
        return self.name

    def __hash__(self):
        return hash((self.globals_id, self.name))

    def __eq__(self, other):
        return type(other) is GlobalSource and (self.globals_id, self.name) == (other.globals_id, other.name)


@dataclass(frozen=True, slots=True)
class AttrSource(Source):
    base: Source
    name: str

    def _expr(self, cg):
        return attr(self.base.expr(cg), self.name)

    def name_hint(self):
        return f"{self.base.name_hint()}_{self.name}"


@dataclass(frozen=True, slots=True)
class InstAttrSource(AttrSource):
    """An attribute found in the object's instance ``__dict__`` (no data descriptor of its class shadows it):
    read as ``(obj.__dict__)[name]``, the ``__dict__`` fetched once per call. For objects whose class defines
    ``__getattr__`` (every ``nn.Module``), where CPython's attribute lookup takes its slow path (~50 ns each)
    and a dict lookup ~15 ns: a convolution's guards read seven of its attributes. Messages show ``obj.name``."""

    def _expr(self, cg):
        if cg._plain:
            return attr(self.base.expr(cg), self.name)
        inst = AttrSource(self.base, "__dict__")
        cg.hoist(inst)
        return f"{inst.expr(cg)}[{py_str(self.name)}]"


@dataclass(frozen=True, slots=True)
class ItemSource(Source):
    base: Source
    key: Any

    def _expr(self, cg):
        return f"{self.base.expr(cg)}[{literal(self.key, cg)}]"

    def name_hint(self):
        return f"{self.base.name_hint()}_{self.key}"


@dataclass(frozen=True, slots=True)
class CellSource(Source):
    """The contents of a real closure cell (bound by identity)."""
    cell_id: int
    cell: Any = None

    def _expr(self, cg):
        return f"{cg.bind(self.cell, 'cell')}.cell_contents"

    def name_hint(self):
        return "cell"

    def __hash__(self):
        return hash(self.cell_id)

    def __eq__(self, other):
        return type(other) is CellSource and self.cell_id == other.cell_id


@dataclass(frozen=True, slots=True)
class ConstSource(Source):
    """A real object known by identity: needs no guard, renders as a bound name."""
    obj_id: int
    obj: Any = None

    def _expr(self, cg):
        return cg.bind(self.obj, getattr(self.obj, "__name__", type(self.obj).__name__))

    def name_hint(self):
        return getattr(self.obj, "__name__", "const")

    def __hash__(self):
        return hash(self.obj_id)

    def __eq__(self, other):
        return type(other) is ConstSource and self.obj_id == other.obj_id


@dataclass(frozen=True, slots=True)
class CallSource(Source):
    """``fn(base)`` for a side-effect-free function of the value at ``base`` (``int(n)`` of a NumPy integer,
    ``torch.from_numpy(a)``, the rest of a live iterator), bound by name in the generated code."""
    fn: Any
    base: Source
    suffix: str = ""

    def _expr(self, cg):
        return f"{cg.bind(self.fn, getattr(self.fn, '__name__', 'fn'))}({self.base.expr(cg)})"

    def name_hint(self):
        return self.base.name_hint() + self.suffix


@dataclass(frozen=True, slots=True)
class InstDictSource(Source):
    """The instance ``__dict__`` of an object whose class defines its own ``__getattribute__`` (a transformers
    config), read as ``object.__getattribute__`` reads it: through the class's ``__dict__`` slot descriptor,
    not through the hook. ``obj.__dict__`` would run the hook, in Python, on every call (~1 us; the
    descriptor ~75 ns), and the trace means the instance dict itself (the generic lookup's)."""
    base: Source
    getter: Any = field(default=None, compare=False)     # the slot descriptor's bound ``__get__``

    def _expr(self, cg):
        if cg._plain:
            return f"{self.base.expr(cg)}.__dict__"
        return f"{cg.bind(self.getter, 'dict_of')}({self.base.expr(cg)})"

    def name_hint(self):
        return f"{self.base.name_hint()}___dict__"


def instance_dict_source(src: Source, obj: Any) -> Source:
    """Where the instance ``__dict__`` of ``obj`` (at ``src``) is read from: ``src.__dict__``, or past a
    Python-level ``__getattribute__`` of its class (``InstDictSource``)."""
    t = type(obj)
    hook = next((k.__dict__["__getattribute__"] for k in t.__mro__ if "__getattribute__" in k.__dict__), None)
    if type(hook) is types.FunctionType:
        for k in t.__mro__:
            desc = k.__dict__.get("__dict__")
            if desc is not None:
                if type(desc) is types.GetSetDescriptorType:
                    return InstDictSource(src, desc.__get__)
                break
    return AttrSource(src, "__dict__")
