"""``SymNode``: PyTorch's symbolic-number node protocol implemented over ember's sympy expressions.

``torch.SymInt(SymNode(...))`` is a size PyTorch's shape code (meta kernels, ``torch.Size``, Python
decompositions) can compute with: arithmetic builds new nodes, and every question that needs a Python
``bool``/``int`` (``guard_bool``, ``guard_int``, ``expect_true``, ...) is answered by the node's
``SymbolTable`` from the hints and recorded as a relation. Nodes never hold data; ``hint`` is the value at
the hints (kept alongside so no expression has to be re-evaluated).
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import sympy
import torch


def _int_expr(v: Any) -> Any:
    return sympy.Integer(v) if isinstance(v, (int, bool)) and not isinstance(v, sympy.Basic) else v


def _floordiv(a, b):
    if isinstance(a, sympy.Integer) and isinstance(b, sympy.Integer):
        return sympy.Integer(int(a) // int(b))
    return sympy.floor(sympy.sympify(a) / b)


def _mod(a, b):
    return sympy.Mod(a, b)


def _truediv(a, b):
    return sympy.sympify(a) / b


class SymNode:
    """One symbolic number: a sympy ``expr``, its Python type (int, float or bool) and its ``hint``."""

    @property
    def shape_env(self):
        """PyTorch helpers look for a ShapeEnv; ember's nodes answer through their table (None). A node over an
        unbacked symbol has a minimal stand-in, so that ``guard_or_false``/``guard_or_true`` take their safe
        default instead of asking ``guard_bool`` (which cannot answer without a hint)."""
        if self.table.unbacked and getattr(self.expr, "free_symbols", set()) & self.table.unbacked:
            return _UnbackedEnv(self.table)
        return None

    def __init__(self, expr: Any, pytype: type, table: Any, hint: Any = None) -> None:
        self.expr = table.simplify(sympy.sympify(expr)) if not isinstance(expr, bool) else sympy.sympify(expr)
        self.pytype = pytype
        self.table = table
        self.hint = pytype(table.hint(self.expr)) if hint is None else hint

    # what it is -----------------------------------------------------------------------------------------
    @property
    def _hint(self):    # PyTorch's Python meta kernels read the hint under this name (aten.slice's)
        return self.hint

    def is_int(self) -> bool: return self.pytype is int
    def is_float(self) -> bool: return self.pytype is float
    def is_bool(self) -> bool: return self.pytype is bool
    def is_nested_int(self) -> bool: return False
    def nested_int(self): return None
    def nested_int_coeff(self): return None
    def is_symbolic(self) -> bool: return bool(getattr(self.expr, "free_symbols", ()))
    def is_constant(self) -> bool: return False
    def has_hint(self) -> bool:
        """False for a data-dependent size (an unbacked symbol): its ``hint`` is a stand-in, and ATen's C++ code
        asks this before deciding on a size it may treat as general (``slicePrefix1sSize`` strips leading 1s
        of an index_put's values only where the size has a hint), as it does for PyTorch's unbacked SymInts."""
        unbacked = self.table.unbacked
        return not (unbacked and getattr(self.expr, "free_symbols", set()) & unbacked)

    def constant_int(self): return None
    def constant_bool(self): return None

    def _const(self):
        return None if self.is_symbolic() else self.pytype(self.hint)

    def maybe_as_int(self): return self._const() if self.pytype is int else None
    def maybe_as_float(self): return self._const() if self.pytype is float else None
    def maybe_as_bool(self): return self._const() if self.pytype is bool else None

    def wrap_int(self, n: int) -> "SymNode": return SymNode(sympy.Integer(n), int, self.table, int(n))
    def wrap_float(self, n: float) -> "SymNode": return SymNode(sympy.Float(n), float, self.table, float(n))
    def wrap_bool(self, n: bool) -> "SymNode": return SymNode(sympy.true if n else sympy.false, bool, self.table, bool(n))
    def clone(self) -> "SymNode": return self
    def with_shape_env(self, env) -> "SymNode": return self

    def str(self) -> str: return str(self.expr)
    def _graph_repr(self) -> str: return str(self.expr)
    def __str__(self) -> str: return str(self.expr)
    def __repr__(self) -> str: return f"SymNode({self.expr}, hint={self.hint})"

    # guards -----------------------------------------------------------------------------------------------
    def _decide(self) -> bool:
        if self.pytype is bool:
            return self.table.decide(self.expr)
        return self.table.decide(sympy.Ne(self.expr, 0))

    def _cond(self):
        return self.expr if self.pytype is bool else sympy.Ne(self.expr, 0)

    def guard_bool(self, file: str = "", line: int = 0) -> bool: return self._decide()

    def expect_true(self, file: str = "", line: int = 0) -> bool:
        """A check the program relies on (``torch._check``): a runtime assertion on unbacked sizes."""
        return self.table.expect(self._cond())

    def expect_size(self, file: str = "", line: int = 0) -> bool:
        if self.is_symbolic():
            self.table.expect(sympy.Ge(self.expr, 0))
        return True

    def guard_or_false(self, file: str = "", line: int = 0) -> bool:
        got = self.table.maybe(self._cond())
        return False if got is None else got

    def guard_or_true(self, file: str = "", line: int = 0) -> bool:
        got = self.table.maybe(self._cond())
        return True if got is None else got

    def guard_size_oblivious(self, file: str = "", line: int = 0) -> bool:
        return self.table.size_oblivious(self._cond())

    def statically_known_true(self, file: str = "", line: int = 0) -> bool:
        return self.pytype is bool and self.table.known(self.expr) is True

    def guard_int(self, file: str = "", line: int = 0) -> int:
        """A concrete int is needed (the size is specialized): record ``expr == hint``."""
        if self.is_symbolic() and self.table.unbacked and self.expr.free_symbols & self.table.unbacked:
            from ember.errors import DataDependent
            raise DataDependent(f"a Python constant is needed for {self.expr}: "
                                + self.table._undecidable(sympy.Eq(self.expr, int(self.hint))))
        if self.is_symbolic():
            self.table.decide(sympy.Eq(self.expr, int(self.hint)))
        return int(self.hint)

    def guard_float(self, file: str = "", line: int = 0) -> float:
        if self.is_symbolic():
            self.table.decide(sympy.Eq(self.expr, self.hint))
        return float(self.hint)

    def int_(self) -> int: return self.guard_int()
    def bool_(self) -> bool: return self._decide()

    # layout questions PyTorch asks about symbolic tensors ------------------------------------------------
    def is_contiguous(self, sizes, strides) -> "SymNode":
        return self.wrap_bool(_contiguous([_e(s) for s in sizes], [_e(s) for s in strides], range(len(sizes))[::-1]))

    def is_channels_last_contiguous_2d(self, sizes, strides) -> "SymNode":
        return self.wrap_bool(len(sizes) == 4 and _contiguous([_e(s) for s in sizes], [_e(s) for s in strides],
                                                              [1, 3, 2, 0]))

    def is_channels_last_contiguous_3d(self, sizes, strides) -> "SymNode":
        return self.wrap_bool(len(sizes) == 5 and _contiguous([_e(s) for s in sizes], [_e(s) for s in strides],
                                                              [1, 4, 3, 2, 0]))

    def is_channels_last_strides_2d(self, sizes, strides) -> "SymNode":
        return self.is_channels_last_contiguous_2d(sizes, strides)

    def is_channels_last_strides_3d(self, sizes, strides) -> "SymNode":
        return self.is_channels_last_contiguous_3d(sizes, strides)

    def is_non_overlapping_and_dense_indicator(self, sizes, strides) -> "SymNode":
        sz, st = [_e(s) for s in sizes], [_e(s) for s in strides]
        order = sorted(range(len(sz)), key=lambda i: (_hint(self.table, st[i]), _hint(self.table, sz[i])))
        return self.wrap_int(int(_contiguous(sz, st, order)))

    def is_non_overlapping_and_dense(self, sizes, strides) -> "SymNode":
        return self.wrap_bool(bool(self.is_non_overlapping_and_dense_indicator(sizes, strides).hint))

    # arithmetic ---------------------------------------------------------------------------------------------
    def _new(self, expr, pytype, hint) -> "SymNode":
        return SymNode(expr, pytype, self.table, hint)

    def sym_sum(self, args) -> "SymNode":
        return self._new(sympy.Add(*[a.expr for a in args]), self.pytype, sum(a.hint for a in args))

    def sym_float(self) -> "SymNode": return self._new(self.expr, float, float(self.hint))
    def sym_sqrt(self) -> "SymNode": return self._new(sympy.sqrt(self.expr), float, math.sqrt(self.hint))

    def sym_int(self) -> "SymNode":
        return self._new(sympy.floor(self.expr) if self.pytype is float else self.expr, int, int(self.hint))

    def sym_not(self) -> "SymNode": return self._new(sympy.Not(self.expr), bool, not self.hint)

    def sym_ite(self, then: "SymNode", other: "SymNode") -> "SymNode":
        return then if self._decide() else other

    def neg(self) -> "SymNode": return self._new(-self.expr, self.pytype, -self.hint)
    def pos(self) -> "SymNode": return self
    def abs(self) -> "SymNode": return self._new(sympy.Abs(self.expr), self.pytype, abs(self.hint))

    def round(self, ndigits=None) -> "SymNode":
        v = round(self.hint) if ndigits is None else round(self.hint, ndigits)
        return self.wrap_int(v) if ndigits is None else self.wrap_float(v)

    def ceil(self) -> "SymNode": return self._new(sympy.ceiling(self.expr), int, math.ceil(self.hint))
    def floor(self) -> "SymNode": return self._new(sympy.floor(self.expr), int, math.floor(self.hint))
    def trunc(self) -> "SymNode": return self._new(sympy.floor(self.expr), int, math.trunc(self.hint))
    def is_integer(self) -> "SymNode": return self.wrap_bool(float(self.hint).is_integer())


class _UnbackedEnv:
    """What PyTorch's ``guard_or_false``/``guard_or_true`` call on a node's ShapeEnv: ``evaluate_sym_node``."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def evaluate_sym_node(self, node: "SymNode", size_oblivious: bool = False, fallback_value: Any = None) -> Any:
        cond = node._cond()
        got = self.table.size_oblivious(cond) if size_oblivious else self.table.maybe(cond)
        if got is None:
            if fallback_value is None:
                from ember.errors import DataDependent
                raise DataDependent(self.table._undecidable(cond))
            return fallback_value
        return got


def _e(s: Any):
    if isinstance(s, SymNode):
        return s.expr
    if isinstance(s, torch.SymInt):
        return s.node.expr
    return sympy.Integer(int(s))


def _hint(table, e) -> int:
    return int(table.hint(e))


def _contiguous(sizes: list, strides: list, order) -> bool:
    """Structural test: strides are the dense strides of ``sizes`` in ``order`` (innermost first); dims of
    size 1 are skipped. Symbols are sizes >= 2, so only constant 1s are size 1."""
    expected = sympy.Integer(1)
    for i in order:
        if sizes[i] == 1:
            continue
        if sympy.expand(strides[i] - expected) != 0:
            return False
        expected = expected * sizes[i]
    return True


def _binary(name: str, fn: Callable, result: Callable[[type, type], type], py: Callable) -> None:
    def method(self: SymNode, other: SymNode) -> SymNode:
        t = result(self.pytype, other.pytype)
        return SymNode(fn(self.expr, other.expr), t, self.table, py(self.hint, other.hint))
    method.__name__ = name
    setattr(SymNode, name, method)


def _same_num(a: type, b: type) -> type:
    return float if float in (a, b) else int


_NUM = [("add", operator.add, operator.add), ("sub", operator.sub, operator.sub),
        ("mul", operator.mul, operator.mul), ("mod", _mod, operator.mod),
        ("sym_max", lambda a, b: sympy.Max(a, b), max), ("sym_min", lambda a, b: sympy.Min(a, b), min)]
for _n, _f, _p in _NUM:
    _binary(_n, _f, _same_num, _p)
for _n in ("floordiv", "int_floordiv"):
    _binary(_n, _floordiv, _same_num, operator.floordiv)
for _n in ("truediv", "int_truediv", "float_truediv"):
    _binary(_n, _truediv, lambda a, b: float, operator.truediv)
_binary("pow_by_natural", lambda a, b: a ** b, _same_num, operator.pow)
_binary("float_pow", lambda a, b: a ** b, lambda a, b: float, operator.pow)
_binary("pow", lambda a, b: a ** b, _same_num, operator.pow)
_binary("lshift", lambda a, b: a * 2 ** b, _same_num, operator.lshift)
_binary("rshift", lambda a, b: sympy.floor(a / 2 ** b), _same_num, operator.rshift)
_REL = [("eq", sympy.Eq, operator.eq), ("ne", sympy.Ne, operator.ne), ("lt", sympy.Lt, operator.lt),
        ("le", sympy.Le, operator.le), ("gt", sympy.Gt, operator.gt), ("ge", sympy.Ge, operator.ge)]
for _n, _f, _p in _REL:
    _binary(_n, _f, lambda a, b: bool, _p)
_binary("and_", lambda a, b: sympy.And(a, b), lambda a, b: bool, lambda a, b: a and b)
_binary("or_", lambda a, b: sympy.Or(a, b), lambda a, b: bool, lambda a, b: a or b)
_binary("sym_and", lambda a, b: sympy.And(a, b), lambda a, b: bool, lambda a, b: a and b)
_binary("sym_or", lambda a, b: sympy.Or(a, b), lambda a, b: bool, lambda a, b: a or b)
_binary("bitwise_and", lambda a, b: sympy.And(a, b), lambda a, b: bool, lambda a, b: a & b)
_binary("bitwise_or", lambda a, b: sympy.Or(a, b), lambda a, b: bool, lambda a, b: a | b)


def symint(table: Any, expr: Any):
    """A size for PyTorch: ``int`` when ``expr`` is constant, else ``torch.SymInt`` over ``table``."""
    expr = table.simplify(sympy.sympify(expr))
    if not expr.free_symbols:
        return int(expr)
    return torch.SymInt(SymNode(expr, int, table))


def is_symbolic(x: Any) -> bool:
    return isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) and x.node.is_symbolic() \
        or isinstance(x, sympy.Basic) and bool(x.free_symbols)


def expr_of(x: Any):
    """A size as ember's IRs hold it: an ``int`` or a sympy expression."""
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        e = x.node.expr
        return int(e) if isinstance(e, sympy.Integer) else e
    return x


def hint_of(x: Any):
    """The value of a size at the hints (a plain ``int`` for ints)."""
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return x.node.hint
    return x


def size_symbols(*exprs: Any) -> list:
    """The size and int symbols (``s<k>``, ``i<k>``, unbacked ``u<k>``) in ``exprs``, sorted by name: a kernel's extra arguments
    (docs/dynamic-contract.md). Loop variables and other index symbols are left out."""
    out = set()
    for e in exprs:
        for s in getattr(e, "free_symbols", ()):
            if s.name[:1] in "siu" and s.name[1:].isdigit():
                out.add(s)
    return sorted(out, key=lambda s: s.name)
