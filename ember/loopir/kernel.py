"""Kernel bodies: a scheduled ``Kernel`` as straight-line statements that code generators print.

A kernel runs, for each outer point ``xindex`` (and in reductions for each reduced point ``rindex``):
``sections[0]`` (x level, once per outer point), then per reduction loop an ``r`` section (once per reduced
point) followed by an ``x`` section (after the loop: reduction results and what depends on them). Pointwise
kernels have a single ``x`` section. Statements:
- ``Assign(var, kind, args, dtype)``: kind ``load`` (buf, index, mask), ``const`` (value), ``index`` (sympy
  expression), ``op`` (name, *vars), ``cast`` (var), ``reduced`` (accumulator var, reduce type: the final
  value of a reduction).
- ``Accumulate(acc, reduce_type, var, dtype)``: fold ``var`` into accumulator ``acc`` (declared by the code
  generator before the loop of its ``r`` section).
- ``Store(buf, index, var)``; a scatter's store has ``mode`` "add" (``buf[index] += var``, atomically where
  points run in parallel) or a ``mask`` (a sympy boolean: store only where it holds), and its index depends
  on loaded values.
Values are common-subexpression eliminated; values that depend only on ``xindex`` are computed in the x section
before the loop that needs them. Indices are sympy expressions over ``xindex``/``rindex``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from .expr import Bind, Const, Expr, IndexValue, Load, Op, bound_symbol, loads, substitute, walk
from .indexing import RINDEX, place
from .ir import Pointwise, Reduction, Scatter
from .schedule import Kernel, kernel_placement, store_index


@dataclass
class Assign:
    var: str
    kind: str
    args: tuple
    dtype: torch.dtype
    level: str          # "x" or "r"


@dataclass
class Accumulate:
    acc: str
    reduce_type: str
    var: str
    dtype: torch.dtype


@dataclass
class Store:
    buf: str
    index: sympy.Expr
    var: str
    level: str
    mode: str = "store"         # "store" | "add"
    mask: Any = None            # sympy boolean (scatters: the index lies in its dimension)
    scatter: bool = False       # the index depends on loaded values: two points may hit one address


@dataclass
class Section:
    level: str                   # "x" or "r"
    stmts: list = field(default_factory=list)
    accumulators: list = field(default_factory=list)   # (acc, reduce_type, dtype) declared before the loop


@dataclass
class KernelBody:
    kernel: Kernel
    sections: list[Section]
    buffers: dict[str, tuple[torch.dtype, str]]   # buffer -> (dtype, "in" | "out")
    dtypes: dict[str, torch.dtype]                # var -> dtype
    aliased: set[str] = field(default_factory=set)  # buffers sharing memory with another (stored in place)
    memory: dict[str, str] = field(default_factory=dict)    # each of ``aliased`` -> the buffer whose memory it is
    extents: dict[str, int] = field(default_factory=dict)   # var bound as an index -> its dimension's size
    scratch: dict[str, torch.dtype] = field(default_factory=dict)  # per-row scratch rows (stash_recomputed)
    shared: list[str] = field(default_factory=list)  # stored through another buffer's parameter (share_pointers)
    table: Any = None       # the graph's ember.shapes.SymbolTable when sizes are symbolic (hints for decisions)

    def buffer_dtype(self, buf: str) -> torch.dtype:
        return self.scratch[buf] if buf in self.scratch else self.buffers[buf][0]

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def symbols(self) -> list:
        """The size symbols the kernel reads (its ranges, indices, masks, index extents), sorted by name: extra
        integer arguments after the buffers (docs/dynamic-contract.md). Empty without a symbol table (``table``,
        set by ``compile_graph`` for a graph with symbolic sizes): static kernels pay nothing for it."""
        if self.table is None:
            return []
        from ember.shapes import size_symbols
        exprs = [self.kernel.xnumel, self.kernel.rnumel, *self.extents.values()]
        for sec in self.sections:
            for st in sec.stmts:
                if isinstance(st, Store):
                    exprs += [st.index, st.mask]
                elif isinstance(st, Assign) and st.kind in ("load", "index"):
                    exprs += list(st.args)
        return size_symbols(*exprs)

    def loads(self) -> list[Assign]:
        """Every ``load`` statement, in order."""
        return [st for sec in self.sections for st in sec.stmts if isinstance(st, Assign) and st.kind == "load"]

    def python(self) -> str:
        out = []
        for s in self.sections:
            ind = "    " if s.level == "r" else ""
            if s.level == "r":
                for acc, rt, dt in s.accumulators:
                    out.append(f"{acc} = init_{rt}({dt})")
                out.append("for rindex in range(rnumel):")
            for st in s.stmts:
                out.append(ind + _fmt(st))
        return "\n".join(out)


def share_pointers(body: KernelBody) -> None:
    """One parameter for each memory the kernel reaches under several names of one dtype (``body.memory``: a
    value stored in place into the input it reads, an optimizer's ``m``): the wrapper binds those names to one
    tensor, so the kernel takes it once, under the name it meets first. Fewer parameters make launches cheaper
    and let more parts into a combo kernel. ``body.shared`` keeps the stored names now reached through another
    parameter: the wrapper still binds them."""
    kept: dict[tuple, str] = {}
    rename: dict[str, str] = {}
    for b, (dt, _) in body.buffers.items():
        if b in body.aliased and b not in body.scratch:
            first = kept.setdefault((body.memory[b], dt), b)
            if first != b:
                rename[b] = first
    if not rename:
        return
    for sec in body.sections:
        for i, st in enumerate(sec.stmts):
            if isinstance(st, Assign) and st.kind == "load" and st.args[0] in rename:
                sec.stmts[i] = Assign(st.var, st.kind, (rename[st.args[0]], *st.args[1:]), st.dtype, st.level)
            elif isinstance(st, Store) and st.buf in rename:
                sec.stmts[i] = dataclasses.replace(st, buf=rename[st.buf])
    body.shared += [b for b in rename if body.buffers[b][1] == "out"]
    for b in rename:
        del body.buffers[b]


def _fmt(st: Any) -> str:
    if isinstance(st, Assign):
        return f"{st.var} = {st.kind}{st.args}"
    if isinstance(st, Accumulate):
        return f"{st.acc} = {st.reduce_type}({st.acc}, {st.var})"
    add = ", add" if st.mode == "add" else ""
    where = f" if {st.mask}" if st.mask is not None else ""
    return f"store({st.buf}, {st.index}, {st.var}{add}){where}"


def node_times(kernel: Kernel) -> dict[str, tuple[str, int]]:
    """Which loop computes each node: node -> ("r", loop) for per-reduced-point nodes, ("x", after_loop) for
    per-outer-point ones (``after_loop`` -1: before the first loop)."""
    by_name = {n.name: n for n in kernel.nodes}
    t: dict[str, tuple[str, int]] = {}
    for n in kernel.nodes:
        loop, after = 0, -1
        for dep in n.reads() & set(by_name):
            kind, v = t[dep]
            if kind == "r" and not isinstance(by_name[dep], Reduction):
                loop = max(loop, v)
            else:
                loop, after = max(loop, v + 1), max(after, v)
        if isinstance(n, Reduction):
            t[n.name] = ("r", loop)
        elif kernel.is_reduction and any(RINDEX in g[0].free_symbols for g in kernel_placement(kernel, n)):
            t[n.name] = ("r", loop)
        else:
            t[n.name] = ("x", after)
    return t


def phase(time: tuple[str, int]) -> int:
    """The position in a kernel body of the section that computes a node of ``node_times`` time ``time``:
    the x section before the loops, loop 0, the x section after it, loop 1, ..."""
    kind, v = time
    return 2 * v + 1 if kind == "r" else 2 * v + 2


class _Builder:
    def __init__(self, kernel: Kernel, persistent: bool) -> None:
        self.k = kernel
        self.persistent = persistent
        self.by_name = {n.name: n for n in kernel.nodes}
        self.groups = {n.name: kernel_placement(kernel, n) for n in kernel.nodes}
        self.sections: list[Section] = [Section("x")]
        self.xcache: dict = {}
        self.rcache: dict = {}
        self.levels: dict[str, str] = {}
        self.dtypes: dict[str, torch.dtype] = {}
        self.final: dict[str, str] = {}       # reduction node -> var holding its result
        self.extents: dict[str, int] = {}     # var bound as an index -> the indexed dimension's size
        self.n = 0
        self.buffers: dict[str, tuple[torch.dtype, str]] = {}
        # (expression, id of its groups) -> its variable. The lowering builds a body by calling its
        # operands' loaders once per read, so ``x = x + x * n`` ten times over is one value of ~20 distinct
        # nodes made of 2**10 objects; ``xcache``/``rcache`` dedupe the statements, this the walk, which
        # visited every object and placed its indices each time (fuzz seed 435416 compiled for hours).
        # Expressions cache their hash. Entries at the "r" level go with ``rcache``.
        self.emitted: dict[tuple[Expr, int], str] = {}

    def times(self) -> dict[str, tuple[str, int]]:
        return node_times(self.k)

    # -- emission ------------------------------------------------------------------------------------------
    def var(self, dtype: torch.dtype, level: str) -> str:
        self.n += 1
        name = f"tmp{self.n - 1}"
        self.dtypes[name], self.levels[name] = dtype, level
        return name

    def assign(self, kind: str, args: tuple, dtype: torch.dtype, level: str) -> str:
        key = (kind, args, dtype)
        cache = self.xcache if level == "x" else self.rcache
        if key in cache:
            return cache[key]
        v = self.var(dtype, level)
        sec = self.xsec if level == "x" else self.rsec
        sec.stmts.append(Assign(v, kind, args, dtype, level))
        cache[key] = v
        return v

    def emit(self, e: Expr, groups: list) -> str:
        key = (e, id(groups))
        v = self.emitted.get(key)
        if v is None:
            v = self.emitted[key] = self._emit(e, groups)
        return v

    def _emit(self, e: Expr, groups: list) -> str:
        if isinstance(e, Load):
            if e.buf in self.by_name:
                producer = self.by_name[e.buf]
                if isinstance(producer, Reduction):
                    return self.final[producer.name]
                return self.emit(producer.body, self.groups[producer.name])  # type: ignore[attr-defined]
            idx, mask = place(e.index, groups), place(e.mask, groups) if e.mask is not None else None
            if mask is not None and not self._is_r(idx) and self._is_r(mask):
                mask = self._without_r_terms(mask)
            self.buffers.setdefault(e.buf, (e.dtype, "in"))
            lvl = "r" if self._is_r(idx) or self._is_r(mask) else "x"
            return self.assign("load", (e.buf, idx, mask), e.dtype, lvl)
        if isinstance(e, Const):
            return self.assign("const", (e.value,), e.dtype, "x")
        if isinstance(e, IndexValue):
            idx = place(e.index, groups)
            return self.assign("index", (idx,), e.dtype, "r" if self._is_r(idx) else "x")
        if isinstance(e, Bind):
            v = self.emit(e.value, groups)
            if isinstance(e.extent, int):
                self.extents[v] = min(e.extent, self.extents.get(v, e.extent))
            sym = bound_symbol(v)
            return self.emit(substitute(e.body, lambda i: i.xreplace({e.symbol: sym})), groups)
        assert isinstance(e, Op)
        args = tuple(self.emit(a, groups) for a in e.args)
        lvl = "r" if any(self.levels[a] == "r" for a in args) else "x"
        if e.name == "to_dtype":
            return self.assign("cast", args, e.dtype, lvl)
        return self.assign("op", (e.name, *args), e.dtype, lvl)

    def _without_r_terms(self, mask: Any) -> Any:
        """The mask of a load whose address is the same at every reduced point (a row's max, read by a padded
        row's columns) without its terms that only test the reduced point: those say where the value is not
        used, not where the address is invalid, so the load is made once per row, before the loop. A mask
        with a term mixing both is kept."""
        terms = sympy.And.make_args(mask)
        keep = [t for t in terms if not (self._is_r(t) and all(s == RINDEX or self.levels.get(s.name) == "r"
                                                                for s in t.free_symbols))]
        if any(self._is_r(t) for t in keep):
            return mask
        return sympy.And(*keep) if keep else None

    def _is_r(self, e: Any) -> bool:
        """An index is per reduced point when it uses rindex or a variable loaded per reduced point."""
        if e is None or not isinstance(e, sympy.Basic):
            return False
        return any(s == RINDEX or self.levels.get(s.name) == "r" for s in e.free_symbols)

    def build(self) -> KernelBody:
        times = self.times()
        nloops = 1 + max([v for kind, v in times.values() if kind == "r"], default=-1)
        stores = set(self.k.stores)
        self.xsec = self.sections[0]
        self.rsec = Section("r")
        self._emit_x(times, -1, stores)
        self._prefetch_gathers(times)
        for loop in range(nloops):
            self.rsec = Section("r")
            if not self.persistent:
                self.rcache = {}
                self.emitted = {k: v for k, v in self.emitted.items() if self.levels[v] != "r"}
            self.sections.append(self.rsec)
            after = Section("x")
            for n in self.k.nodes:
                if times[n.name] != ("r", loop):
                    continue
                g = self.groups[n.name]
                v = self.emit(n.body, g)  # type: ignore[attr-defined]
                if isinstance(n, Reduction):
                    acc = f"acc_{n.name}"
                    self.rsec.accumulators.append((acc, n.reduce_type, n.dtype))
                    self.rsec.stmts.append(Accumulate(acc, n.reduce_type, v, n.dtype))
                    fv = self.var(n.dtype, "x")
                    after.stmts.append(Assign(fv, "reduced", (acc, n.reduce_type), n.dtype, "x"))
                    self.final[n.name] = fv
                    if n.name in stores:
                        after.stmts.append(Store(n.name, store_index(n, g), fv, "x"))
                elif n.name in stores:
                    self.rsec.stmts.append(Store(n.name, store_index(n, g), v, "r"))
            self.sections.append(after)
            self.xsec = after
            self._emit_x(times, loop, stores)
        for n in dict.fromkeys(self.k.stores):      # in the kernel's order: the source is the same every run
            self.buffers[n] = (self.by_name[n].dtype, "out")
        return KernelBody(self.k, [s for s in self.sections if s.stmts or s.accumulators],
                          self.buffers, self.dtypes, extents=self.extents)

    def _emit_x(self, times: dict, after: int, stores: set) -> None:
        for n in self.k.nodes:
            if times[n.name] == ("x", after) and isinstance(n, Pointwise):
                g = self.groups[n.name]
                v = self.emit(n.body, g)
                if n.name in stores:
                    self.xsec.stmts.append(Store(n.name, store_index(n, g), v, self.levels[v]))
            elif times[n.name] == ("x", after) and isinstance(n, Scatter):
                self.xsec.stmts.append(self._scatter_store(n))

    def _prefetch_gathers(self, times: dict) -> None:
        """Gathers (loads at a loaded address) of values computed after a reduction loop whose addresses do not
        depend on the kernel's own results are loaded before the loops: a loss's ``logits[r, target[r]]``,
        combined with its row's max and sum, would otherwise wait for a dependent load at the end of every
        program (~12 us over the programs of a 32k-vocabulary cross-entropy on an H100)."""
        own = set(self.by_name)
        for n in self.k.nodes:
            if not isinstance(n, Pointwise) or times[n.name][0] != "x" or times[n.name][1] < 0:
                continue
            for e in walk(n.body):
                if not isinstance(e, Bind) or any(ld.buf in own for ld in loads(e.value)):
                    continue
                for ld in loads(e.body):      # the loads at the bound address (emitted later from the cache)
                    syms = ld.index.free_symbols if isinstance(ld.index, sympy.Basic) else set()
                    if ld.buf not in own and e.symbol in syms and ld.mask is None and \
                            all(s == e.symbol or s.name.startswith("x") for s in syms):
                        self.emit(Bind(e.symbol, e.value, ld, e.extent), self.groups[n.name])

    def _scatter_store(self, n: Scatter) -> Store:
        g = self.groups[n.name]
        v = self.emit(n.body, g)
        sub = {}
        for sym, value, extent in n.binds:
            bv = self.emit(value, g)
            if isinstance(extent, int):
                self.extents[bv] = min(extent, self.extents.get(bv, extent))
            sub[sym] = bound_symbol(bv)
        index = place(sympy.sympify(n.index).xreplace(sub), g)
        mask = place(n.mask.xreplace(sub), g) if n.mask is not None else None
        return Store(n.name, index, v, "x", "add" if n.accumulate else "store", mask, scatter=True)


def kernel_body(kernel: Kernel, persistent: bool = True) -> KernelBody:
    return _Builder(kernel, persistent).build()


# transcendental ops: recomputing one costs more than a store and a reload from cache (and weighs in how much
# work a kernel is worth threads for)
HEAVY_OPS = frozenset("exp exp2 expm1 log log2 log10 log1p erf erfc erfinv tanh sigmoid sin cos tan asin acos "
                      "atan sinh cosh asinh acosh atanh atan2 pow lgamma digamma sqrt rsqrt".split())


def stash_recomputed(body: KernelBody, scratch_room: int = 0) -> KernelBody:
    """In a body whose reduction loops recompute their values (``persistent=False``), a costly value of the last
    loop that an earlier loop already computed (softmax's ``exp(x - max)``: summed in loop 2, divided in loop 3)
    is stored by the earlier loop into the output the last loop writes at the same index, and loaded back there
    instead of recomputed. Each point is written and read back by its own iteration, before its final store, so
    only code generators that run both loops over the same points in order may use this (C++).

    Where no output has the value's dtype (a bf16 softmax computes ``exp`` in float32), and a row of the value
    takes at most ``scratch_room`` bytes, the value goes to a scratch row instead (``body.scratch``, indexed by
    ``rindex``: the generator gives each outer point's iteration its own, which stays in cache)."""
    rsecs = [s for s in body.sections if s.level == "r"]
    if len(rsecs) < 2:
        return body
    last, earlier = rsecs[-1], rsecs[-2]
    defs = {st.var: st for st in last.stmts if isinstance(st, Assign)}
    same = _equivalents(earlier, last)
    loaded = {st.args[0] for st in body.loads()}
    targets = [st for st in last.stmts if isinstance(st, Store) and st.buf not in loaded
               and st.buf not in body.aliased and not _names(st.index) & set(defs)]
    try:
        rnumel = int(body.kernel.rnumel)
    except TypeError:
        rnumel = None
    order = {id(st): i for i, st in enumerate(last.stmts)}     # a replaced statement keeps its place
    for var in reversed(list(defs)):
        if var not in same or not _costly(var, defs):
            continue
        if any(u in same and var in _uses(defs[u]) for u in defs):
            continue                                  # a larger equivalent value is stashed instead
        dt = defs[var].dtype
        # the output's final store must come after the load that replaces ``var`` (two equal values in the last
        # loop, each for its own output: the second may not read the first output's final value as the stash)
        st = next((t for t in targets if body.buffers[t.buf][0] == dt and order[id(t)] > order[id(defs[var])]),
                  None)
        if st is not None:
            targets.remove(st)
            buf, index = st.buf, st.index
        elif rnumel is not None and rnumel * dt.itemsize <= scratch_room:
            buf, index = f"scratch{len(body.scratch)}", RINDEX
            body.scratch[buf] = dt
        else:
            continue
        earlier.stmts.append(Store(buf, index, same[var], "r"))
        defs[var] = Assign(var, "load", (buf, index, None), dt, "r")
        last.stmts = [defs[s.var] if isinstance(s, Assign) and s.var == var else s for s in last.stmts]
    last.stmts = _dead_code_removed(last.stmts)
    return body


def _uses(st: Any) -> tuple:
    if isinstance(st, Store):
        return (st.var, *sorted(_names(st.index) | _names(st.mask)))
    if isinstance(st, Accumulate):
        return (st.var,)
    if st.kind == "op":
        return st.args[1:]
    if st.kind == "cast":
        return st.args
    if st.kind == "load":
        return tuple(_names(st.args[1]) | _names(st.args[2]))
    return ()


def _names(e: Any) -> set[str]:
    return {s.name for s in e.free_symbols} if isinstance(e, sympy.Basic) else set()


def _equivalents(a: Section, b: Section) -> dict[str, str]:
    """Vars of ``b`` -> the var of ``a`` computing the same value (same statement over equivalent operands)."""
    seen: dict[tuple, str] = {}
    for st in a.stmts:
        if isinstance(st, Assign):
            seen.setdefault((st.kind, st.args, st.dtype), st.var)
    out: dict[str, str] = {}
    own = {st.var for st in b.stmts if isinstance(st, Assign)}
    for st in b.stmts:
        if not isinstance(st, Assign):
            continue
        if st.kind == "load":
            if set(_uses(st)) & own:
                continue
            args = st.args
        elif st.kind in ("op", "cast"):
            ops = st.args[1:] if st.kind == "op" else st.args
            if any(o in own and o not in out for o in ops):
                continue
            mapped = tuple(out.get(o, o) for o in ops)
            args = (st.args[0], *mapped) if st.kind == "op" else mapped
        else:
            args = st.args
        match = seen.get((st.kind, args, st.dtype))
        if match is not None:
            out[st.var] = match
    return out


def _costly(var: str, defs: dict[str, Assign]) -> bool:
    st = defs.get(var)
    if st is None or st.kind not in ("op", "cast"):
        return False
    if st.kind == "op" and st.args[0] in HEAVY_OPS:
        return True
    return any(_costly(a, defs) for a in (st.args[1:] if st.kind == "op" else st.args))


def _dead_code_removed(stmts: list) -> list:
    live: set[str] = set()
    out = []
    for st in reversed(stmts):
        if isinstance(st, Assign) and st.var not in live:
            continue
        live.update(_uses(st))
        out.append(st)
    return out[::-1]
