"""Reference interpreter of the loop IR: runs a ``LoopGraph`` on real tensors with torch ops.

Each buffer is a flat storage tensor; a ``Pointwise`` or ``Reduction`` node is evaluated on the whole index
grid at once (index expressions evaluated as integer tensors), so the interpreter is slow but exact about what
the IR says. Tests compare it with eager PyTorch to narrow a failure to the lowering stage.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy
import torch
from torch.utils._pytree import tree_map

from .expr import Bind, Const, Expr, IndexValue, Load, Op, rvars, xvars
from .ir import BufferRef, Extern, ExternOutput, InputBuffer, Layout, LoopGraph, Pointwise, Reduction, Scatter


def _div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


OPS: dict[str, Callable[..., torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": _div,
    "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"), "remainder": torch.remainder,
    "fmod": torch.fmod, "pow": torch.pow, "maximum": torch.maximum, "minimum": torch.minimum,
    "atan2": torch.atan2, "hypot": torch.hypot, "copysign": torch.copysign, "nextafter": torch.nextafter,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "shift_left": torch.bitwise_left_shift, "shift_right": torch.bitwise_right_shift,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
    "logical_not": torch.logical_not, "isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite,
    "signbit": torch.signbit, "where": torch.where, "bitwise_not": torch.bitwise_not,
}
for _n in ("neg abs exp exp2 log log2 log10 log1p expm1 sqrt rsqrt sin cos tan asin acos atan sinh cosh tanh "
           "asinh acosh atanh sigmoid erf erfc erfinv lgamma digamma floor ceil round trunc sign "
           "reciprocal").split():
    OPS[_n] = getattr(torch, _n)

REDUCE: dict[str, Callable[[torch.Tensor, tuple], torch.Tensor]] = {
    "sum": lambda v, d: v.sum(d, dtype=v.dtype),
    "prod": lambda v, d: v.flatten(len(v.shape) - len(d)).prod(-1, dtype=v.dtype),
    "amax": lambda v, d: v.amax(d), "amin": lambda v, d: v.amin(d),
    "any": lambda v, d: v.flatten(len(v.shape) - len(d)).any(-1),
    "all": lambda v, d: v.flatten(len(v.shape) - len(d)).all(-1),
    "welford": lambda v, d: ((v - v.mean(d, keepdim=True)) ** 2).sum(d),     # M2: squared deviations' sum
}


def eval_index(e: Any, env: dict) -> Any:
    """Evaluate a sympy integer/boolean expression with symbols bound to integer tensors."""
    if isinstance(e, (int, bool)):
        return e
    if e is sympy.true:
        return True
    if e is sympy.false:
        return False
    if isinstance(e, sympy.Symbol):
        return env[e]
    if isinstance(e, sympy.Integer):
        return int(e)
    if isinstance(e, sympy.Add):
        out: Any = 0
        for a in e.args:
            out = out + eval_index(a, env)
        return out
    if isinstance(e, sympy.Mul):
        out = 1
        for a in e.args:
            out = out * eval_index(a, env)
        return out
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        return torch.div(torch.as_tensor(eval_index(num, env)), eval_index(den, env), rounding_mode="floor")
    if isinstance(e, sympy.Mod):
        return torch.remainder(torch.as_tensor(eval_index(e.args[0], env)), eval_index(e.args[1], env))
    rel = {sympy.Lt: torch.lt, sympy.Le: torch.le, sympy.Gt: torch.gt, sympy.Ge: torch.ge,
           sympy.Eq: torch.eq, sympy.Ne: torch.ne}
    for cls, fn in rel.items():
        if isinstance(e, cls):
            return fn(torch.as_tensor(eval_index(e.args[0], env)), torch.as_tensor(eval_index(e.args[1], env)))
    if isinstance(e, sympy.And):
        out = True
        for a in e.args:
            out = torch.logical_and(torch.as_tensor(out), torch.as_tensor(eval_index(a, env)))
        return out
    if isinstance(e, sympy.Or):
        out = False
        for a in e.args:
            out = torch.logical_or(torch.as_tensor(out), torch.as_tensor(eval_index(a, env)))
        return out
    if isinstance(e, sympy.Not):
        return torch.logical_not(torch.as_tensor(eval_index(e.args[0], env)))
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:     # s0**2 (sizes bound to ints)
        base = eval_index(e.base, env)
        out = base
        for _ in range(int(e.exp) - 1):
            out = out * base
        return out
    if isinstance(e, (sympy.Max, sympy.Min)):      # of sizes (symbols bound to ints)
        fn = torch.maximum if isinstance(e, sympy.Max) else torch.minimum
        out = torch.as_tensor(eval_index(e.args[0], env))
        for a in e.args[1:]:
            out = fn(out, torch.as_tensor(eval_index(a, env)))
        return out
    raise NotImplementedError(f"ember.loopir interp: index expression {e!r}")


class Interpreter:
    def __init__(self, graph: LoopGraph) -> None:
        self.graph = graph
        self.storage: dict[str, torch.Tensor] = {}
        self.layouts: dict[str, Layout] = {n.name: n.layout for n in graph.nodes}

    def view(self, ref: BufferRef) -> torch.Tensor:
        return torch.as_strided(self.storage[ref.name], ref.layout.shape, ref.layout.stride, ref.layout.offset)

    def expr(self, e: Expr, env: dict, shape: tuple, device: torch.device) -> torch.Tensor:
        if isinstance(e, Load):
            idx = torch.as_tensor(eval_index(e.index, env), device=device).expand(shape)
            st = self.storage[e.buf]
            if e.mask is None:
                return st[idx]
            m = torch.as_tensor(eval_index(e.mask, env), device=device).expand(shape)
            return torch.where(m, st[torch.where(m, idx, 0)], torch.zeros((), dtype=st.dtype, device=device))
        if isinstance(e, Const):
            return torch.full(shape, e.value, dtype=e.dtype, device=device)
        if isinstance(e, IndexValue):
            return torch.as_tensor(eval_index(e.index, env), device=device).expand(shape).to(e.dtype)
        if isinstance(e, Bind):
            v = self.expr(e.value, env, shape, device).long()
            return self.expr(e.body, {**env, e.symbol: v}, shape, device)
        if e.name == "to_dtype":
            return self.expr(e.args[0], env, shape, device).to(e.dtype)
        args = [self.expr(a, env, shape, device) for a in e.args]
        return OPS[e.name](*args).to(e.dtype)

    def grid(self, sizes: Sequence[Any], syms: Sequence[sympy.Symbol], device: torch.device) -> dict:
        n = len(sizes)
        env = {}
        for i, (s, sym) in enumerate(zip(sizes, syms)):
            shape = [1] * n
            shape[i] = int(s)
            env[sym] = torch.arange(int(s), device=device).view(shape)
        return env

    def store(self, name: str, value: torch.Tensor) -> None:
        lay = self.layouts[name]
        st = torch.empty(max(int(lay.storage_size()), 1), dtype=lay.dtype, device=lay.device)
        torch.as_strided(st, lay.shape, lay.stride, lay.offset).copy_(value.reshape(lay.shape))
        self.storage[name] = st

    def scatter(self, node: Scatter) -> None:
        """Points in order (a later point's store wins, as in eager's CPU kernels); adds accumulate."""
        shape = tuple(int(s) for s in node.ranges)
        env = self.grid(node.ranges, xvars(len(node.ranges)), node.device)
        for sym, value, _ in node.binds:
            env[sym] = self.expr(value, env, shape, node.device).long()
        idx = torch.as_tensor(eval_index(node.index, env), device=node.device).expand(shape).reshape(-1)
        val = self.expr(node.body, env, shape, node.device).reshape(-1)
        if node.mask is not None:
            m = torch.as_tensor(eval_index(node.mask, env), device=node.device).expand(shape).reshape(-1)
            idx, val = idx[m], val[m]
        st = self.storage[node.target]
        st.index_put_((idx,), val.to(st.dtype), accumulate=node.accumulate)
        self.storage[node.name] = st

    def run(self, *inputs: torch.Tensor) -> list[Any]:
        g = self.graph
        for node in g.nodes:
            if isinstance(node, InputBuffer):
                t = inputs[node.position] if node.position >= 0 else g.constants[node.name]
                self.store(node.name, t)
            elif isinstance(node, Pointwise):
                env = self.grid(node.ranges, xvars(len(node.ranges)), node.device)
                self.store(node.name, self.expr(node.body, env, tuple(int(s) for s in node.ranges),
                                                node.device))
            elif isinstance(node, Reduction):
                sizes = tuple(node.ranges) + tuple(node.reduction_ranges)
                syms = xvars(len(node.ranges)) + rvars(len(node.reduction_ranges))
                env = self.grid(sizes, syms, node.device)
                v = self.expr(node.body, env, tuple(int(s) for s in sizes), node.device)
                dims = tuple(range(len(node.ranges), len(sizes)))
                self.store(node.name, REDUCE[node.reduce_type](v, dims).to(node.dtype))
            elif isinstance(node, Scatter):
                self.scatter(node)
            elif isinstance(node, Extern):
                args, kwargs = tree_map(lambda a: self.view(a) if isinstance(a, BufferRef) else a,
                                        (node.args, node.kwargs))
                out = node.target(*args, **kwargs)
                if node.multi:
                    self.storage[node.name] = out  # type: ignore[assignment]
                else:
                    self.store(node.name, out)
            elif isinstance(node, ExternOutput):
                self.store(node.name, self.storage[node.source][node.index])  # type: ignore[index]
        return [self.view(o) if isinstance(o, BufferRef) else o for o in g.outputs]


def run_loop_graph(graph: LoopGraph, *inputs: torch.Tensor) -> list[Any]:
    return Interpreter(graph).run(*inputs)
