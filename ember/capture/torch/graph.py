"""The FX graph a trace records into, and the meta-tensor execution that gives every node its metadata.

Each tensor value carries a meta tensor (shape, dtype, strides, requires_grad; no data) and its real device,
which meta tensors cannot hold. Ops run on the meta tensors under the trace's grad mode and autocast state, so
metadata is exact without touching real data or memory."""
from __future__ import annotations

import contextlib
import functools
import keyword

import linecache
import operator
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten
from torch.utils._python_dispatch import TorchDispatchMode

from ember.autograd.overlap import ORDER, check_writes, may_overlap

from ...emit import object_name
from ...errors import EmberError, Unsupported
from ..interpreter import UserException
from ..sources import Source
from ..values import NUMPY_SCALARS, Const, DictVar, ListVar, NotConst, OpaqueVar, TupleVar, Value

META = torch.device("meta")
_LEGACY_TENSOR_TYPE = type(torch.FloatTensor)     # torch.tensortype


class TensorVar(Value):
    """A tensor in the graph: ``node`` computes it, ``meta`` describes it, ``device`` is where it really lives."""
    __slots__ = ("node", "meta", "device", "cls", "sym")
    op_priority = 10

    def __init__(self, node: fx.Node, meta: torch.Tensor, device: torch.device, cls: type = torch.Tensor,
                 source: Source | None = None):
        super().__init__(source)
        self.node = node
        self.meta = meta            # at the call's sizes (the hints, where sizes are symbolic)
        self.device = device
        self.cls = cls
        self.sym = None             # symbolic sizes (int | sympy.Expr | None=unknown per dim); None: all static

    def python_type(self):
        return self.cls

    def instance_check(self, cls):
        # torch's legacy tensor types (torch.FloatTensor, torch.cuda.LongTensor...) are instance checks on dtype,
        # device type and layout, which a tensor's guards fix
        if type(cls) is _LEGACY_TENSOR_TYPE:
            dev = "cuda" if cls.is_cuda else "cpu"
            return cls.dtype == self.meta.dtype and self.device.type == dev and cls.is_sparse == self.meta.is_sparse
        return None

    def describe(self):
        return f"Tensor{tuple(self.meta.shape)} {str(self.meta.dtype).replace('torch.', '')} {self.device}"


def to_meta(t: torch.Tensor) -> torch.Tensor:
    m = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=META)
    if t.requires_grad:
        m.requires_grad_(True)
    return m


class TorchState:
    """Per-trace torch state: the graph, its inputs, and the grad/autocast modes at the current point."""

    def __init__(self) -> None:
        self.graph = fx.Graph()
        self.root = self.graph           # the captured graph; ``graph`` is a subgraph's while one is traced
        self.submodules: dict = {}       # get_attr name -> module of the graph being recorded (subgraph.py)
        self.inputs: list[tuple[Source, torch.Tensor, fx.Node]] = []
        self.grad_enabled = torch.is_grad_enabled()
        self.grad_observed = False      # the trace read or set a requires_grad (or what depends on it)
        self.records = None             # the entry's fastguard.Records, once a weight is checked by identity
        self.transforms: tuple[str, ...] = ()   # torch.func transforms whose function is being traced
        self.autocast: dict[str, tuple[bool, torch.dtype]] = {}
        for dev in ("cpu", "cuda"):
            try:
                self.autocast[dev] = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
            except (TypeError, AttributeError, RuntimeError):
                pass
        self.n_calls = 0
        self._names: set[str] = set()
        self.scalar_casts: dict = {}     # (scalar input node, dtype) -> its cast (ops.weak_floats)
        self.table = None                # the graph's ember.shapes.SymbolTable, once a size is symbolic
        self.size_nodes: dict = {}       # (tensor node, dim) -> the value of its symbolic size
        self.options = None              # the compile's CompileOptions (unbacked.py reads its capture_* flags)
        self.carriers: dict = {}         # unbacked symbol -> (TensorVar, dim or "item") that holds its value

    def placeholder(self, source: Source, real: torch.Tensor) -> fx.Node:
        hint = source.name_hint()
        base = "".join(c if c.isascii() and c.isalnum() else "_" for c in hint).strip("_") or "x"
        if base[0].isdigit():
            base = "t_" + base
        if base == "self" or keyword.iskeyword(base):   # `self` is the GraphModule's own forward parameter
            base += "_"
        name, i = base, 1
        while name in self._names:
            name, i = f"{base}_{i}", i + 1
        self._names.add(name)
        graph = self.root       # an input first read inside a subgraph is the root's (subgraph.py lifts it)
        if self.inputs:
            with graph.inserting_after(self.inputs[-1][2]):
                node = graph.placeholder(name)
        else:
            first = next(iter(graph.nodes), None)
            if first is not None:
                with graph.inserting_before(first):
                    node = graph.placeholder(name)
            else:
                node = graph.placeholder(name)
        self.inputs.append((source, real, node))
        return node

    def scalar_input(self, d, v) -> fx.Node:
        """A Python number handed over at a graph break (a ``.item()``), as a 0-dim tensor graph input (like
        torch.compile's unspecialized numbers: its value is not guarded, and any backend sees a tensor)."""
        from ..sources import Source
        for src, real, node in self.inputs:
            if getattr(src, "scalar_of", None) == v.source:
                return node
        t = torch.tensor(v.obj, dtype=scalar_dtype(v.obj))
        src = ScalarSource(v.source, t.dtype)
        # the graph (and a compiled kernel's signature) is specialized to this dtype: a number of another type
        # at this source (an int counter that later holds a float) needs another entry
        e = v.source.expr(d.cg)
        kind = type(v.obj)
        d.guards.add(f"type({e}) is {d.cg.bind(kind, kind.__name__)}",
                     f"{d.cg.plain(v.source)} is a {kind.__name__} (a {t.dtype} graph input)")
        node = self.placeholder(src, t)
        node.meta["example_value"] = to_meta(t)
        node.meta["ember_device"] = t.device
        _ = Source
        return node

    def autocast_dtype(self, device_type: str) -> torch.dtype | None:
        on, dt = self.autocast.get(device_type, (False, None))
        return dt if on else None


# -- converting values to node arguments and meta arguments ----------------------------------------------
def node_arg(d, f, v: Value) -> Any:
    t = type(v)
    if t is TensorVar:
        return v.node
    if t.__name__ in ("SymNumVar", "SymFloatVar"):
        return v.node
    if t is OpaqueVar and type(v.obj) in (float, int, bool):   # a number from outside the graph: a scalar input
        return d.torch.scalar_input(d, v)
    if t is Const:
        return _plain_const(v.value)
    if t is TupleVar:
        return tuple(node_arg(d, f, x) for x in v.items)
    if t is ListVar:
        return [node_arg(d, f, x) for x in v.items]
    if t is DictVar:
        return {k: node_arg(d, f, x) for k, x in v.items.items()}
    from ..symbolic import SliceVar
    if t is SliceVar:
        return slice(*[node_arg(d, f, p) for p in v.parts])
    try:
        return v.as_python()
    except NotConst:
        raise d.unsupported(f, f"passing a {v.describe()} to a torch operation") from None


def _plain_const(x: Any) -> Any:
    """A constant for a graph node: NumPy scalars in it (also inside a slice, a tuple or a list: ``x[:n]`` of an
    ``np.int64``) as ``_plain_number`` gives them."""
    if isinstance(x, NUMPY_SCALARS):
        return _plain_number(x)
    t = type(x)
    if t is slice:
        return slice(_plain_const(x.start), _plain_const(x.stop), _plain_const(x.step))
    if t in (tuple, list):
        return t(_plain_const(y) for y in x)
    return x


def _plain_number(x: Any) -> Any:
    """A NumPy scalar in a graph node becomes the Python number it holds where torch reads both alike; where
    not (``torch.tensor(np.float64(1))`` is float64, of a Python float the default dtype) it stays, and the
    graph's code names it as numpy prints it (``np.float64(1.0)``: ``np`` is one of FX's code globals)."""
    n = x.item()
    if torch.tensor(x).dtype == torch.tensor(n).dtype:
        return n
    _fx_knows_numpy()
    return x


@functools.lru_cache(None)
def _fx_knows_numpy() -> None:
    import numpy
    register = getattr(fx.graph, "_register_custom_builtin", None)
    if register is not None and "np" not in getattr(fx.graph, "_custom_builtins", {}):
        register("np", "import numpy as np", numpy)


def meta_arg(v: Value) -> Any:
    t = type(v)
    if t is TensorVar:
        return v.meta
    if t.__name__ in ("SymNumVar", "SymFloatVar"):
        return v.sym.node.hint      # the meta run is at the hints (symsize/propagate.py computes the symbols)
    if t is OpaqueVar:
        return torch.empty((), dtype=scalar_dtype(v.obj), device=META)
    if t is Const:
        return v.value
    if t is TupleVar:
        return tuple(meta_arg(x) for x in v.items)
    if t is ListVar:
        return [meta_arg(x) for x in v.items]
    if t is DictVar:
        return {k: meta_arg(x) for k, x in v.items.items()}
    from ..symbolic import SliceVar
    if t is SliceVar:
        return slice(*[meta_arg(p) for p in v.parts])
    return v.as_python()


def tensors_in(vals) -> list[TensorVar]:
    out = []

    def visit(v):
        t = type(v)
        if t is TensorVar:
            out.append(v)
        elif t in (TupleVar, ListVar):
            for x in v.items:
                visit(x)
        elif t is DictVar:
            for x in v.items.values():
                visit(x)
    for v in vals:
        visit(v)
    return out


def result_device(args: list[TensorVar], kwargs: dict) -> torch.device:
    dev = kwargs.get("device")
    if dev is not None:
        dv = dev.value if type(dev) is Const else None
        if dv is not None:
            return torch.device(dv) if not isinstance(dv, torch.device) else dv
    best = None
    for t in args:
        if best is None or (best.type == "cpu" and t.device.type != "cpu"):
            best = t.device
    if best is not None:
        return best
    try:
        return torch.get_default_device()
    except AttributeError:
        return torch.device("cpu")


def location_meta(f) -> dict:
    if f is None or f.cur is None:
        return {}
    line = f.cur.lineno or f.code.co_firstlineno
    src = linecache.getline(f.code.co_filename, line).strip()
    stack = "".join(f'  File "{fr.code.co_filename}", line {fr.cur.lineno if fr.cur else 0}, in {fr.code.co_name}\n'
                    for fr in _chain(f))
    return {"stack_trace": stack + f"    {src}\n", "ember_loc": f"{f.code.co_filename}:{line}",
            "ember_frames": f.user_frames()}


def _chain(f):
    out = []
    while f is not None:
        out.append(f)
        f = f.parent
    return out[::-1]


def wrap_result(d, f, st: TorchState, node: fx.Node, meta_out: Any, device: torch.device) -> Value:
    """Values for an op's (meta) result; tensors index into the node's output."""
    if isinstance(meta_out, torch.Tensor):
        node.meta["example_value"] = meta_out
        node.meta["ember_device"] = device
        return TensorVar(node, meta_out, device)
    if isinstance(meta_out, (tuple, list)) and any(isinstance(x, torch.Tensor) for x in meta_out):
        node.meta["example_value"] = meta_out
        items = []
        for i, x in enumerate(meta_out):
            if isinstance(x, torch.Tensor):
                n = st.graph.call_function(operator.getitem, (node, i))
                n.meta.update(node.meta)
                n.meta["example_value"] = x
                items.append(TensorVar(n, x, device))
            else:
                items.append(d.from_python(x))
        cls = type(meta_out) if type(meta_out) not in (tuple, list) else None
        if type(meta_out) is list:
            return ListVar(items)
        keep = cls is not None and (hasattr(cls, "_fields") or hasattr(cls, "n_fields"))
        return TupleVar(items, cls if keep else None)
    if meta_out is None or isinstance(meta_out, (bool, int, float, torch.dtype, torch.device, torch.Size, str)):
        return d.from_python(meta_out)
    if isinstance(meta_out, torch.Tensor.__bases__[0]) or type(meta_out).__module__.startswith("torch"):
        raise d.unsupported(f, f"a torch operation returned a {type(meta_out).__name__}, which ember cannot "
                               "trace", "call it outside the compiled function")
    return d.from_python(meta_out)


def run_meta(d, f, st: TorchState, fn, margs, mkwargs):
    """Run an op on meta tensors under the trace's grad mode; failures become Unsupported or user errors."""
    try:
        with torch.set_grad_enabled(st.grad_enabled), torch.device(META), _overlap_checks(margs, mkwargs):
            try:
                return fn(*margs, **mkwargs)
            except EmberError:      # ember's own (a graph break), also where it is a RuntimeError
                raise
            except (NotImplementedError, RuntimeError) as e:
                if not (_data_dependent(str(e)) and _scalar_params_only(fn)):
                    raise
                return fn(*_cpu_scalars(margs), **_cpu_scalars(mkwargs))
    except _OrderDependent as e:
        raise d.unsupported(f, f"{e.args[0]} writes memory that one of its inputs reads at other positions "
                               "(overlapping views of one tensor), so eager's result depends on the order its "
                               "loop visits the elements", "ember runs it eagerly (a graph break); clone() the "
                               "input to make the result well-defined") from None
    except EmberError:      # a graph break raised below stays one: not the program's error
        raise
    except (NotImplementedError, RuntimeError) as e:
        msg = str(e)
        low = msg.lower()
        if _data_dependent(msg):
            raise d.unsupported(f, f"{_name(fn)} depends on tensor values (data-dependent output)",
                                "keep the computation in tensors (e.g. masks with torch.where) or move it "
                                "outside the compiled function") from None
        if "meta" in low and ("not implemented" in low or "could not run" in low):
            raise d.unsupported(f, f"{_name(fn)} has no meta implementation, so ember cannot trace it") from None
        if "meta" in low:   # a check of the meta stand-ins' device (a foreach op's CPU scalars): run
            # natively, where a genuine error is raised again
            first = msg.splitlines()[0] if msg else ""
            raise d.unsupported(f, f"{_name(fn)} cannot run on ember's meta tensors ({first})",
                                "call it outside the compiled function") from None
        raise UserException(e) from None
    except Exception as e:      # noqa: BLE001 - a shape/dtype error is the program's own error
        raise UserException(e) from None


class _OrderDependent(Exception):
    """An in-place ATen op whose result depends on eager's loop order (``ember.autograd.overlap``)."""


class _OverlapMode(TorchDispatchMode):
    """Checks each ATen op that writes a tensor for overlap with its sources, as eager's kernels do: raises
    eager's error where eager raises one, ``_OrderDependent`` where eager's result depends on its loop order."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if check_writes(func, args, kwargs) == ORDER:
            raise _OrderDependent(str(func.overloadpacket.__name__))
        return func(*args, **kwargs)


def _overlap_checks(margs: Any, mkwargs: Any) -> Any:
    """The overlap checks, for an op whose tensor arguments share a storage or one of which has a stride-0
    dimension (so an op on tensors that cannot overlap pays one storage comparison per argument)."""
    tensors = [t for t in tree_flatten((margs, mkwargs))[0] if isinstance(t, torch.Tensor)]
    if not may_overlap(tensors):
        return contextlib.nullcontext()
    return _OverlapMode()


def _data_dependent(msg: str) -> bool:
    m = msg.lower()
    return any(s in m for s in ("data-dependent", "data dependent", "item()", "_local_scalar_dense", "nonzero",
                                "cannot be called on meta", "tensor.item", "on meta tensors", "meta tensor"))


# Ops whose 0-dim tensor arguments are bound as Scalars (their kernels call .item()) and whose outputs' shapes
# and dtypes never depend on those values: _foreach_lerp_(xs, ys, weight), _foreach_pow(base, xs),
# addcmul_(y, z, value=t). Their meta run gets real CPU stand-ins for the 0-dim meta tensors.
_SCALAR_PARAM_OPS = ("_foreach_", "addcmul", "addcdiv")


def _scalar_params_only(fn) -> bool:
    name = getattr(fn, "__name__", "") or ""
    return name.startswith(_SCALAR_PARAM_OPS)


def _cpu_scalars(args):
    """``args`` with each 0-dim meta tensor replaced by a CPU one of its dtype (value 1): the value the kernel
    reads is a stand-in, as the meta tensors are."""
    def swap(x):
        if isinstance(x, torch.Tensor) and x.is_meta and x.dim() == 0:
            return torch.ones((), dtype=x.dtype, device="cpu")
        if type(x) in (list, tuple):
            return type(x)(swap(y) for y in x)
        return x
    if isinstance(args, dict):
        return {k: swap(v) for k, v in args.items()}
    return [swap(a) for a in args]


def _name(fn) -> str:
    return object_name(fn)


_SCALAR_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64}


def scalar_dtype(x) -> torch.dtype:
    """The dtype of the 0-dim tensor that stands for a Python number in a graph: exact (a float is float64).
    Each use of a float casts it to the dtype eager computes with (``ops.weak_floats``), so type promotion
    stays eager's (``int_tensor * 0.5`` is float32) and a float64 program keeps every bit of the number."""
    return _SCALAR_DTYPES.get(type(x)) or torch.get_default_dtype()


def _as_scalar_tensor(x, dtype):
    return torch.tensor(x, dtype=dtype)


class ScalarSource(Source):
    """A Python number at ``scalar_of``, passed to the graph as a 0-dim tensor of ``dtype``: the dtype of the
    graph's example input for it, which compiled kernels are specialized to (an int read as float32 bits, or
    a float32 read through an ``int64_t*``, is garbage)."""
    __slots__ = ("scalar_of", "dtype")

    def __init__(self, scalar_of: Source, dtype: torch.dtype):
        self.scalar_of = scalar_of
        self.dtype = dtype

    def _expr(self, cg) -> str:
        return f"{cg.bind(_as_scalar_tensor, 'scalar_tensor')}({self.scalar_of.expr(cg)}, " \
               f"{cg.bind(self.dtype, 'dtype')})"

    def name_hint(self) -> str:
        return self.scalar_of.name_hint()

    def __eq__(self, other):
        return type(other) is ScalarSource and other.scalar_of == self.scalar_of

    def __hash__(self):
        return hash(("scalar", self.scalar_of))
