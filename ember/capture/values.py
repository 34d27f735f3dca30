"""Symbolic values: what the symbolic interpreter keeps on its stack and in its locals.

``Const`` is a real Python object the trace treats as immutable (numbers, strings, functions, classes,
modules, enum members...). Containers (``TupleVar``, ``ListVar``, ``DictVar``, ``SetVar``) hold values, since
they may contain tensors. ``ObjectVar`` is a user object whose attribute writes are kept in an overlay and
replayed by the glue. A value that already existed before the call has a ``source``: its guards and its
reconstruction refer to it. Torch-free; the torch plugin adds tensor and module values.
"""
from __future__ import annotations

import enum
import inspect
import re
import types
from typing import Any

from .interpreter import NULL, UserException
from .sources import Codegen, Source

IMMUTABLE_TYPES: set[type] = {int, float, bool, complex, str, bytes, type(None), type(Ellipsis),
                              type(NotImplemented), range, slice, frozenset, types.CodeType,
                              inspect.Signature, inspect.Parameter, re.Pattern, re.Match}
IDENTITY_TYPES: tuple[type, ...] = (types.FunctionType, types.BuiltinFunctionType, types.BuiltinMethodType,
                                    types.MethodDescriptorType, types.WrapperDescriptorType, types.ModuleType,
                                    types.MethodWrapperType, types.ClassMethodDescriptorType, type,
                                    types.GetSetDescriptorType, types.MemberDescriptorType)


def is_plain_builtin(fn: Any) -> bool:
    """A builtin function that is not a bound method: its ``__self__`` is a module, None, or pybind11's record
    of the function (a ``PyCapsule`` in older pybind11: ``torch._C._is_tracing``), which is no receiver at
    all and has no attribute named like the function."""
    if type(fn) is not types.BuiltinFunctionType:
        return False
    self_ = fn.__self__
    if self_ is None or isinstance(self_, types.ModuleType):
        return True
    name = type(self_).__name__
    return name.startswith("pybind11_detail_function_record") or name == "PyCapsule"


def is_immutable(v: Any) -> bool:
    t = type(v)
    return (t in IMMUTABLE_TYPES or isinstance(v, enum.Enum)
            or (t is tuple and all(is_immutable(x) for x in v)) or isinstance(v, NUMPY_VALUES))


try:        # NumPy's scalars, dtypes and finfo/iinfo records: values, made and read like Python numbers
    import numpy as _np
    NUMPY_VALUES: tuple[type, ...] = (_np.number, _np.bool_, _np.dtype, _np.finfo, _np.iinfo)
    NUMPY_SCALARS: tuple[type, ...] = (_np.number, _np.bool_)
    NUMPY_INTS: tuple[type, ...] = (_np.integer,)
except ImportError:     # pragma: no cover - torch brings numpy along
    NUMPY_VALUES = NUMPY_SCALARS = NUMPY_INTS = ()


class NotConst(Exception):
    pass


class Value:
    """Base of every symbolic value. ``source`` is set when the value existed before the traced call."""
    __slots__ = ("source",)

    def __init__(self, source: Source | None = None):
        self.source = source

    def python_type(self) -> type:
        raise NotImplementedError(type(self).__name__)

    def as_python(self) -> Any:
        """The real Python value, for values fully known at trace time (raises NotConst otherwise)."""
        raise NotConst(type(self).__name__)

    def real_object(self) -> Any:
        """The underlying existing object (identity), or NULL."""
        return NULL

    def instance_check(self, cls: type) -> bool | None:
        """``isinstance(self, cls)`` where ``cls``'s metaclass answers from the instance's state (not its type),
        or None where the value has nothing to say (then the metaclass's own check, or the type, decides)."""
        return None

    def describe(self) -> str:
        return self.python_type().__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


class Const(Value):
    __slots__ = ("value",)

    def __init__(self, value: Any, source: Source | None = None):
        super().__init__(source)
        self.value = value

    def python_type(self):
        return type(self.value)

    def as_python(self):
        return self.value

    def real_object(self):
        return self.value

    def describe(self):
        r = repr(self.value)
        return r if len(r) < 60 else r[:57] + "..."


_HEAPTYPE = 1 << 9          # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (or namedtuple())


def is_python_class(cls: type) -> bool:
    """Whether a class is defined in Python (a namedtuple, a dict subclass, a class with its own ``__new__``).
    Values of such tuple and mapping classes are remade through their C base (``make_tuple``,
    ``make_mapping``), so the class's ``__new__``/``__init__``, which already ran in the trace, do not run again
    on the items they produced; a C structseq (torch.return_types) takes its own constructor."""
    return bool(cls.__flags__ & _HEAPTYPE)


def make_tuple(cls: type | None, items: tuple) -> tuple:
    if cls is None:
        return items
    if is_python_class(cls):
        return tuple.__new__(cls, items)
    return cls(*items) if hasattr(cls, "_fields") else cls(items)


def make_mapping(cls: type, items: dict, default_factory: Any = None) -> Any:
    """A mapping of class ``cls`` holding ``items``. A class defined in Python (a dict/OrderedDict/defaultdict
    subclass) is made through its C base, item by item with the base's ``__setitem__``, so its own
    ``__init__``/``__setitem__``, which already ran in the trace, do not run again on what they produced."""
    if cls is dict:
        return items
    if not is_python_class(cls):
        return cls(default_factory, items) if default_factory is not None else cls(items)
    base = next(k for k in cls.__mro__ if not is_python_class(k))
    obj = base.__new__(cls)
    if default_factory is not None:
        obj.default_factory = default_factory
    for k, v in items.items():
        base.__setitem__(obj, k, v)
    return obj


class TupleVar(Value):
    __slots__ = ("items", "cls")

    def __init__(self, items: list[Value], cls: type | None = None, source: Source | None = None):
        super().__init__(source)
        self.items = list(items)
        self.cls = cls

    def python_type(self):
        return self.cls or tuple

    def as_python(self):
        return make_tuple(self.cls, tuple(i.as_python() for i in self.items))


def tuple_override(v: Value, name: str):
    """The Python function a tuple subclass (a NamedTuple with methods) defines for ``name`` over tuple's own,
    else None: ``t[i]``, ``len(t)``, ``iter(t)`` (and so unpacking) run it, as CPython's type slots do."""
    cls = v.cls if type(v) is TupleVar else None
    if cls is None:
        return None
    for k in cls.__mro__:
        if name in k.__dict__:
            fn = k.__dict__[name]
            return fn if type(fn) is types.FunctionType else None
    return None


class MutableVar(Value):
    """A value whose changes during the trace must be replayed if it existed before (it has a source)."""
    __slots__ = ("mutated", "obj")

    def __init__(self, source: Source | None = None, obj: Any = NULL):
        super().__init__(source)
        self.mutated = False
        self.obj = obj          # the real object, for existing values

    def real_object(self):
        return self.obj


class ListVar(MutableVar):
    __slots__ = ("items",)

    def __init__(self, items: list[Value], source: Source | None = None, obj: Any = NULL):
        super().__init__(source, obj)
        self.items = list(items)

    def python_type(self):
        return list

    def as_python(self):
        return [i.as_python() for i in self.items]


class DictVar(MutableVar):
    """``items`` maps real (hashable) keys to values; ``keys`` keeps the key values for reconstruction."""
    __slots__ = ("items", "keys", "cls", "default_factory")

    def __init__(self, items: dict[Any, Value], keys: dict[Any, Value], cls: type = dict,
                 source: Source | None = None, obj: Any = NULL, default_factory: Value | None = None):
        super().__init__(source, obj)
        self.items = dict(items)
        self.keys = dict(keys)
        self.cls = cls
        self.default_factory = default_factory

    def python_type(self):
        return self.cls

    def as_python(self):
        d = {k: v.as_python() for k, v in self.items.items()}
        df = None if self.default_factory is None else self.default_factory.as_python()
        return make_mapping(self.cls, d, df)


class SetVar(MutableVar):
    __slots__ = ("items", "frozen")

    def __init__(self, items: dict[Any, Value], source: Source | None = None, obj: Any = NULL,
                 frozen: bool = False):
        super().__init__(source, obj)
        self.items = dict(items)
        self.frozen = frozen

    def python_type(self):
        return frozenset if self.frozen else set

    def as_python(self):
        return (frozenset if self.frozen else set)(self.items)


class ObjectVar(MutableVar):
    """A user object. Existing objects read their attributes through their source; writes go to
    ``overlay`` (NULL marks a deleted attribute) and are replayed. New objects live only in the overlay.
    A new instance of a dict/set/frozenset subclass keeps its items in ``base_part`` (the base type's methods
    act on it, see subclasses.py); ``attrs`` is the ``__dict__`` of a new object once read, sharing
    ``overlay`` as its items."""
    __slots__ = ("overlay", "is_new", "base_part", "attrs")

    def __init__(self, obj: Any, source: Source | None = None, is_new: bool = False):
        super().__init__(source, obj)
        self.overlay: dict[str, Any] = {}
        self.is_new = is_new
        self.base_part: DictVar | SetVar | None = None
        self.attrs: DictVar | None = None

    def python_type(self):
        return type(self.obj)


class FuncVar(Value):
    """A function made by MAKE_FUNCTION inside the trace. ``attrs`` holds attributes the trace set on it
    (``functools.wraps``: ``__module__``, ``__name__``, ``__doc__``, ``__wrapped__``, ...), by name."""
    __slots__ = ("code", "f_globals", "defaults", "kwdefaults", "closure", "annotations", "qualname", "attrs")

    def __init__(self, code: types.CodeType, f_globals: dict, defaults: Value | None = None,
                 kwdefaults: Value | None = None, closure: list | None = None, annotations: Value | None = None):
        super().__init__(None)
        self.code = code
        self.f_globals = f_globals
        self.defaults = defaults
        self.kwdefaults = kwdefaults
        self.closure = closure
        self.annotations = annotations
        self.qualname = code.co_qualname
        self.attrs: dict[str, Value] = {}

    def python_type(self):
        return types.FunctionType

    def describe(self):
        return self.qualname


class BoundMethod(Value):
    __slots__ = ("func", "self_")

    def __init__(self, func: Value, self_: Value, source: Source | None = None):
        super().__init__(source)
        self.func = func
        self.self_ = self_

    def python_type(self):
        return types.MethodType


class MethodOf(Value):
    """A method of a built-in container value (``lst.append``): calls dispatch on the receiver."""
    __slots__ = ("recv", "name")

    def __init__(self, recv: Value, name: str):
        super().__init__(None)
        self.recv = recv
        self.name = name

    def python_type(self):
        return types.BuiltinMethodType

    def describe(self):
        return f"{self.recv.describe()}.{self.name}"


class CellVar(Value):
    """A cell made inside the trace."""
    __slots__ = ("contents",)

    def __init__(self, contents: Any = NULL):
        super().__init__(None)
        self.contents = contents


class RealCellVar(Value):
    """A closure cell that existed before the call; writes are replayed by the glue. ``source`` is where
    its contents are read; ``cell_source`` where the cell itself is (None: the cell is bound by identity)."""
    __slots__ = ("cell", "written", "cell_source")

    def __init__(self, cell: types.CellType, source: Source, cell_source: Source | None = None):
        super().__init__(source)
        self.cell = cell
        self.written: Any = NULL
        self.cell_source = cell_source


class IterVar(Value):
    """An iterator implemented by a Python generator that yields values (or a symbolic generator frame)."""
    __slots__ = ("gen", "desc", "frame", "call")

    def __init__(self, gen: Any, desc: str = "iterator", frame: Any = None, call: Any = None):
        super().__init__(None)
        self.gen = gen
        self.desc = desc
        self.frame = frame
        self.call = call        # a generator's (function, args, kwargs): how to make it again, unstarted

    def python_type(self):
        return types.GeneratorType if self.frame is not None else type(iter([]))

    def describe(self):
        return self.desc


class SeqIterVar(IterVar):
    """An iterator over a sequence: ``seq`` is a live ListVar/TupleVar or a snapshot list of values; ``pos`` is
    the next index. Unlike a general iterator it can be rebuilt as a real one at a graph break."""
    __slots__ = ("seq", "pos")

    def __init__(self, seq: Any, desc: str):
        self.seq = seq
        self.pos = 0
        super().__init__(self._items(), desc)

    def _items(self):
        while True:
            items = self.seq if isinstance(self.seq, list) else self.seq.items
            if self.pos >= len(items):
                return
            self.pos += 1
            yield items[self.pos - 1]


class OpaqueVar(Value):
    """A real object handed to a continuation that the trace may pass along but not look into (a float from
    ``.item()``, say): any use of its value is a graph break, so its value is never guarded."""
    __slots__ = ("obj",)

    def __init__(self, obj: Any, source: Source):
        super().__init__(source)
        self.obj = obj

    def python_type(self):
        return type(self.obj)

    def describe(self):
        return f"{type(self.obj).__name__} computed outside the graph"


class SuperVar(Value):
    __slots__ = ("cls", "obj")

    def __init__(self, cls: type, obj: Value):
        super().__init__(None)
        self.cls = cls
        self.obj = obj

    def python_type(self):
        return super


class PartialVar(Value):
    __slots__ = ("func", "args", "kwargs")

    def __init__(self, func: Value, args: list[Value], kwargs: dict[str, Value], source: Source | None = None):
        super().__init__(source)
        self.func = func
        self.args = args
        self.kwargs = kwargs

    def python_type(self):
        import functools
        return functools.partial


def user_error(exc: BaseException) -> UserException:
    return UserException(exc)


def reconstruct_const(v: Any, cg: Codegen) -> str:
    from .sources import literal
    return literal(v, cg)
