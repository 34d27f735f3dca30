"""Sources: where a traced value lives in the caller's world, as an expression the glue can evaluate.

A source renders to Python source through a ``Codegen`` context that binds the real objects it refers to
(global dicts, modules, cells) to names in the generated function's namespace. Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class Codegen:
    """Names for the objects generated code refers to (bound into its globals)."""

    def __init__(self) -> None:
        self.bindings: dict[str, Any] = {}
        self._by_id: dict[int, str] = {}

    def bind(self, obj: Any, hint: str = "c") -> str:
        name = self._by_id.get(id(obj))
        if name is None:
            hint = "".join(ch if ch.isalnum() else "_" for ch in hint)[:24] or "c"
            name = f"__{hint}_{len(self.bindings)}"
            self.bindings[name] = obj
            self._by_id[id(obj)] = name
        return name


def _simple_literal(v: Any) -> bool:
    t = type(v)
    if t in (int, str, bytes, bool) or v is None:
        return True
    if t is float:
        return v == v and v not in (float("inf"), float("-inf"))
    return False


def literal(v: Any, cg: Codegen) -> str:
    if _simple_literal(v):
        return repr(v)
    if type(v) is tuple and all(_simple_literal(x) for x in v):
        return repr(v)
    return cg.bind(v, type(v).__name__)


class Source:
    __slots__ = ()

    def expr(self, cg: Codegen) -> str:
        raise NotImplementedError(type(self).__name__)

    def name_hint(self) -> str:
        return "v"


@dataclass(frozen=True, slots=True)
class LocalSource(Source):
    name: str

    def expr(self, cg):
        return self.name

    def name_hint(self):
        return self.name


@dataclass(frozen=True, slots=True)
class GlobalSource(Source):
    globals_id: int
    name: str
    globals_dict: Any = None

    def expr(self, cg):
        return f"{cg.bind(self.globals_dict, 'G')}[{self.name!r}]"

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

    def expr(self, cg):
        return f"{self.base.expr(cg)}.{self.name}"

    def name_hint(self):
        return f"{self.base.name_hint()}_{self.name}"


@dataclass(frozen=True, slots=True)
class ItemSource(Source):
    base: Source
    key: Any

    def expr(self, cg):
        return f"{self.base.expr(cg)}[{literal(self.key, cg)}]"

    def name_hint(self):
        return f"{self.base.name_hint()}_{self.key}"


@dataclass(frozen=True, slots=True)
class CellSource(Source):
    """The contents of a real closure cell (bound by identity)."""
    cell_id: int
    cell: Any = None

    def expr(self, cg):
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

    def expr(self, cg):
        return cg.bind(self.obj, getattr(self.obj, "__name__", type(self.obj).__name__))

    def name_hint(self):
        return getattr(self.obj, "__name__", "const")

    def __hash__(self):
        return hash(self.obj_id)

    def __eq__(self, other):
        return type(other) is ConstSource and self.obj_id == other.obj_id
