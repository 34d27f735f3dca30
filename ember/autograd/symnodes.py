"""Symbolic sizes as FX nodes: every ``torch.SymInt`` an ATen op takes is computed by the graph itself.

A symbol is read from a placeholder: ``aten.sym_size.int(x, d)`` of the first tensor placeholder whose size
``d`` is that symbol, or an int placeholder whose value is the symbol. An expression becomes ``operator``
arithmetic on those (``add``, ``sub``, ``mul``, ``floordiv``, ``mod``, ``neg``), one node per expression
(memoized), each with ``meta["val"]`` the ``torch.SymInt``. So the graph runs eagerly for any sizes.
"""
from __future__ import annotations

import operator
from typing import Any

import sympy
import torch
import torch.fx as fx

from ember.shapes import SymbolicUnsupported, expr_of, is_symbolic


class SymNodes:
    """The FX nodes computing symbolic sizes in one graph (see the module docstring)."""

    def __init__(self, graph: fx.Graph) -> None:
        self.graph = graph
        self.sources: dict[sympy.Symbol, tuple[fx.Node, int | None]] = {}
        self.memo: dict[Any, Any] = {}
        self.table: Any = None

    def add_source(self, node: fx.Node, value: Any) -> None:
        """Record the symbols ``node`` (a placeholder) carries: its sizes, or itself for a symbolic int."""
        if isinstance(value, torch.SymInt) and is_symbolic(value):
            self.table = value.node.table
            e = expr_of(value)
            if isinstance(e, sympy.Symbol):
                self.sources.setdefault(e, (node, None))
            return
        if not isinstance(value, torch.Tensor):
            return
        for d, size in enumerate(value.shape):
            if is_symbolic(size):
                self.table = size.node.table
                e = expr_of(size)
                if isinstance(e, sympy.Symbol):
                    self.sources.setdefault(e, (node, d))

    def node_of(self, x: torch.SymInt | torch.SymFloat) -> Any:
        self.table = x.node.table
        if isinstance(x, torch.SymFloat):
            return self.build_float(sympy.sympify(expr_of(x)), x)
        return self.build(self.table.simplify(expr_of(x)))

    def build_float(self, e: Any, val: Any = None) -> Any:
        """The node (or float) computing the float expression ``e`` of the sizes (a scalar an op takes, such
        as ``std``'s ``1/(n-1)``): Python float arithmetic on the size nodes, ``truediv`` for negative powers."""
        if e.is_Number:
            return float(e)
        if not e.free_symbols or (e.is_integer and not e.has(sympy.Float)):
            return self.build(e)
        key = ("float", e)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        if isinstance(e, sympy.Add):
            terms = [self.build_float(t) for t in e.args]
            fn = operator.add
        elif isinstance(e, sympy.Mul):
            num, den = e.as_numer_denom()
            terms = [self.build_float(num), self.build_float(den)] if den != 1 else \
                [self.build_float(t) for t in e.args]
            fn = operator.truediv if den != 1 else operator.mul
        elif isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) < 0:
            terms = [1.0, self.build_float(e.base ** -e.exp)]
            fn = operator.truediv
        elif isinstance(e, sympy.Pow) and e.exp.is_Integer:
            terms = [self.build_float(e.base), int(e.exp)]
            fn = operator.pow
        elif isinstance(e, sympy.Pow) and e.exp == sympy.Rational(1, 2):      # math.sqrt(n)
            terms, fn = [self.build_float(e.base)], torch._sym_sqrt
        elif isinstance(e, sympy.Pow) and e.exp.is_Number:                  # n ** -0.5, as Python computes it
            terms = [self.build_float(e.base), float(e.exp)]
            fn = operator.pow
        else:
            raise SymbolicUnsupported(f"ember AOT: no FX form for the symbolic float {e}")
        out = terms[0] if len(terms) > 1 else self._call(fn, terms[0])
        for t in terms[1:]:
            out = self._call(fn, out, t)
        if isinstance(out, fx.Node) and val is not None:
            out.meta["val"] = val
        self.memo[key] = out
        return out

    def build(self, e: Any) -> Any:
        """The node (or int) computing sympy expression ``e``."""
        if isinstance(e, int) or getattr(e, "is_Integer", False):
            return int(e)
        hit = self.memo.get(e)
        if hit is not None:
            return hit
        node = self._build(e)
        if isinstance(node, fx.Node) and "val" not in node.meta:
            node.meta["val"] = self.table.symint(e)
        self.memo[e] = node
        return node

    def _call(self, fn: Any, *args: Any) -> fx.Node:
        """One arithmetic node; its ``meta["val"]`` is ``fn`` of its arguments' values, so that a partial sum or
        product (``s1 + s0*s1`` of ``s1 + s0*s1 - 12``) is a size to every later stage too (the lowering reads
        a size op's expression from it; without it the node was an extern call on a sympy value)."""
        node = self.graph.call_function(fn, args)
        vals = [a.meta.get("val") if isinstance(a, fx.Node) else a for a in args]
        if fn is not torch.ops.aten.sym_size.int and all(v is not None for v in vals):
            try:
                node.meta["val"] = fn(*vals)
            except Exception:   # noqa: BLE001 - a value we cannot compute here: build() sets the whole one
                pass
        return node

    def _build(self, e: Any) -> Any:
        if isinstance(e, sympy.Symbol):
            return self._symbol(e)
        if isinstance(e, sympy.Add):
            return self._sum(e)
        if isinstance(e, sympy.Mul):
            return self._product(e)
        if isinstance(e, sympy.floor) or isinstance(e, sympy.ceiling):
            num, den = e.args[0].as_numer_denom()
            if isinstance(e, sympy.ceiling):
                num = num + den - 1
            return self._call(operator.floordiv, self.build(sympy.expand(num)), self.build(den))
        if isinstance(e, sympy.Mod):
            return self._call(operator.mod, self.build(e.args[0]), self.build(e.args[1]))
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0:
            return self._call(operator.pow, self.build(e.base), int(e.exp))
        if isinstance(e, (sympy.Max, sympy.Min)):
            fn = torch.sym_max if isinstance(e, sympy.Max) else torch.sym_min     # (the prim verifier knows sym_*)
            out = self.build(e.args[0])
            for a in e.args[1:]:
                out = self._call(fn, out, self.build(a))
            return out
        raise SymbolicUnsupported(f"ember AOT: no FX form for the symbolic size {e}")

    def _symbol(self, s: sympy.Symbol) -> Any:
        src = self.sources.get(s)
        if src is None:
            raise SymbolicUnsupported(f"ember AOT: symbol {s} is not a size of any graph input")
        node, d = src
        return node if d is None else self._call(torch.ops.aten.sym_size.int, node, d)

    def _sum(self, e: sympy.Add) -> Any:
        pos = [t for t in e.args if not t.could_extract_minus_sign()]
        neg = [-t for t in e.args if t.could_extract_minus_sign()]
        out = self.build(pos[0]) if pos else 0
        for t in pos[1:]:
            out = self._call(operator.add, out, self.build(t))
        for t in neg:
            out = self._call(operator.sub, out, self.build(t))
        return out

    def _product(self, e: sympy.Mul) -> Any:
        coeff, rest = e.as_coeff_Mul()
        if not coeff.is_Integer:
            raise SymbolicUnsupported(f"ember AOT: the symbolic size {e} is not an integer expression")
        if coeff == -1:
            return self._call(operator.neg, self.build(rest))
        factors = ([int(coeff)] if coeff != 1 else []) + list(sympy.Mul.make_args(rest))
        out = self.build(factors[0]) if not isinstance(factors[0], int) else factors[0]
        for f in factors[1:]:
            out = self._call(operator.mul, out, self.build(f))
        return out
