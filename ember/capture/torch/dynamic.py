"""The dynamic-shapes policy of capture: which sizes and ints of a call are symbolic, and their guards.

Policy (API.md, "Dynamic shapes"): ``dynamic=None`` specializes every size on a frame's first compile and
makes a dim (or an int) symbolic once a recompile of the same frame sees it changed ("automatic dynamic");
``dynamic=True`` makes every size of the inputs symbolic from the start (parameters and buffers of modules
stay static); ``dynamic=False`` specializes everything. ``ember.mark_dynamic`` / ``mark_static`` override
per dim. Sizes 0 and 1 always stay specialized. A frame whose backend (or capture itself) cannot handle
symbols (``SymbolicUnsupported``) is compiled static from then on (``d.static_shapes``).

The guard of a symbolic dim binds its symbol (``__sym_s0``) from the first place it is read and checks its
range; the tensor's layout is checked as the contiguous (or dense permuted) layout of its symbolic sizes.
"""
from __future__ import annotations


import sympy
import torch

from ... import logs
from ...shapes import SymbolTable, to_python
from ..sources import AttrSource, CallSource, ItemSource, LocalSource
from ..values import NUMPY_INTS
from .graph import TensorVar
from .symsize import PREFIX, SymNumVar


def table(st):
    if st.table is None:
        st.table = SymbolTable()
    return st.table


def _log(msg: str) -> None:
    if logs.enabled("dynamic"):
        logs.log("dynamic", msg)


def module_weight(source) -> bool:
    """Whether ``source`` is a module's parameter or buffer (``m._parameters['w']``, ``m._buffers['b']``)."""
    return isinstance(source, ItemSource) and isinstance(source.base, AttrSource) and \
        source.base.name in ("_parameters", "_buffers")


_weight_like = module_weight


def _markings(t: torch.Tensor) -> tuple[set[int], dict[int, tuple], set[int]]:
    """The dims marked dynamic (with their ``(min, max)``) and static, by ``ember.mark_dynamic`` /
    ``mark_static`` or by torch's own ``torch._dynamo.mark_dynamic`` / ``maybe_mark_dynamic`` / ``mark_static``
    (code written for torch.compile keeps its markings; read from the attributes those set, without importing
    Dynamo). ember's own marking wins for a dim marked both ways."""
    marked = set(getattr(t, "_ember_dynamic", ()))
    ranges = dict(getattr(t, "_ember_dynamic_ranges", {}))
    static = set(getattr(t, "_ember_static", ()))
    if getattr(t, "_has_dynamo_dim_marking", False) or hasattr(t, "_dynamo_static_indices"):
        n = t.dim()
        torch_dims = {i % n for i in (*getattr(t, "_dynamo_dynamic_indices", ()),
                                      *getattr(t, "_dynamo_weak_dynamic_indices", ()))}
        marked |= torch_dims
        for r in getattr(t, "_dynamo_dynamic_range", ()):
            dim = getattr(r, "dim", None)
            if isinstance(dim, int) and dim % n not in ranges:
                ranges[dim % n] = (getattr(r, "min", None), getattr(r, "max", None))
        static |= {i % n for i in getattr(t, "_dynamo_static_indices", ())} - set(getattr(t, "_ember_dynamic", ()))
    return marked, ranges, static


def dynamic_dims(plugin, d, source, t: torch.Tensor) -> dict[int, tuple]:
    """{dim: (lo, hi)} of ``t``'s dims that are symbolic in this trace."""
    if getattr(d, "static_shapes", False) or source is None or t.dim() == 0:
        return {}
    plain = d.cg.plain(source)
    state = getattr(d, "frame_state", None)
    marked, ranges, static = _markings(t)
    want: set[int] = set(marked)
    if plugin.dynamic is True and not _weight_like(source):
        want |= set(range(t.dim()))
    elif plugin.dynamic is None and state is not None:
        key = ("dims", plain)
        prev = state.get(("shape", plain))
        dims = state.setdefault(key, set())
        if prev is not None and len(prev) == t.dim():
            for i, (a, b) in enumerate(zip(prev, t.shape)):
                if a != b:
                    if i not in dims:
                        _log(f"automatic dynamic: {plain}.size()[{i}] changed ({a} -> {b}): it is symbolic now")
                    dims.add(i)
        want |= dims
    if state is not None:
        state[("shape", plain)] = tuple(t.shape)
    out = {}
    for i in sorted(want):
        n = t.shape[i]
        lo, hi = ranges.get(i, (None, None))
        if i in static:
            _log(f"{plain}.size()[{i}] = {n} is static: ember.mark_static")
        elif n < 2:
            _log(f"{plain}.size()[{i}] = {n} is specialized: sizes 0 and 1 always are")
        else:
            out[i] = (max(2, lo if lo is not None else 2), hi)
    if out and not (t.is_contiguous() or _dense(t)):
        _log(f"{plain} is specialized: its layout is not dense (strides {t.stride()})")
        return {}
    return out


def _dense(t: torch.Tensor) -> bool:
    """Dense in some order of its dims, dims of size 1 and expanded dims (stride 0: a broadcast mask) aside;
    the guard checks those strides (0 stays 0), so the layout holds for every size."""
    order = sorted(range(t.dim()), key=lambda i: (t.stride(i), t.shape[i]))
    expected = 1
    for i in order:
        if t.shape[i] == 1 or t.stride(i) == 0:
            continue
        if t.stride(i) != expected:
            return False
        expected *= t.shape[i]
    return True


def symbolic_input(d, source, t: torch.Tensor, dims: dict) -> tuple:
    """Symbols for ``t``'s dynamic dims: its symbolic sizes."""
    tab = table(d.torch)
    plain = d.cg.plain(source)
    sizes = []
    for i, n in enumerate(t.shape):
        if i in dims:
            lo, hi = dims[i]
            s = tab.new_symbol(n, f"{plain}.size()[{i}]", lo=lo, hi=hi)
            _log(f"symbol {s} = {plain}.size()[{i}] (hint {n}, range [{lo}, {hi if hi is not None else 'inf'}])")
            sizes.append(s)
        else:
            sizes.append(int(n))
    return tuple(sizes)


def input_meta(d, node, meta, sizes: tuple) -> None:
    from .symprop import sym_strides
    node.meta["ember_shape"] = sizes
    node.meta["ember_stride"] = sym_strides(d.torch.table, meta, sizes)


def shape_check(d, e: str, sizes: tuple) -> str:
    """Guard text checking a tensor's sizes, binding each symbol at its first occurrence."""
    st = d.torch
    st.n_shapes = getattr(st, "n_shapes", 0) + 1
    sh = f"__shape{st.n_shapes}"
    tab = st.table
    parts = [f"len({sh} := {e}.shape) == {len(sizes)}"]
    for i, s in enumerate(sizes):
        if isinstance(s, int):
            parts.append(f"{sh}[{i}] == {s}")
            continue
        lo, hi = tab.ranges[s]
        bind = f"({PREFIX}{s.name} := {sh}[{i}]) >= {lo}"
        parts.append(bind + (f" and {PREFIX}{s.name} <= {hi}" if hi is not None else ""))
    return " and ".join(parts)


def layout_check(d, e: str, t: torch.Tensor, sizes: tuple) -> str:
    from .symprop import sym_strides
    if t.is_contiguous():
        return f"{e}.is_contiguous()"
    names = {s: PREFIX + s.name for s in d.torch.table.symbols}
    strides = sym_strides(d.torch.table, t, sizes)
    # the strides of dims of size 1 are not compared: they follow the other sizes (a permuted KV cache's
    # batch dim of 1), so comparing the compiling call's number failed at every new length
    keep = [i for i, n in enumerate(t.shape) if n != 1]
    if len(keep) == t.dim():
        return f"{e}.stride() == ({', '.join(to_python(sympy.sympify(x), names) for x in strides)},)"
    want = [to_python(sympy.sympify(strides[i]), names) for i in keep]
    got = [f"(__st := {e}.stride())[{i}]" if j == 0 else f"__st[{i}]" for j, i in enumerate(keep)]
    return f"({', '.join(got)},) == ({', '.join(want)},)" if keep else "True"


def _changed(d, kind: str, obj, source) -> bool:
    """Whether the number at ``source`` is dynamic: marked so, or changed since this frame's last compile
    (then marked: automatic dynamic)."""
    plain = d.cg.plain(source)
    state = getattr(d, "frame_state", None)
    changed = False
    if state is not None:
        prev = state.get((kind, plain))
        state[(kind, plain)] = obj
        changed = prev is not None and prev != obj and not (prev != prev and obj != obj)
    if changed and plain not in d.dynamic:
        _log(f"automatic dynamic: the {kind} {plain} changed ({prev} -> {obj}): it is symbolic now")
        d.dynamic.add(plain)
    return plain in d.dynamic


def wrap_number(plugin, d, obj: int, source):
    """An int the policy makes symbolic (a ``SymNumVar`` read from an int graph input), or None (floats:
    ``float_item.wrap_float``). A NumPy integer (``np.int64(i)``) follows the same policy: the graph gets the
    int it holds (a ``CallSource`` of ``int``), the value keeps its NumPy type (``SymNumVar.np_type``)."""
    if plugin.dynamic is False or getattr(d, "static_shapes", False):
        return None
    np_type = type(obj) if isinstance(obj, NUMPY_INTS) else None
    if type(obj) is not int and np_type is None or int(obj) < 2:
        return None
    plain = d.cg.plain(source)
    if not (_changed(d, "int", obj, source) or (plugin.dynamic is True and isinstance(source, LocalSource))):
        return None
    st = d.torch
    tab = table(st)
    s = tab.new_symbol(int(obj), plain, lo=2, size=False)
    _log(f"symbol {s} = {plain} (an int argument, hint {obj})")
    e = source.expr(d.cg)
    typ = np_type or int
    if np_type is not None:
        source = CallSource(int, source)
    d.guards.add(f"type({e}) is {d.cg.bind(typ, typ.__name__)} and ({PREFIX}{s.name} := {source.expr(d.cg)}) >= 2",
                 f"{plain} is an {typ.__name__} >= 2 (symbol {s})")
    node = st.placeholder(source, int(obj))
    sym = tab.symint(s)
    node.meta["example_value"] = sym
    node.meta["ember_int"] = s
    node.meta["ember_device"] = torch.device("cpu")
    return SymNumVar(sym, node, np_type)


