"""The scheduler's order (ember.loopir.schedule): matmuls move up to just after their inputs (``_hoisted``) and
a kernel moves down past matmuls it does not feed (``_sink``), so that a node reading a matmul's result joins
the kernel reading what it reads (attention's softmax backward and the cast of the probabilities for the other
bmm, in BERT's backward). Compiled results equal eager."""
from __future__ import annotations

import dataclasses

import pytest
import sympy
import torch

import ember.heuristics as H
import torch.nn.functional as F

import ember
from ember.autograd.aot import decompose_graph
from ember.loopir import lower as lower_mod
from ember.loopir.ir import Extern, Pointwise
from ember.loopir.schedule import Kernel, schedule

from .backends import CPU_BACKENDS


def _schedule(fn, *args):
    from ember.autograd.trace import trace_aten
    return schedule(lower_mod.lower(decompose_graph(trace_aten(fn, args, training=False).gm), "graph"))


def _softmax_backward_like(p, a, c):
    """The order of BERT's attention backward: a cast of the probabilities ``p`` for one bmm, whose other
    operand is computed first, then the gradient bmm from kernels computed after it, then a reduction reading
    that bmm and ``p`` (the softmax backward)."""
    p16 = p.to(torch.bfloat16)
    b16 = (a * 2).to(torch.bfloat16)
    e1 = torch.bmm(p16, b16)
    c16 = (c * 3).to(torch.bfloat16)
    e2 = torch.bmm(b16, c16).float()
    r = e2 * p
    return e1, r - p * r.sum(-1, keepdim=True)


def _args():
    return torch.rand(4, 32, 32), torch.randn(4, 32, 16), torch.randn(4, 16, 32)


def test_reduction_reading_a_late_matmul_joins_the_kernel_reading_its_input():
    s = _schedule(_softmax_backward_like, *_args())
    kernels = [k for k in s.steps if isinstance(k, Kernel)]
    readers = [k.name for k in kernels if "arg0" in k.reads]
    assert len(readers) == 1, s.python()        # the cast and the softmax-backward-like reduction
    # the order stays valid: every step reads only what earlier steps made
    made = {"arg0", "arg1", "arg2"}
    for k in s.steps:
        reads = set(k.reads) if isinstance(k, Kernel) else k.reads()
        assert reads <= made, (k, s.python())
        made |= {n.name for n in k.nodes} if isinstance(k, Kernel) else {k.name}


def test_reordered_graph_matches_eager():
    args = _args()
    got, want = ember.compile(_softmax_backward_like)(*args), _softmax_backward_like(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)


def test_matmul_on_inputs_moves_up_but_not_past_another_aten_call():
    from ember.loopir.ir import InputBuffer, Layout
    from ember.loopir.schedule import _hoisted
    lay = Layout.contiguous((4, 4), torch.float32, torch.device("cpu"))
    a, b = InputBuffer("arg0", lay, 0), InputBuffer("arg1", lay, 1)
    side = Extern("buf0", lay, torch.ops.aten.add.Tensor, (), {})          # not a fresh matmul: a fence
    from ember.loopir.ir import BufferRef
    mm = Extern("buf1", lay, torch.ops.aten.mm.default, (BufferRef("arg0", lay), BufferRef("arg1", lay)), {},
                fresh=True, op="mm")
    from ember.loopir.expr import Load
    pw = Pointwise("buf2", lay, (4, 4), Load("arg0", sympy.Integer(0), torch.float32))
    assert [n.name for n in _hoisted([a, b, pw, mm])] == ["arg0", "arg1", "buf1", "buf2"]
    assert [n.name for n in _hoisted([a, b, side, pw, mm])] == ["arg0", "arg1", "buf0", "buf1", "buf2"]


@pytest.fixture
def row_tiled_on_cpu(monkeypatch):
    import ember.loopir.schedule as S
    monkeypatch.setattr(S, "ROW_TILED_DEVICES", {"cuda", "cpu"})
    monkeypatch.setattr(H, "DEFAULT", dataclasses.replace(H.DEFAULT, row_tiled_min=64))


def _ce_grad(h, w, y):
    return F.cross_entropy(h @ w.t(), y)


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@pytest.mark.parametrize("classes", [100, 5001])       # a persistent and a looped row
def test_long_odd_rows_run_row_tiled(cpu_backend, classes, row_tiled_on_cpu):
    """Cross-entropy's backward over odd-length rows of classes is one (rows, columns) kernel (on CUDA for rows
    of 4096 and more): each row's values are loaded once per row, not gathered by a flat index divided by the
    row length. Values and gradients equal eager's on every CPU backend."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(16, 16, generator=g, requires_grad=True)
    w = torch.randn(classes, 16, generator=g, requires_grad=True)
    y = torch.randint(0, classes, (16,), generator=g)
    y[3] = -100
    ember.reset()
    got = ember.compile(_ce_grad, options={"cpu_backend": cpu_backend})(h, w, y)
    want = _ce_grad(h, w, y)
    torch.testing.assert_close(got, want)
    for a, b in zip(torch.autograd.grad(got, (h, w)), torch.autograd.grad(want, (h, w))):
        torch.testing.assert_close(a, b)
    gm = torch.fx.symbolic_trace(_ce_grad)
    from ember.autograd.aot import aot_compile
    from ember.codegen import compile_graph
    scheds = []

    def hook(gr, kind):
        if kind == "backward":
            scheds.append(schedule(lower_mod.lower(gr, "backward")))
        return compile_graph(gr, kind, None)
    aot_compile(gm, [h, w, y], decompose=True, compile_graph=hook)(h, w, y).backward()
    big = [k for k in scheds[0].steps if isinstance(k, Kernel) and k.xnumel * k.rnumel >= 16 * classes]
    assert big and all((k.xnumel, k.rnumel) == (16, classes) for k in big), scheds[0].python()


def test_large_nodes_sharing_only_a_small_input_stay_apart():
    """Large nodes join a kernel for reading the same input only when that input is large too (a fraction of
    their points): sharing a small one (the encoder's padding mask, read by one layer's softmax backward and by
    the recomputation of another layer's probabilities) saves no memory pass. Small nodes still share a launch."""
    from ember.loopir import schedule as sched

    def small_shared(a, b, m):
        return (a * m).exp(), (b + m).sin()

    def big_shared(a, b, m):
        return (a * m).exp(), (a + b).sin()

    def kernels(fn, rows):
        args = (torch.randn(rows, 256), torch.randn(rows, 256), torch.randn(256))
        got, want = ember.compile(fn)(*args), fn(*args)
        for x, y in zip(got, want):
            torch.testing.assert_close(x, y)
        return [k for k in _schedule(fn, *args).steps if isinstance(k, Kernel)]
    rows = 4 * H.DEFAULT.horizontal_max_numel // 256
    assert len(kernels(small_shared, rows)) == 2
    assert len(kernels(big_shared, rows)) == 1
    assert len(kernels(small_shared, 16)) == 1


def _channel_sum_and_pointwise(g, x, y):
    """A per-channel sum and a pointwise value reading the same channels-last gradient (a downsample block's
    batch norm sums and the other branch's input gradient)."""
    return (g * x).sum((0, 2, 3)), g * y + 1


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_channels_last_pointwise_stays_out_of_a_per_channel_reduction(cpu_backend):
    """The pointwise value would sit on the per-channel reduction's rows in flat order while the sums read across
    rows: neither runs contiguously (9.6-11 ms against about 2 ms for the sums alone, on the CPU). It gets a
    kernel of its own; a contiguous one over the same rows still joins a row reduction."""
    args = [torch.randn(4, 16, 12, 12).to(memory_format=torch.channels_last) for _ in range(3)]
    kernels = [k for k in _schedule(_channel_sum_and_pointwise, *args).steps if isinstance(k, Kernel)]
    assert len(kernels) == 2 and all(len(k.nodes) == 1 for k in kernels), [k.fused() for k in kernels]
    got = ember.compile(_channel_sum_and_pointwise, options={"cpu_backend": cpu_backend})(*args)
    for a, b in zip(got, _channel_sum_and_pointwise(*args)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)

    def rows(g, x, y):
        return (g * x).sum(-1), g * y + 1
    flat = [torch.randn(64, 128) for _ in range(3)]
    kernels = [k for k in _schedule(rows, *flat).steps if isinstance(k, Kernel)]
    assert len(kernels) == 1, [k.fused() for k in kernels]
