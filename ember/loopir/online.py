"""Online softmax: one pass instead of two over rows too long to keep in registers.

A looped reduction kernel for softmax, log_softmax or cross-entropy reads each row once for its maximum ``M``
and again for ``S = sum(exp(g - M))``. Both can come from one pass that keeps, per lane, the running maximum
``m`` and the sum ``s`` of ``exp(g - m)``, rescaling ``s`` by ``exp(m_old - m_new)`` whenever ``m`` grows;
after the loop the lanes combine as ``S = sum(s * exp(m - M))``. ``online_softmax`` rewrites a ``KernelBody``
that way: the ``amax`` accumulation becomes an ``OnlineAccumulate`` that also folds ``g`` (its statements
copied into the first loop), the sum's result is read after the first loop (``reduced_online``), and the second
loop loses what only the sum needed (the whole loop, for log_softmax and cross-entropy).

Only code generators that know these two statements use it (Triton, for looped reductions).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .expr import bound_symbol
from .kernel import Accumulate, Assign, KernelBody, Section, _dead_code_removed, _uses


@dataclass
class OnlineAccumulate:
    acc_max: str
    acc_sum: str
    var_max: str        # folded into the running maximum
    var_sum: str        # folded as exp(var_sum - running maximum)
    dtype: torch.dtype


def online_softmax(body: KernelBody) -> KernelBody:
    """``body`` with every (max, sum of exp) pair of consecutive reduction loops fused into one loop."""
    secs = [Section(s.level, list(s.stmts), list(s.accumulators)) for s in body.sections]
    out = KernelBody(body.kernel, secs, dict(body.buffers), dict(body.dtypes), aliased=set(body.aliased),
                     memory=dict(body.memory), extents=dict(body.extents), scratch=dict(body.scratch))
    fresh = [0]
    while _fuse_one(out, fresh):
        pass
    out.sections = [s for s in out.sections if s.stmts or s.accumulators]
    return out


def _defs(sec: Section) -> dict[str, Assign]:
    return {st.var: st for st in sec.stmts if isinstance(st, Assign)}


def _fuse_one(body: KernelBody, fresh: list[int]) -> bool:
    secs = body.sections
    for i, r1 in enumerate(secs):
        if r1.level != "r":
            continue
        later = [k for k in range(i + 1, len(secs)) if secs[k].level == "r"]
        if not later:
            return False
        j = later[0]
        r2 = secs[j]
        between = secs[i + 1:j]          # x sections between the loops
        after2 = secs[j + 1:]
        for st in r1.stmts:
            if not (isinstance(st, Accumulate) and st.reduce_type == "amax" and st.dtype.is_floating_point):
                continue
            m = next((a.var for s in between for a in s.stmts if isinstance(a, Assign) and a.kind == "reduced"
                      and a.args[0] == st.acc), None)
            if m is None:
                continue
            hit = _sum_of_exp(body, r2, m, between, st.dtype)
            if hit is None:
                continue
            acc_s, g, closure = hit
            s_var = next((a for s in after2 for a in s.stmts if isinstance(a, Assign) and a.kind == "reduced"
                          and a.args[0] == acc_s), None)
            if s_var is None:
                continue
            # copy g's statements into the first loop under new names, reusing what the loop already computes
            # (the max's own load of the row: then both fold one value)
            existing = {(a.kind, a.args, a.dtype): a.var for a in r1.stmts if isinstance(a, Assign)}
            rename: dict[str, str] = {}
            copies = []
            for d in closure:
                same = _renamed(d, d.var, rename)
                if (same.kind, same.args, same.dtype) in existing:
                    rename[d.var] = existing[(same.kind, same.args, same.dtype)]
                    continue
                fresh[0] += 1
                v = f"otmp{fresh[0]}"
                rename[d.var] = v
                body.dtypes[v] = d.dtype
                copies.append(_renamed(d, v, rename))
            idx = r1.stmts.index(st)
            r1.stmts[idx:idx + 1] = copies + [OnlineAccumulate(st.acc, acc_s, st.var, rename.get(g, g), st.dtype)]
            r1.accumulators.append((acc_s, "sum", st.dtype))
            for s in after2:
                if s_var in s.stmts:
                    s.stmts.remove(s_var)
            m_sec = next(s for s in between if any(isinstance(a, Assign) and a.var == m for a in s.stmts))
            pos = next(k for k, a in enumerate(m_sec.stmts) if isinstance(a, Assign) and a.var == m)
            m_sec.stmts.insert(pos + 1, Assign(s_var.var, "reduced_online", (st.acc, acc_s), s_var.dtype, "x"))
            r2.stmts = [x for x in r2.stmts if not (isinstance(x, Accumulate) and x.acc == acc_s)]
            r2.accumulators = [a for a in r2.accumulators if a[0] != acc_s]
            r2.stmts = _dead_code_removed(r2.stmts)
            return True
    return False


def _sum_of_exp(body: KernelBody, r2: Section, m: str, between: list[Section], dt: torch.dtype):
    """In loop ``r2``: a float sum of ``exp(g - m)`` whose ``g`` does not depend on anything computed after the
    first loop: (sum accumulator, g, g's statements in order), or None."""
    defs = _defs(r2)
    late = {a.var for s in between for a in s.stmts if isinstance(a, Assign)}     # computed after loop 1
    for st in r2.stmts:
        if not (isinstance(st, Accumulate) and st.reduce_type == "sum" and st.dtype == dt):
            continue
        e = defs.get(st.var)
        if e is None or e.kind != "op" or e.args[0] != "exp" or e.dtype != dt:
            continue
        d = defs.get(e.args[1])
        if d is None or d.kind != "op" or d.args[0] != "sub" or d.args[2] != m or d.dtype != dt:
            continue
        g = d.args[1]
        closure = _closure(g, defs)
        if closure is None or any(v in late for c in closure for v in _uses(c)) or g in late:
            continue
        if g not in defs and body.dtypes.get(g) != dt:
            continue
        return st.acc, g, closure
    return None


def _closure(var: str, defs: dict[str, Assign]) -> list[Assign] | None:
    """The statements of a loop computing ``var`` (in order), or None when one is not a plain computation."""
    need: list[str] = [var]
    seen: set[str] = set()
    while need:
        v = need.pop()
        if v in seen or v not in defs:
            continue
        seen.add(v)
        st = defs[v]
        if st.kind not in ("load", "op", "cast", "const", "index"):
            return None
        need.extend(_uses(st))
    return [st for st in defs.values() if st.var in seen]


def _renamed(st: Assign, var: str, rename: dict[str, str]) -> Assign:
    if st.kind == "op":
        args = (st.args[0], *(rename.get(a, a) for a in st.args[1:]))
    elif st.kind == "cast":
        args = tuple(rename.get(a, a) for a in st.args)
    elif st.kind == "load":
        subs = {bound_symbol(k): bound_symbol(v) for k, v in rename.items()}
        buf, idx, mask = st.args
        args = (buf, idx.xreplace(subs) if hasattr(idx, "xreplace") else idx,
                mask.xreplace(subs) if hasattr(mask, "xreplace") else mask)
    else:
        args = st.args
    return replace(st, var=var, args=args)


__all__ = ["online_softmax", "OnlineAccumulate"]
