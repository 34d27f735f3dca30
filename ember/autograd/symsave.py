"""Size symbols the backward graph needs but cannot read from its own inputs, saved by the forward as ints.

After decomposition to prims, symbolic sizes sit in op arguments as sympy expressions (``pad(g, [(0, s0 -
floor(s0/2))])``), invisible to the partitioner's data flow. The backward binds each symbol from its inputs
(a tensor dim that is the symbol, or a linear expression of it, or an int input); a symbol it cannot bind is
read in the forward (``aten.sym_size.int`` of the forward input that has it as a dim, or the int input that
is it) and passed as one more saved value.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from ember.shapes import expr_of, size_symbols


def _exprs(x: Any) -> list:
    out = []
    for a in tree_flatten(x)[0]:
        if isinstance(a, torch.Tensor):
            out += [expr_of(v) for v in (*a.shape, *a.stride())]
        elif isinstance(a, (torch.SymInt, sympy.Basic)):
            out.append(expr_of(a))
    return [e for e in out if isinstance(e, sympy.Basic)]


def _needed(bwd: fx.GraphModule) -> list:
    exprs: list = []
    for n in bwd.graph.nodes:
        if n.op != "placeholder":
            exprs += _exprs((n.args, n.kwargs, n.meta.get("val")))
    return size_symbols(*exprs)


def _bindable(bwd: fx.GraphModule) -> set:
    """Symbols a backward placeholder carries: a dim that is the symbol or ``a*s + b``, or an int input."""
    out = set()
    for ph in (n for n in bwd.graph.nodes if n.op == "placeholder"):
        val = ph.meta.get("val")
        dims = [expr_of(v) for v in val.shape] if isinstance(val, torch.Tensor) else [expr_of(val)]
        for e in dims:
            if isinstance(e, sympy.Expr) and len(e.free_symbols) == 1 and e.is_polynomial(*e.free_symbols) \
                    and sympy.Poly(e, *e.free_symbols).degree() == 1:
                out |= e.free_symbols
    return out


def _source(fwd: fx.GraphModule, sym: sympy.Symbol) -> tuple | None:
    for ph in (n for n in fwd.graph.nodes if n.op == "placeholder"):
        val = ph.meta.get("val")
        if isinstance(val, torch.Tensor):
            for d, v in enumerate(val.shape):
                if expr_of(v) == sym:
                    return ph, d, v
        elif expr_of(val) == sym:
            return ph, None, val
    if sym.name[:1] == "u":      # an unbacked size: read from the data-dependent op's result in the forward
        for n in fwd.graph.nodes:
            val = n.meta.get("val")
            if n.op == "call_function" and isinstance(val, torch.Tensor):
                for d, v in enumerate(val.shape):
                    if expr_of(v) == sym:
                        return n, d, v
            elif n.op == "call_function" and isinstance(val, torch.SymInt) and expr_of(val) == sym:
                return n, None, val         # an item(): the int itself
    return None


def _produced(bwd: fx.GraphModule, table: Any) -> set:
    """Data-dependent sizes the backward computes itself (``grad[mask]`` in index_put's backward makes a new
    unbacked symbol): its own op's result carries them at run time, nothing to save."""
    from ember.autograd.unbacked import _unbacked_of, introduces_unbacked
    out: set = set()
    if table is None or not table.unbacked:
        return out
    for n in bwd.graph.nodes:
        if n.op == "call_function" and introduces_unbacked(n, table):
            out |= _unbacked_of(n.meta.get("val"), table)
    return out


def save_symbols(fwd: fx.GraphModule, bwd: fx.GraphModule, num_saved: int, table: Any) -> int:
    """Pass the symbols ``bwd`` needs and cannot bind as extra saved ints; returns the new number saved."""
    own = _produced(bwd, table)
    missing = [s for s in _needed(bwd) if s not in _bindable(bwd) and s not in table.replacements]
    if not missing:
        return num_saved
    out = next(n for n in fwd.graph.nodes if n.op == "output")
    saved_phs = [n for n in bwd.graph.nodes if n.op == "placeholder"][:num_saved]
    anchor = saved_phs[-1] if saved_phs else None
    extra = []
    for sym in missing:
        src = _source(fwd, sym)
        if src is None and sym in own:
            continue
        if src is None:
            from ember.shapes import SymbolicUnsupported
            raise SymbolicUnsupported(f"the backward needs the size {sym}, which no forward input carries")
        ph, d, val = src
        with fwd.graph.inserting_before(out):
            node = ph if d is None else fwd.graph.call_function(torch.ops.aten.sym_size.int, (ph, d))
        node.meta["val"] = val
        extra.append(node)
        first = next(n for n in bwd.graph.nodes if n.op == "placeholder") if anchor is None else None
        with (bwd.graph.inserting_after(anchor) if anchor is not None else bwd.graph.inserting_before(first)):
            new = bwd.graph.placeholder(f"saved_{sym.name}")
        new.meta["val"] = val
        anchor = new
    outs = list(out.args[0])
    out.args = (tuple(outs + extra),)
    fwd.recompile()
    bwd.recompile()
    return num_saved + len(extra)
