"""The generated Python wrapper: one function per graph that checks input layouts, allocates buffers, runs
kernels and extern calls in schedule order, frees buffers after their last use and returns the outputs.

Input: a ``Schedule`` and, per kernel, a compiled callable ``kernel(*buffers)`` (buffers in the order of its
``KernelBody.buffers``). Output: ``CompiledGraph``, the generated function (the graph's calling convention) with its
source (printed by ``EMBER_LOGS=output_code``).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Protocol, runtime_checkable

import sympy
import torch
from torch.utils._pytree import tree_flatten

from ember.emit import py_literal
from ember.shapes import SymbolicUnsupported, active_table, size_symbols, to_python
from ember.loopir.inplace import memory_root
from ember.loopir.ir import (BufferRef, Extern, ExternOutput, InputBuffer, Layout, Pointwise, Reduction,
                             contiguous_stride)
from ember.loopir.kernel import KernelBody
from ember.loopir.schedule import Kernel, Schedule
from ember.heuristics import heuristics


def restride(t: torch.Tensor, shape: tuple, stride: tuple) -> torch.Tensor:
    """``t`` copied into the layout the kernels were generated for."""
    out = torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


class FirstLaunch:
    """A kernel's launcher name in a wrapper's globals until its first call with aligned arguments: that call
    asks the kernel for its launcher for 16-byte aligned arguments (compiling or loading it) and binds the name
    to it, so later calls go straight to Triton's launcher, with no alignment key per launch. The wrapper calls
    this name only when every argument that may be misaligned was checked to be aligned (``_aligned``)."""

    def __init__(self, kernel: Any, name: str) -> None:
        self.kernel, self.name = kernel, name
        self.ns: dict[str, Any] | None = None

    def __call__(self, *args: Any) -> None:
        launch = self.kernel.aligned_launcher(args)
        if self.ns is not None:
            self.ns[self.name] = launch
        launch(*args)


@runtime_checkable
class CompiledGraph(Protocol):
    """The generated function itself (no wrapper object on the per-call path), carrying its sources."""
    source: str
    kernel_sources: list[str]

    def __call__(self, *args: Any) -> Any: ...


def _size(v: Any) -> str:
    """A shape or stride as Python source: a tuple literal, or one over the size symbols the wrapper binds."""
    try:
        return repr(tuple(int(x) for x in v))
    except TypeError:       # symbolic entries
        return "(" + "".join(f"{_num(x)}, " for x in v) + ")"


def _num(x: Any) -> str:
    return to_python(x) if isinstance(x, sympy.Basic) else repr(int(x))


def _solve_linear(e: Any) -> tuple | None:
    """``(s, a, b)`` when ``e`` is ``a*s + b`` for one size symbol ``s`` and integers ``a > 0``, ``b``."""
    if not isinstance(e, sympy.Expr) or len(e.free_symbols) != 1:
        return None
    (sym,) = e.free_symbols
    poly = sympy.Poly(e, sym) if e.is_polynomial(sym) else None
    if poly is None or poly.degree() != 1:
        return None
    a, b = poly.all_coeffs()
    if not (a.is_Integer and b.is_Integer and a > 0):
        return None
    return sym, int(a), int(b)


class _Writer:
    def __init__(self, schedule: Schedule, inplace: dict[str, str]) -> None:
        self.s = schedule
        self.inplace = inplace
        self.lines: list[str] = []
        self.globals: dict[str, Any] = {"torch": torch, "empty_strided": torch.empty_strided,
                                        "as_strided": torch.as_strided, "restride": restride}
        self.layouts: dict[str, Layout] = {n.name: n.layout for n in schedule.graph.nodes}
        # buffers that may be views with a storage offset: inputs, extern results, and what is stored over them
        self.bound = {n.name for n in schedule.graph.nodes if isinstance(n, (InputBuffer, Extern, ExternOutput))}
        self.bound |= set(inplace)
        self.reuse, self.kept = plan_reuse(schedule, inplace)
        self.unbound: set = set()       # unbacked symbols (u<k>), bound after the extern that computes them
        self._externs = {n.name: n for n in schedule.graph.nodes if isinstance(n, Extern)}
        self.asserted: set = set()      # runtime assertions already written
        self.allocated = _allocation_layouts(schedule, inplace)
        self.aligned: set[str] = set()      # buffers this wrapper allocates (the allocator aligns them)
        self.launched: set[str] = set()     # buffers passed to kernels with an aligned launcher
        self.folded: set[str] = set()       # buffers whose alignment ``_aligned`` includes
        self.origins: dict[str, Any] = {}   # extern global -> (target, prim name): ``_direct`` drops the OpOverload

    def bind(self, prefix: str, value: Any) -> str:
        name = f"{prefix}{len(self.globals)}"
        self.globals[name] = value
        return name

    def ref(self, r: BufferRef) -> str:
        own = self.allocated.get(r.name, self.layouts[r.name])
        if r.layout == own:
            return r.name
        lay = r.layout      # offsets are relative to the buffer's tensor; as_strided takes absolute ones
        if r.name not in self.bound:        # allocated by this wrapper: storage offset 0
            return f"as_strided({r.name}, {_size(lay.shape)}, {_size(lay.stride)}, {_num(lay.offset)})"
        return (f"as_strided({r.name}, {_size(lay.shape)}, {_size(lay.stride)}, "
                f"{r.name}.storage_offset(){f' + {_num(lay.offset)}' if lay.offset else ''})")

    def arg(self, a: Any) -> str:
        if isinstance(a, BufferRef):
            return self.ref(a)
        if isinstance(a, (list, tuple)):        # FX's immutable_list too: written item by item, never by repr
            inner = ", ".join(self.arg(x) for x in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{self.arg(k)}: {self.arg(v)}" for k, v in a.items()) + "}"
        if isinstance(a, sympy.Basic):      # a symbolic size: computed from the bound symbols
            return to_python(a)
        lit = py_literal(a)         # exact literals only: never a subclass's repr (ember.emit)
        return lit if lit is not None else self.bind("c", a)

    def alloc(self, name: str) -> None:
        if name in self.inplace:
            self.lines.append(f"    {name} = {self.inplace[name]}  # new value stored in place")
            if self.inplace[name] in self.folded:
                self.folded.add(name)
            elif name in self.launched:
                self.fold(name)
            return
        lay = self.allocated.get(name, self.layouts[name])
        donor = self.reuse.get(name)
        self.aligned.add(name)
        if donor is not None:
            if self.allocated.get(donor, self.layouts[donor]) == lay:
                self.lines.append(f"    {name} = {donor}; del {donor}  # reuses {donor}'s memory")
                return
            self.lines.append(f"    {name} = as_strided({donor}, {_size(lay.shape)}, {_size(lay.stride)}, 0); "
                              f"del {donor}  # reuses {donor}'s memory")
            return
        dev = self.bind("dev", lay.device)
        self.lines.append(f"    {name} = empty_strided({_size(lay.shape)}, {_size(lay.stride)}, "
                          f"dtype={lay.dtype}, device={dev})")

    def bind_symbols(self, kernels: dict[str, tuple[Callable, KernelBody]]) -> None:
        """``s0 = arg0.size(0)``: each size symbol the call needs, read from the graph's inputs (a tensor's size
        or stride that is the symbol itself, or an int input); sizes of buffers are then computed from them."""
        g = self.s.graph
        exprs: list = [b.symbols for _, b in kernels.values() if hasattr(b, "symbols")]
        exprs = [s for syms in exprs for s in syms]
        for n in g.nodes:
            exprs += [*n.layout.shape, *n.layout.stride, n.layout.offset]
            if isinstance(n, Extern):
                flat = tree_flatten((n.args, n.kwargs))[0]
                exprs += [a for a in flat if isinstance(a, sympy.Basic)]
                exprs += [x for a in flat if isinstance(a, BufferRef) and a.layout is not None
                          for x in (*a.layout.shape, *a.layout.stride, a.layout.offset)]   # views passed to the call
        exprs += [a for a in tree_flatten(g.outputs)[0] if isinstance(a, sympy.Basic)]
        # output views, their offsets included (x.narrow(0, n, 2) of an int argument n: offset n)
        exprs += [x for o in g.outputs if isinstance(o, BufferRef)
                  for x in (*o.layout.shape, *o.layout.stride, o.layout.offset)]
        sources: dict[Any, str] = {}
        for name, e in g.symbol_inputs.items():
            if isinstance(e, sympy.Symbol):
                sources.setdefault(e, name)
        for n in g.nodes:
            if isinstance(n, InputBuffer) and n.position >= 0:
                for d, v in enumerate(n.layout.shape):
                    if isinstance(v, sympy.Symbol):
                        sources.setdefault(v, f"{n.name}.size({d})")
                for d, v in enumerate(n.layout.stride):
                    if isinstance(v, sympy.Symbol):
                        sources.setdefault(v, f"{n.name}.stride({d})")
        for n in g.nodes:     # a symbol only seen in a linear size (``s0 + 1`` of a concatenated cache): solved
            if isinstance(n, InputBuffer) and n.position >= 0:
                for d, v in enumerate(n.layout.shape):
                    solved = _solve_linear(v)
                    if solved is not None and solved[0] not in sources:
                        sym, a, b = solved
                        sources[sym] = f"(({n.name}.size({d}) - {b}) // {a})"
        for sym, buf in getattr(g, "items", {}).items():      # an unbacked int read from an input: t.item()
            sources.setdefault(sym, f"{buf}.item()")
        replaced = []
        for sym in size_symbols(*exprs):
            if sym not in sources and sym.name[0] == "u":   # a data-dependent size: read from an extern's result
                self.unbound.add(sym)
                continue
            if sym not in sources and self._replaced(sym, sources) is not None:
                replaced.append(sym)
                continue
            if sym not in sources:
                raise SymbolicUnsupported(f"ember.codegen: the size symbol {sym} of graph {g.name} is not a size, "
                                          "stride or int of one of its inputs")
            self.lines.append(f"    {sym.name} = {sources[sym]}")
        bound = set(size_symbols(*exprs))
        for sym in replaced:
            for s in size_symbols(active_table().replacements[sym]):
                if s not in bound:
                    bound.add(s)
                    self.lines.append(f"    {s.name} = {sources[s]}")
            self.lines.append(f"    {sym.name} = {self._replaced(sym, sources)}")
        self.check_asserts()

    @staticmethod
    def _replaced(sym: Any, sources: dict) -> str | None:
        """``s1`` that the table replaced (``s1 == s0`` was decided): the expression it equals, over symbols
        read from the inputs (input layouts are in the table's symbols; a value's metadata may still say
        ``s1``)."""
        table = active_table()
        rep = table.replacements.get(sym) if table is not None else None
        if rep is None or not all(s in sources for s in size_symbols(rep)):
            return None
        return to_python(rep)

    def bind_unbacked(self, name: str, target: Any) -> None:
        """``u0 = buf3.size(0)``: the unbacked sizes of a data-dependent ATen call's result (``nonzero``,
        ``x[mask]``, ...), bound right after the call that computed them; kernels and allocations after it take
        them as arguments. (Another extern's result of that size does not bind it: it comes after a use.)"""
        if not self.unbound or getattr(getattr(target, "_schema", None), "name", "") not in _DATA_DEPENDENT:
            return
        for d, v in enumerate(self.layouts[name].shape):
            if isinstance(v, sympy.Symbol) and v in self.unbound:
                self.lines.append(f"    {v.name} = {name}.size({d})")
                self.unbound.discard(v)
        self.check_asserts()

    def check_asserts(self) -> None:
        """The facts the program relies on about unbacked sizes (``torch._check``, ``SymbolTable.asserts``),
        checked as soon as their symbols are bound: a violation raises with the relation and the user line."""
        table = self.s.graph.symbols
        for r in getattr(table, "asserts", ()):
            syms = r.expr.free_symbols
            if r in self.asserted or not syms or syms & self.unbound or any(
                    f"    {u.name} = " not in "\n".join(self.lines) for u in syms):
                continue
            self.asserted.add(r)
            msg = self.bind("msg", f"ember: a check the compiled program relies on failed: {r}")
            self.lines.append(f"    if not ({to_python(r.expr)}): raise RuntimeError({msg})")

    def check(self, name: str, maybe_none: bool = False) -> None:
        lay = self.layouts[name]
        none = f"{name} is not None and " if maybe_none else ""     # an extern's optional output
        # Strides of dims of size 1 are never multiplied by a nonzero index, so they are not compared: an
        # input's stride there may follow sizes the layout does not hold (a KV cache (1, h, s0, d) has 64*s0
        # at dim 0 on each call, recorded as the hint's number), and comparing it copied the whole cache on
        # every call. A contiguous layout: is_contiguous() is the cheaper test (70 ns against 100 for the
        # stride tuple, per tensor and call), and it ignores those strides too.
        keep = [i for i, n in enumerate(lay.shape) if n != 1]
        dense = contiguous_stride(lay.shape)
        if all(lay.stride[i] == dense[i] for i in keep):
            test = f"not {name}.is_contiguous()"
        elif len(keep) == len(lay.shape):
            test = f"{name}.stride() != {_size(lay.stride)}"
        else:
            got = ", ".join((f"(__st := {name}.stride())[{i}]" if j == 0 else f"__st[{i}]")
                            for j, i in enumerate(keep))
            test = f"({got},) != {_size([lay.stride[i] for i in keep])}"
        self.lines.append(f"    if {none}{test}: {name} = restride({name}, {_size(lay.shape)}, {_size(lay.stride)})")

    def fold(self, name: str, maybe_none: bool = False) -> None:
        """``_aligned`` also says whether ``name`` (bound just before: an extern's result) is 16-byte aligned."""
        none = f"{name} is not None and " if maybe_none else ""
        self.lines.append(f"    if {none}{name}.data_ptr() & 15: _aligned = False")
        self.folded.add(name)

    def _fold_inputs(self, names: list[str]) -> None:
        """``_aligned``: whether the inputs (and constants, and host scalars' copies) that kernels take are all
        16-byte aligned, checked once per call; each kernel then launches without checking its own."""
        names = [b for b in names if b in self.launched]
        if names:
            self.lines.append(f"    _aligned = not (({' | '.join(f'{b}.data_ptr()' for b in names)}) & 15)")
        else:
            self.lines.append("    _aligned = True")
        self.folded.update(names)

    def _launch_line(self, step: Kernel, fn: Any, names: list[str]) -> str:
        kname = self.bind(step.name + "_", fn)
        # the kernel's size symbols follow its buffers, sorted by name (docs/dynamic-contract.md)
        args = ", ".join(names + [s.name for s in getattr(self.kernel_bodies[step.name], "symbols", ())])
        if not hasattr(fn, "aligned_launcher"):      # not a TritonKernel (C++, an autotuned choice)
            return f"{kname}({args})"
        checked = [i for i, b in enumerate(names) if b not in self.aligned]
        fn.set_checked(checked)
        first = f"{kname}a"
        self.globals[first] = FirstLaunch(fn, first)
        if not checked:
            return f"{first}({args})"
        if all(names[i] in self.folded for i in checked):
            return f"({first} if _aligned else {kname})({args})"
        return f"{kname}({args})"

    def _host_scalars(self, kernels: dict[str, tuple[Callable, KernelBody]]) -> dict[tuple, str]:
        """0-dim CPU tensors read by kernels on another device (``x * torch.tensor(2.5)`` with ``x`` on CUDA,
        or ``x * y_cpu.sum()``): the kernels get a device copy (externs keep the CPU tensor, as ATen expects).
        An input's copy is made here, at the start; a computed one's just before the first kernel that reads
        it (``self.late_copies``: step index -> lines), after the CPU step that computed it."""
        out: dict[tuple, str] = {}
        scalars = {n.name: n for n in self.s.graph.nodes
                   if getattr(n, "layout", None) is not None and n.device.type == "cpu" and len(n.layout.shape) == 0}
        self.late_copies: dict[int, list[str]] = {}
        for i, step in enumerate(self.s.steps):
            if not isinstance(step, Kernel) or step.device.type == "cpu":
                continue
            for b in kernels[step.name][1].buffers:
                n = scalars.get(b)
                if n is not None and (b, step.device) not in out:
                    name = out[(b, step.device)] = f"{b}_on_{step.device.type}{step.device.index or 0}"
                    dev = self.bind("dev", step.device)
                    line = f"    {name} = {b}.to({dev}, non_blocking=True)"
                    if isinstance(n, InputBuffer):
                        self.lines.append(line)
                    else:
                        self.late_copies.setdefault(i, []).append(line)
        return out

    def write(self, kernels: dict[str, tuple[Callable, KernelBody]], steal: bool = False) -> str:
        """The wrapper's source. With ``steal`` the body is ``NAME__list(args)``, which takes its arguments
        as a list it empties, and drops each input after its last use (a backward's saved activations are
        freed as it goes, as eager's autograd frees them); ``NAME(*args)`` calls it with a fresh list."""
        g = self.s.graph
        self.kernel_bodies = {k: b for k, (_, b) in kernels.items()}
        if steal:
            self.lines.append(f"def {g.name}__list(args):")
            if g.inputs:
                self.lines.append(f"    ({', '.join(g.inputs)},) = args")
            self.lines.append("    args.clear()")
        else:
            self.lines.append(f"def {g.name}({', '.join(g.inputs)}):")
        if g.symbols is not None:
            self.bind_symbols(kernels)
        for n in g.nodes:
            if isinstance(n, InputBuffer):
                if n.position >= 0:
                    if any(s != 1 for s in n.layout.shape):
                        self.check(n.name)
                else:
                    self.lines.append(f"    {n.name} = {self.bind('constant', g.constants[n.name])}")
        host = self._host_scalars(kernels)
        host_inputs = {b for b, _ in host}      # 0-dim CPU inputs copied to a device: tiny, kept
        for step in self.s.steps:
            if isinstance(step, Kernel) and hasattr(kernels[step.name][0], "aligned_launcher"):
                self.launched.update(host.get((b, step.device), b) for b in kernels[step.name][1].buffers)
        late = {line.split(" = ")[0].strip() for lines in self.late_copies.values() for line in lines}
        if self.launched:
            self._fold_inputs([n.name for n in g.nodes if isinstance(n, InputBuffer)] +
                              [h for h in host.values() if h not in late])
        self.folded.update(late)        # fresh device tensors: aligned
        for i, step in enumerate(self.s.steps):
            if isinstance(step, Kernel):
                fn, body = kernels[step.name]
                self.lines.extend(self.late_copies.get(i, ()))
                for b, (_, role) in body.buffers.items():
                    if role == "out":
                        self.alloc(b)
                for b in body.shared:       # stored through another buffer's parameter, the same tensor
                    self.alloc(b)
                names = [host.get((b, step.device), b) for b in body.buffers]
                self.lines.append(f"    {self._launch_line(step, fn, names)}  # {step.fused()}")
            elif isinstance(step, Extern):
                fn = self.bind("extern", _direct(step.target))
                self.origins[fn] = (step.target, step.op)
                args = ", ".join([self.arg(a) for a in step.args] +
                                 [f"{k}={self.arg(v)}" for k, v in step.kwargs.items()])
                self.lines.append(f"    {step.name} = {fn}({args})")
                if not step.multi:
                    self.bind_unbacked(step.name, step.target)
                    self.check(step.name)
                    if step.fresh:      # a new tensor from the allocator (or restride): aligned
                        self.folded.add(step.name)
                    elif step.name in self.launched:
                        self.fold(step.name)
            elif isinstance(step, ExternOutput):
                self.lines.append(f"    {step.name} = {step.source}[{step.index}]")
                self.bind_unbacked(step.name, self._externs[step.source].target)
                self.check(step.name, maybe_none=True)
                if step.name in self.launched:
                    self.fold(step.name, maybe_none=True)
            elif step is not None:          # a step that writes its own lines (a matmul template)
                step.write(self, kernels)
            dead = [b for b in self.s.frees[i] if b not in self.kept]
            if steal and i < len(self.s.input_frees):
                dead += [b for b in self.s.input_frees[i] if b not in host_inputs]
            if dead:
                self.lines.append(f"    del {', '.join(dead)}")
        if self.unbound:
            raise SymbolicUnsupported(f"ember.codegen: the data-dependent sizes {sorted(map(str, self.unbound))} "
                                      f"of graph {g.name} are not a size of an ATen call's result")
        outs = [self.ref(o) if isinstance(o, BufferRef) else self.arg(o) for o in g.outputs]
        self.lines.append(f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
        if steal:
            self.lines.append(f"def {g.name}({', '.join(g.inputs)}):")
            self.lines.append(f"    return {g.name}__list([{', '.join(g.inputs)}])")
        return "\n".join(self.lines) + "\n"


_DATA_DEPENDENT = frozenset({"aten::nonzero", "aten::argwhere", "aten::index", "aten::masked_select",
                             "aten::_unique2", "aten::unique_dim"})     # externs whose result sizes are unbacked


def _direct(target: Any) -> Any:
    """What an ATen ``OpOverload`` calls (its ``__call__`` is ``self._op(*args, **kwargs)``): the wrapper
    calls that directly, one Python frame less per extern call."""
    return target._op if isinstance(target, torch._ops.OpOverload) else target


def _allocation_layouts(schedule: Schedule, inplace: dict[str, str]) -> dict[str, Layout]:
    """Buffers a kernel computes in memory order (a channels-last activation: (N, H, W, C) contiguous) whose
    every other user (ATen calls, graph outputs) sees them through one permuted view ((N, C, H, W) with NHWC
    strides): allocated as that view, so those users get the tensor itself instead of an ``as_strided`` per
    use. Kernels address memory from the data pointer and their own layout, whatever the tensor's strides.
    Names stored in place into one buffer share its tensor, so they are decided together."""
    graph = schedule.graph

    def root(b: str) -> str:
        return memory_root(b, inplace)
    layouts = {n.name: n.layout for n in graph.nodes}
    computed = {n.name for n in graph.nodes if isinstance(n, (Pointwise, Reduction))}
    groups: dict[str, list[str]] = {}
    for n in graph.nodes:
        groups.setdefault(root(n.name), []).append(n.name)
    refs = [o for o in graph.outputs if isinstance(o, BufferRef)]
    for step in schedule.steps:
        if isinstance(step, Extern):
            refs += [a for a in tree_flatten((step.args, step.kwargs))[0] if isinstance(a, BufferRef)]
    seen: dict[str, set[Layout]] = {}
    for r in refs:
        seen.setdefault(root(r.name), set()).add(r.layout)
    out = {}
    for r, lays in seen.items():
        names = groups.get(r, [r])
        if r not in computed or any(layouts[b] != layouts[r] for b in names) or len(lays) != 1:
            continue
        lay = next(iter(lays))
        if lay != layouts[r] and _same_memory(lay, layouts[r]):
            out.update({b: lay for b in names})
    return out


def _same_memory(a: Layout, b: Layout) -> bool:
    """Whether two layouts are the same dense memory seen with the dims in another order: the same (stride,
    size) pairs of their non-1 dims, compared structurally when symbolic (a channels-last activation of symbolic
    batch or spatial sizes and its (N, H, W, C) memory order), so equal for every value of the symbols."""
    if (a.dtype, a.device, a.offset, b.offset) != (b.dtype, b.device, 0, 0):
        return False

    def pairs(lay: Layout) -> Counter:
        return Counter((_canonical(st), _canonical(n)) for n, st in zip(lay.shape, lay.stride) if n != 1)
    return pairs(a) == pairs(b)


def _canonical(v: Any) -> Any:
    return int(v) if not isinstance(v, sympy.Basic) or not v.free_symbols else sympy.expand(v)


def _storage_key(lay: Layout) -> tuple | None:
    """(bytes, dtype, device) of the memory ``empty_strided`` gives a buffer of this layout (None: symbolic, or
    too large to be worth holding)."""
    try:
        shape, stride = [int(v) for v in lay.shape], [int(v) for v in lay.stride]
    except TypeError:
        return _symbolic_storage_key(lay)
    if any(n == 0 for n in shape):
        return None
    nbytes = (1 + sum((n - 1) * st for n, st in zip(shape, stride))) * lay.dtype.itemsize
    return (nbytes, lay.dtype, lay.device) if nbytes <= heuristics().wrapper_reuse_max_bytes else None


def _symbolic_storage_key(lay: Layout) -> tuple | None:
    """The key of a layout with symbolic sizes: its byte count as one canonical expression (after the table's
    equalities), so two buffers share memory only where their sizes are equal for every size allowed (symbolic
    sizes are at least 2: never empty). Whether it is worth holding is decided at the hints."""
    table = active_table()
    if table is None:
        return None
    extent = 1 + sum(((n - 1) * st for n, st in zip(lay.shape, lay.stride)), sympy.Integer(0))
    nbytes = sympy.expand(table.simplify(extent * lay.dtype.itemsize))
    return (nbytes, lay.dtype, lay.device) if table.hint(nbytes) <= heuristics().wrapper_reuse_max_bytes else None


def plan_reuse(schedule: Schedule, inplace: dict[str, str]) -> tuple[dict[str, str], set[str]]:
    """Memory planning (Inductor's buffer reuse): a buffer the wrapper allocates for a kernel's output takes
    the memory of an earlier one of the same size, dtype and device that is dead by then, instead of asking the
    caching allocator (an allocation costs microseconds of host time; a model allocates hundreds per call).

    Returns ({receiver: donor name}, {donor names whose ``del`` waits for the receiver}). A donor is memory
    the wrapper allocated itself, read only by generated kernels and by externs returning fresh tensors (so no
    view of it survives), whose every name (buffers stored into it in place) has died; the most recently freed
    one is taken first. Memory dead for more than ``wrapper_reuse_window`` steps goes back to the allocator instead
    (held for a later buffer it would raise the peak: the allocator hands it to the steps between)."""
    graph = schedule.graph
    layouts = {n.name: n.layout for n in graph.nodes}

    def root(b: str) -> str:
        return memory_root(b, inplace)
    names: dict[str, set[str]] = {}
    for n in graph.nodes:
        names.setdefault(root(n.name), set()).add(n.name)
    owned: set[str] = set()         # roots allocated by the wrapper for a kernel's output
    unsafe: set[str] = set()        # roots some other step may keep a view of
    for step in schedule.steps:
        if step is None:            # an epilogue kernel a matmul template took over
            continue
        if isinstance(step, Kernel):
            owned |= {b for b in step.stores if b not in inplace}
        elif not (isinstance(step, Extern) and step.fresh and not step.multi):
            unsafe |= {root(b) for b in step.reads()} | {root(step.name)}
        else:
            unsafe.add(root(step.name))
    for o in graph.outputs:
        if isinstance(o, BufferRef):
            unsafe.add(root(o.name))
    pool: dict[tuple, list[tuple[str, int]]] = {}      # key -> (donor, step it died at), oldest first
    alive: dict[str, set[str]] = {}
    reuse: dict[str, str] = {}
    kept: set[str] = set()
    for i, step in enumerate(schedule.steps):
        if isinstance(step, Kernel):
            for b in step.stores:
                if b not in owned:
                    continue
                key = _storage_key(layouts[b])
                free = pool.get(key, []) if key is not None else []
                while free and i - free[0][1] > heuristics().wrapper_reuse_window:
                    free.pop(0)
                if free:
                    reuse[b] = free.pop()[0]
                    kept.add(reuse[b])
        for b in schedule.frees[i]:
            r = root(b)
            if r not in owned or r in unsafe:
                continue
            left = alive.setdefault(r, set(names[r]))
            left.discard(b)
            if not left:
                key = _storage_key(layouts[r])
                if key is not None:
                    pool.setdefault(key, []).append((b, i))
    return reuse, kept


def make_wrapper(schedule: Schedule, kernels: dict[str, tuple[Callable, KernelBody]],
                 kernel_sources: list[str], inplace: dict[str, str] | None = None,
                 steal: bool = False) -> CompiledGraph:
    """``inplace`` maps buffers to the input they are stored into (see ``ember.loopir.inplace``). With
    ``steal`` the function also has ``call_list(args)``, which takes the arguments as a list it empties and
    frees each after its last use (for a backward graph, whose caller gives up its saved tensors)."""
    w = _Writer(schedule, inplace or {})
    src = w.write(kernels, steal)
    code = compile(src, f"<ember wrapper {schedule.graph.name}>", "exec")
    ns = dict(w.globals)
    exec(code, ns)
    for v in ns.values():
        if isinstance(v, FirstLaunch):
            v.ns = ns
    fn = ns[schedule.graph.name]
    fn.source, fn.kernel_sources = src, kernel_sources
    # what the source's free names are bound to, for ahead-of-time packages (ember.deploy.package)
    fn.wrapper_globals, fn.wrapper_origins = w.globals, w.origins
    if steal:
        fn.call_list = ns[f"{schedule.graph.name}__list"]
    return fn
