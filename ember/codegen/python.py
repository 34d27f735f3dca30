"""The Python kernel backend: runs a ``KernelBody`` with torch ops over all points at once.

Every ``xindex`` (and ``rindex``) is evaluated in one vectorized step: x-level values have shape ``[X, 1]``,
r-level values ``[X, R]``. It is the executable reference for the scheduler and kernel builder (and the
fallback for devices without a code generator); it is not fast.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ember.loopir.indexing import RINDEX, XINDEX
from ember.loopir.interp import OPS, eval_index
from ember.loopir.expr import bound_symbol
from ember.loopir.kernel import Accumulate, Assign, KernelBody, Store

COMBINE: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {
    "sum": lambda v, d: v.sum(d, keepdim=True, dtype=v.dtype), "prod": lambda v, d: v.prod(d, keepdim=True),
    "amax": lambda v, d: v.amax(d, keepdim=True), "amin": lambda v, d: v.amin(d, keepdim=True),
    "any": lambda v, d: v.any(d, keepdim=True), "all": lambda v, d: v.all(d, keepdim=True),
    "welford": lambda v, d: ((v - v.mean(d, keepdim=True)) ** 2).sum(d, keepdim=True),
}


def compile_kernel(body: KernelBody, options: Any = None) -> Callable[..., None]:
    """``run(*buffers, *symbol_values)``: size symbols (``body.symbols``) follow the buffers."""
    names = list(body.buffers)
    k = body.kernel
    symbols = body.symbols

    def run(*args: Any) -> None:
        bufs, sizes = args[:len(names)], dict(zip(symbols, args[len(names):]))
        flat = {n: torch.as_strided(b, (b.untyped_storage().nbytes() // b.element_size() - b.storage_offset(),),
                                    (1,)) for n, b in zip(names, bufs)}
        X, R = int(eval_index(k.xnumel, sizes)), int(eval_index(k.rnumel, sizes))
        dev = bufs[0].device
        env = {XINDEX: torch.arange(X, device=dev).view(X, 1), RINDEX: torch.arange(R, device=dev).view(1, R),
               **sizes}
        vals: dict[str, torch.Tensor] = {}

        def shape(level: str) -> tuple:
            return (X, 1) if level == "x" else (X, R)
        for sec in body.sections:
            accs: dict[str, tuple[str, torch.Tensor]] = {}
            for acc, rt, dt in sec.accumulators:
                accs[acc] = (rt, torch.empty(0))
            for st in sec.stmts:
                if isinstance(st, Assign):
                    vals[st.var] = _assign(st, vals, env, flat, shape(st.level), dev)
                    if not st.dtype.is_floating_point and st.dtype is not torch.bool:
                        env[bound_symbol(st.var)] = vals[st.var]   # may be used as an index
                elif isinstance(st, Accumulate):
                    vals[st.acc] = COMBINE[st.reduce_type](vals[st.var].expand(X, R), 1).to(st.dtype)
                elif isinstance(st, Store):
                    idx = torch.as_tensor(eval_index(st.index, env), device=dev).expand(shape(st.level)).reshape(-1)
                    val = vals[st.var].expand(shape(st.level)).reshape(-1).to(flat[st.buf].dtype)
                    if st.mask is not None:
                        m = torch.as_tensor(eval_index(st.mask, env), device=dev).expand(shape(st.level)).reshape(-1)
                        idx, val = idx[m], val[m]
                    if st.mode == "add":
                        flat[st.buf].index_put_((idx,), val, accumulate=True)
                    else:
                        flat[st.buf][idx] = val
    return run


def _assign(st: Assign, vals: dict, env: dict, flat: dict, shape: tuple, dev: torch.device) -> torch.Tensor:
    if st.kind == "load":
        buf, index, mask = st.args
        idx = torch.as_tensor(eval_index(index, env), device=dev).expand(shape)
        src = flat[buf]
        if mask is None:
            return src[idx]
        m = torch.as_tensor(eval_index(mask, env), device=dev).expand(shape)
        return torch.where(m, src[torch.where(m, idx, 0)], torch.zeros((), dtype=src.dtype, device=dev))
    if st.kind == "const":
        return torch.full((1, 1), st.args[0], dtype=st.dtype, device=dev)
    if st.kind == "index":
        return torch.as_tensor(eval_index(st.args[0], env), device=dev).expand(shape).to(st.dtype)
    if st.kind == "cast":
        return vals[st.args[0]].to(st.dtype)
    if st.kind == "reduced":
        return vals[st.args[0]]
    name, *args = st.args
    return OPS[name](*(vals[a] for a in args)).to(st.dtype)


def source(body: KernelBody) -> str:
    return f"# python kernel {body.name}\n{body.python()}"
