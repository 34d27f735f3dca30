"""Graphs that mix devices. A compiled graph that multiplied CUDA inputs by a CPU mask made inside the function
(``torch.ones(t, t)``) crashed the process: ember handed the CUDA memory to a C++ kernel. Eager refuses such
ops ("Expected all tensors to be on the same device"), except with a 0-dim CPU tensor, a scalar.

- The lowering refuses a kernel that would compute on a device without a kernel backend (``meta``) or read a
  buffer of another device, and a prim whose operands are on two devices: the graph then runs as an FX graph,
  whose ATen calls raise eager's error at call time (``loopir.lower.check_devices``).
- A 0-dim CPU input next to CUDA tensors stays a scalar (the wrapper copies it to the kernel's device).
- Codegen picks each kernel's backend from its device and checks, once per compile, that a kernel only gets
  buffers of its device (``codegen.passes.check_kernel_devices``).

No GPU here: the graph-level tests lower prim graphs whose metadata says ``cuda`` (lowering needs no data); the
end-to-end tests mix ``meta`` with CPU tensors, the same decision on a device without kernels. Not covered here:
running a CUDA graph with a 0-dim CPU scalar (tests/gpu).
"""
from __future__ import annotations

import pytest
import torch
import torch.fx as fx

import ember
from ember.codegen.passes import check_kernel_devices, kernel_backend
from ember.decomp.core import PRIMS
from ember.decomp.meta import TensorMeta
from ember.errors import InternalError
from ember.loopir.ir import InputBuffer, Pointwise
from ember.loopir.lower import LoweringError, check_devices, lower

F32 = torch.float32
CUDA, CPU, META = torch.device("cuda", 0), torch.device("cpu"), torch.device("meta")


def _meta(shape, device):
    stride = tuple(int(torch.empty(shape, device="meta").stride()[i]) for i in range(len(shape)))
    return TensorMeta(tuple(shape), F32, device, stride)


def _graph(inputs, body):
    """An FX graph of prims: ``inputs`` is [(name, shape, device)], ``body(g, phs)`` returns the output node."""
    g = fx.Graph()
    phs = []
    for name, shape, dev in inputs:
        p = g.placeholder(name)
        p.meta["val"] = _meta(shape, dev)
        phs.append(p)
    out = body(g, phs)
    g.output((out,))
    return fx.GraphModule(torch.nn.Module(), g)


def _call(g, prim, args, shape, dev):
    n = g.call_function(PRIMS[prim], tuple(args))
    n.meta["val"] = _meta(shape, dev)
    return n


def mul_by_scalar(g, p):            # x_cuda * torch.tensor(2.5): the scalar is broadcast first
    b = _call(g, "broadcast_in_dim", (p[1], (3, 3), ()), (3, 3), CPU)
    return _call(g, "mul", (p[0], b), (3, 3), CUDA)


def mul_by_cast_scalar(g, p):
    c = g.call_function(PRIMS["convert_element_type"], (p[1], F32))
    c.meta["val"] = _meta((), CPU)
    b = _call(g, "broadcast_in_dim", (c, (3, 3), ()), (3, 3), CPU)
    return _call(g, "mul", (p[0], b), (3, 3), CUDA)


def mul_by_cpu_mask(g, p):          # x_cuda * torch.ones(3, 3): eager refuses
    return _call(g, "mul", (p[0], p[1]), (3, 3), CUDA)


def add_cpu_row(g, p):              # a broadcast CPU row is not a scalar
    b = _call(g, "broadcast_in_dim", (p[1], (3, 3), (1,)), (3, 3), CPU)
    return _call(g, "add", (p[0], b), (3, 3), CUDA)


def exp_on_meta(g, p):              # no kernel backend for meta
    return _call(g, "exp", (p[0],), (3, 3), META)


def cpu_mul_of_cuda_scalar(g, p):   # a 0-dim CUDA tensor is no scalar for a CPU op
    b = _call(g, "broadcast_in_dim", (p[1], (3, 3), ()), (3, 3), CUDA)
    return _call(g, "mul", (p[0], b), (3, 3), CPU)


GRAPHS = [
    ("mul_by_scalar", [("x", (3, 3), CUDA), ("s", (), CPU)], mul_by_scalar, None),
    ("mul_by_cast_scalar", [("x", (3, 3), CUDA), ("s", (), CPU)], mul_by_cast_scalar, None),
    ("mul_by_cpu_mask", [("x", (3, 3), CUDA), ("m", (3, 3), CPU)], mul_by_cpu_mask, "mixes tensors on devices"),
    ("add_cpu_row", [("x", (3, 3), CUDA), ("r", (3,), CPU)], add_cpu_row, "mixes tensors on devices"),
    ("exp_on_meta", [("x", (3, 3), META)], exp_on_meta, "no kernel backend"),
    ("cpu_mul_of_cuda_scalar", [("x", (3, 3), CPU), ("s", (), CUDA)], cpu_mul_of_cuda_scalar,
     "mixes tensors on devices"),
]


def _has_kernels(dev):
    return kernel_backend(dev, None) is not None


@pytest.mark.parametrize("name,inputs,body,error", GRAPHS, ids=[g[0] for g in GRAPHS])
def test_lowering_device_decision(name, inputs, body, error):
    gm = _graph(inputs, body)
    if error is None:
        graph = lower(gm, name)
        check_devices(graph, _has_kernels)
        kernels = [n for n in graph.nodes if isinstance(n, Pointwise)]
        assert kernels and all(n.device == CUDA for n in kernels)
        scalars = [n for n in graph.nodes if isinstance(n, InputBuffer) and n.device == CPU]
        assert all(len(n.layout.shape) == 0 for n in scalars)
        return
    with pytest.raises(LoweringError, match=error):
        check_devices(lower(gm, name), _has_kernels)


def test_kernel_backend_per_device():
    assert kernel_backend(CUDA, None) == "triton"
    assert kernel_backend(CPU, None) == "cpp"
    assert kernel_backend(META, None) is None
    assert kernel_backend(torch.device("mps"), None) is None


def test_kernel_given_another_devices_buffer_is_refused():
    """The compile-time check behind every kernel: a CPU kernel whose buffer is CUDA memory is an internal
    error, caught before any kernel runs (here forged, since the lowering no longer produces one)."""
    graph = lower(_graph([("x", (3, 3), CPU), ("s", (), CPU)], lambda g, p: _call(
        g, "mul", (p[0], _call(g, "broadcast_in_dim", (p[1], (3, 3), ()), (3, 3), CPU)), (3, 3), CPU)), "ok")
    kernel = next(n for n in graph.nodes if isinstance(n, Pointwise))

    class Body:         # what check_kernel_devices reads of a KernelBody
        def __init__(self, buffers):
            self.kernel = type("K", (), {"device": CPU, "name": "kernel0"})()
            self.buffers = buffers
    check_kernel_devices(graph, [Body({n.name: None for n in graph.nodes})])
    cuda_input = next(n for n in graph.nodes if isinstance(n, InputBuffer) and n.layout.shape)
    object.__setattr__(cuda_input, "layout", _layout_on(cuda_input.layout, CUDA))
    with pytest.raises(InternalError, match="on cuda"):
        check_kernel_devices(graph, [Body({cuda_input.name: None, kernel.name: None})])


def _layout_on(layout, device):
    from dataclasses import replace
    return replace(layout, device=device)


# -- end to end, with meta tensors (a device without kernels) next to CPU ones ----------------------------------
def mask_made_inside(x):            # eager raises
    m = torch.ones(x.shape[0], x.shape[0])
    return (x * m).sum(0)


def meta_made_inside(x):            # eager raises
    return x * torch.ones(3, 3, device="meta")


def moved_to_meta(x):
    return (x.to("meta") + 1) * 2


def meta_times_scalar_constant(x):
    return x * torch.tensor(2.5) + 1


def meta_plus_cpu_input(x, y):      # eager raises
    return x + y


def meta_times_scalar_input(x, y):
    return x * y + 1


def meta_reduction(x):
    return (x.exp() + 1).sum(0) * 3


END_TO_END = [
    (mask_made_inside, lambda: (torch.randn(3, 3, device="meta"),)),
    (meta_made_inside, lambda: (torch.randn(3, 3),)),
    (moved_to_meta, lambda: (torch.randn(3, 3),)),
    (meta_times_scalar_constant, lambda: (torch.randn(3, 3, device="meta"),)),
    (meta_plus_cpu_input, lambda: (torch.randn(3, 3, device="meta"), torch.randn(3, 3))),
    (meta_times_scalar_input, lambda: (torch.randn(3, 3, device="meta"), torch.tensor(2.0))),
    (meta_reduction, lambda: (torch.randn(4, 3, device="meta"),)),
]


def _outcome(fn, args):
    try:
        r = fn(*args)
    except RuntimeError as e:
        return ("raised", str(e))
    return ("ok", r.device, tuple(r.shape), r.dtype)


@pytest.mark.parametrize("fn,make", END_TO_END, ids=[f.__name__ for f, _ in END_TO_END])
def test_meta_next_to_cpu_like_eager(fn, make):
    ember.reset()
    assert _outcome(ember.compile(fn), make()) == _outcome(fn, make())


# -- a 0-dim CPU value computed in the graph, read by a CUDA kernel --------------------------------------------
# Eager takes any 0-dim CPU tensor as a scalar operand of a CUDA op (``x_cuda * y_cpu.sum()``,
# ``x_cuda * y_cpu[1, 2]``), not only a graph input: such a graph used to run as an FX graph (``check_devices``
# refused a CUDA kernel reading a computed CPU buffer; a CPU view inlined into the CUDA kernel read a whole CPU
# matrix). Now the value is stored in its own 0-dim CPU buffer by a CPU kernel, and the wrapper hands the CUDA
# kernel a device copy made after that step. No GPU here: the whole pipeline runs on the fake tensors' metadata
# (C++ builds the CPU kernel, Triton's interpreter the CUDA one), the wrapper's source is checked, and it runs
# with its CUDA device bound to the CPU; running it on CUDA is
# tests/gpu/test_ember_triton.py::test_computed_cpu_scalar_feeding_a_kernel.
def _scalar(g, n):
    return _call(g, "broadcast_in_dim", (n, (3, 3), ()), (3, 3), CPU)


def mul_by_cpu_sum(g, p):           # x_cuda * y_cpu.sum()
    s = _call(g, "sum", (p[1], (0, 1)), (), CPU)
    return _call(g, "mul", (p[0], _scalar(g, s)), (3, 3), CUDA)


def mul_by_cpu_element(g, p):       # x_cuda * y_cpu[1, 2]: a view of a CPU matrix
    a = _call(g, "slice", (p[1], 0, 1, 2), (1, 3), CPU)
    b = _call(g, "slice", (a, 1, 2, 3), (1, 1), CPU)
    e = _call(g, "reshape", (b, ()), (), CPU)
    return _call(g, "mul", (p[0], _scalar(g, e)), (3, 3), CUDA)


def mul_by_exp_of_cpu_element(g, p):    # x_cuda * y_cpu[0, 0].exp()
    a = _call(g, "slice", (p[1], 0, 0, 1), (1, 3), CPU)
    b = _call(g, "slice", (a, 1, 0, 1), (1, 1), CPU)
    e = _call(g, "exp", (_call(g, "reshape", (b, ()), (), CPU),), (), CPU)
    return _call(g, "mul", (p[0], _scalar(g, e)), (3, 3), CUDA)


def add_cpu_mean_twice(g, p):       # the CPU sum feeds two CUDA kernels' expressions (one copy)
    s = _call(g, "sum", (p[1], (0, 1)), (), CPU)
    m = _call(g, "mul", (p[0], _scalar(g, s)), (3, 3), CUDA)
    r = _call(g, "sum", (m, (1,)), (3,), CUDA)
    t = _call(g, "broadcast_in_dim", (r, (3, 3), (0,)), (3, 3), CUDA)
    return _call(g, "add", (t, _scalar(g, s)), (3, 3), CUDA)


COMPUTED_SCALARS = [mul_by_cpu_sum, mul_by_cpu_element, mul_by_exp_of_cpu_element, add_cpu_mean_twice]


@pytest.mark.parametrize("body", COMPUTED_SCALARS, ids=[f.__name__ for f in COMPUTED_SCALARS])
def test_computed_cpu_scalar_is_a_kernel_operand(body):
    from ember.codegen.passes import GraphCompile, run_pipeline
    from ember.codegen.wrapper import CompiledGraph
    from ember.options import CompileOptions
    gm = _graph([("x", (3, 3), CUDA), ("y", (3, 3), CPU)], body)
    graph = lower(gm, body.__name__)
    check_devices(graph, _has_kernels)      # raised LoweringError: the graph ran as an FX graph
    names = {n.name: n for n in graph.nodes}
    for n in graph.nodes:
        if hasattr(n, "body") and n.device == CUDA:     # a CUDA kernel reads CUDA memory or a 0-dim CPU buffer
            for r in n.reads():
                assert names[r].device == CUDA or (names[r].device == CPU and not names[r].layout.shape), (n, r)
    st = GraphCompile(gm, "inference", CompileOptions())
    result = run_pipeline(st)
    assert isinstance(result, CompiledGraph), "ran as an FX graph"
    lines = result.source.splitlines()
    copies = [i for i, ln in enumerate(lines) if "_on_cuda0 = " in ln and ".to(" in ln]
    assert len(copies) == 1, result.source
    copied = lines[copies[0]].split("=")[1].split(".to(")[0].strip()
    made = next(i for i, ln in enumerate(lines) if f"# {copied}=" in ln)    # the CPU kernel storing it
    launches = [i for i, ln in enumerate(lines) if f"{copied}_on_cuda0" in ln and i != copies[0]]
    assert launches and made < copies[0] < min(launches), result.source
    # run it with the wrapper's CUDA device bound to the CPU (the Triton kernel runs in the interpreter):
    # the values of the prim graph run by ATen
    for k, v in list(result.__globals__.items()):
        if isinstance(v, torch.device) and v.type == "cuda":
            result.__globals__[k] = CPU
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    torch.testing.assert_close(result(x, y)[0], gm(x, y)[0])
