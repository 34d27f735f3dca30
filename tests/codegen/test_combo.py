"""Combo kernels (``ember.loopir.combo``, ``ember.codegen.triton_combo``): consecutive independent pointwise Triton
kernels launched as one, each part on its own program ids. Run here under ``TRITON_INTERPRET=1``, which runs a
grid's programs one after another: values are checked against eager, and the refusals (a part reading or
writing memory another part writes) structurally, since the interpreter would not show the race."""
from __future__ import annotations

import copy
import re

import torch

import ember.heuristics as H

from ember.options import make_options
from tests.autograd.test_no_grad_steps import _adam as adam_update  # the Adam-like update over many tensors

TRITON = make_options(None, {"cpu_backend": "triton"})


def _built(fn, args, options=TRITON):
    from ember.autograd.aot import aot_compile
    from ember.codegen import compile_graph
    built = []

    def hook(g, kind):
        built.append(compile_graph(g, kind, options))
        return built[-1]
    out = aot_compile(torch.fx.symbolic_trace(fn), args, decompose=True, compile_graph=hook)
    return out, built[0]




def _launches(src: str) -> int:
    return len(re.findall(r"^    .*\)  # ", src, re.MULTILINE))


def _adam_graph(monkeypatch, sizes: list, calls: int = 2):
    """The Adam-like update over tensors of ``sizes``, compiled by ``ember.compile`` (Triton, interpreted) and
    checked against eager after ``calls`` calls: its one compiled graph."""
    import ember
    import ember.backends.compiler as backend
    built = []
    real = backend.compile_graph

    def keep(gm, kind="inference", options=None):
        built.append(real(gm, kind, options))
        return built[-1]
    monkeypatch.setattr(backend, "compile_graph", keep)
    state = [[torch.randn(*s) for s in sizes], [torch.randn(*s) for s in sizes],
             [torch.zeros(*s) for s in sizes], [torch.rand(*s) for s in sizes]]
    ref = copy.deepcopy(state)
    f = ember.compile(adam_update, options={"cpu_backend": "triton"})
    for _ in range(calls):
        f(*state)
        adam_update(*ref)
    for got, want in zip(state, ref):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
    assert len(built) == 1
    return built[0]


def test_adam_update_over_many_tensors_takes_few_launches_and_equals_eager(monkeypatch):
    fn = _adam_graph(monkeypatch, [(64, 64), (256,), (128, 512), (7, 13), (0,), (3000,)] * 6)
    src = "\n".join([fn.source] + fn.kernel_sources)
    assert "combo kernel" in src, src
    assert _launches(fn.source) == 1, fn.source     # 30 nonempty updates in one combo


def _params(src: str) -> list[list[str]]:
    """Each ``@triton.jit`` kernel's parameter names (part functions left out), in order."""
    heads = re.findall(r"@triton\.jit\ndef (ember_\w+)\(([^)]*)\)", src)
    return [[p.strip() for p in params.split(",")] for _, params in heads]


def test_an_update_in_place_takes_one_pointer_per_tensor():
    """A value stored in place into the input it reads is one kernel parameter, not two (the wrapper binds both
    names to one tensor): fewer arguments per launch, more parts per combo."""
    def step(p, m, g):
        with torch.no_grad():
            m.mul_(0.9).add_(g)
            p.add_(m, alpha=-0.1)
    p, m, g = (torch.randn(64, 64) for _ in range(3))
    ref = copy.deepcopy((p, m, g))
    out, fn = _built(step, [p, m, g])
    out(p, m, g)
    step(*ref)
    torch.testing.assert_close((p, m), ref[:2])
    (params,) = _params("\n".join(fn.kernel_sources))
    assert len(params) == 3, fn.kernel_sources       # p, m, g: the new p and m are stored through p and m


def test_a_120_tensor_adam_update_is_one_launch_within_cudas_parameter_space(monkeypatch):
    """Shared pointers bring an Adam update to 4 parameters per tensor: 120 tensors fit in one combo kernel,
    under the 4 KB of parameters CUDA takes (512 pointers, two of them Triton's)."""
    from ember.loopir import combo
    fn = _adam_graph(monkeypatch, [(64, 64), (256,), (128, 512)] * 40, calls=1)
    assert _launches(fn.source) == 1, fn.source
    (params,) = _params("\n".join(fn.kernel_sources))
    assert len(params) == 480 <= H.DEFAULT.combo_max_args < 510


def transposed_reader(x):
    y = x * 2
    return y.t() + 1, y          # the second kernel reads y at other points than the first computes


def test_a_kernel_reading_another_ones_output_is_not_its_part():
    x = torch.randn(64, 64)
    out, fn = _built(transposed_reader, [x])
    assert "combo kernel" not in "\n".join(fn.kernel_sources), fn.source
    torch.testing.assert_close(out(x)[0], transposed_reader(x)[0])


def read_then_mutated(x):
    a = x[:32] * 2               # reads x (2048 points) ...
    x.mul_(3)                     # ... then x's new value is stored into x (4096 points)
    return a


def test_a_part_may_not_write_memory_an_earlier_part_reads():
    """Alone, the mutation stores into ``x`` (the kernel reading ``x`` is done by then); as parts of one launch
    the two would race, so they stay two launches."""
    x = torch.randn(64, 64)
    out, fn = _built(read_then_mutated, [x.clone()])
    assert "new value stored in place" in fn.source, fn.source
    assert "combo kernel" not in "\n".join(fn.kernel_sources), fn.source
    got_x, want_x = x.clone(), x.clone()
    got = out(got_x)
    torch.testing.assert_close(got[0] if isinstance(got, (tuple, list)) else got, read_then_mutated(want_x))
    torch.testing.assert_close(got_x, want_x)


def test_combine_refuses_parts_sharing_written_memory():
    """``combine`` directly on three independent kernels: together they are one combo; when the third stores
    (in place) into the memory the first reads, the first two are a combo and the third a step of its own, and
    every buffer is still freed once."""
    from ember.autograd.aot import aot_compile
    from ember.loopir.combo import Combo, combine
    from ember.loopir.lower import lower
    from ember.loopir.schedule import Kernel, schedule

    def f(x, y, z):
        return x[:32] * 2, y + 1, z * 3
    graphs = []

    def hook(g, kind):
        graphs.append(g)
        return g
    aot_compile(torch.fx.symbolic_trace(f), [torch.randn(64, 64), torch.randn(100), torch.randn(64, 64)],
                decompose=True, compile_graph=hook)
    sched = schedule(lower(graphs[0], "g"), spread={torch.device("cpu")})
    kernels = [s for s in sched.steps if isinstance(s, Kernel)]
    assert [k.xnumel for k in kernels] == [2048, 100, 4096], sched.python()
    plain = combine(sched, {}, lambda k: True)
    assert len(plain.steps) == 1 and isinstance(plain.steps[0], Combo) and plain.steps[0].parts == kernels
    clash = combine(sched, {kernels[2].stores[0]: kernels[0].reads[0]}, lambda k: True)
    assert len(clash.steps) == 2 and clash.steps[0].parts == kernels[:2] and clash.steps[1] is kernels[2], \
        clash.python()
    assert sorted(b for fr in clash.frees for b in fr) == sorted(b for fr in sched.frees for b in fr)
    none = combine(sched, {}, lambda k: k is not kernels[1])     # not eligible: breaks the run
    assert not any(isinstance(s, Combo) for s in none.steps), none.python()


def test_an_aten_call_between_parts_moves_before_the_combo_and_what_it_frees_dies_after():
    """A fresh ATen call between two parts, reading what the first part reads, goes before the combo; the buffer
    whose last reader it was is freed after the combo (the first part still reads it there). One reading what
    the first part writes ends the run instead."""
    from ember.autograd.aot import aot_compile
    from ember.loopir.combo import Combo, combine
    from ember.loopir.ir import BufferRef, Extern
    from ember.loopir.lower import lower
    from ember.loopir.schedule import Schedule, schedule

    def f(x, y, z):
        return x[:32] * 2, y + 1, z * 3
    graphs = []
    aot_compile(torch.fx.symbolic_trace(f), [torch.randn(64, 64), torch.randn(100), torch.randn(64, 64)],
                decompose=True, compile_graph=lambda g, kind: graphs.append(g) or g)
    sched = schedule(lower(graphs[0], "g"), spread={torch.device("cpu")})
    k0, k1, k2 = sched.steps
    x = k0.reads[0]
    lay = sched.graph.node(x).layout
    mm = Extern("mm0", lay, torch.mm, (BufferRef(x, lay), BufferRef(x, lay)), fresh=True, op="mm")
    steps = Schedule(sched.graph, [k0, mm, k1, k2], [[], ["dying"], [], []], [])
    out = combine(steps, {}, lambda k: True)
    assert [type(s) for s in out.steps] == [Extern, Combo] and out.steps[1].parts == [k0, k1, k2], out.python()
    assert out.frees == [[], ["dying"]]
    reads_k0_output = Extern("mm1", lay, torch.mm, (BufferRef(k0.stores[0], lay),), fresh=True, op="mm")
    out = combine(Schedule(sched.graph, [k0, reads_k0_output, k1, k2], [[], [], [], []], []), {}, lambda k: True)
    assert out.steps[:2] == [k0, reads_k0_output] and out.steps[2].parts == [k1, k2], out.python()


def two_updates(p, g, q, h):
    return p - 0.1 * g, q - 0.1 * h


def test_cpp_kernels_are_not_combined():
    args = [torch.randn(64, 64), torch.randn(64, 64), torch.randn(300), torch.randn(300)]
    _, fn = _built(two_updates, args, make_options(None, {}))
    assert "combo" not in fn.source
    _, fn = _built(two_updates, args)
    assert "combo" in fn.source, fn.source


def unfold_then_update(p, g):
    windows = p.unfold(0, 4, 2) * 3     # reads p through an ATen view (unfold is not a fresh tensor)
    p.add_(g)                           # p's new value is stored into p
    return windows


def test_a_part_may_not_write_memory_another_reads_through_an_aten_view():
    """``unfold`` returns a view of ``p`` under another name: the kernel reading that view and the update
    stored into ``p`` may not run side by side (found in review: they were one combo)."""
    p, g = torch.randn(64), torch.randn(64)
    out, fn = _built(unfold_then_update, [p.clone(), g])
    assert "new value stored in place" in fn.source, fn.source
    assert "combo kernel" not in "\n".join(fn.kernel_sources), fn.source
    got_p, want_p = p.clone(), p.clone()
    got = out(got_p, g)
    torch.testing.assert_close(got[0] if isinstance(got, (tuple, list)) else got, unfold_then_update(want_p, g))
    torch.testing.assert_close(got_p, want_p)


def view_read_after_its_base_dies(a, b):
    d = torch.mm(a, b)
    e = d.unfold(1, 4, 2)          # an ATen view of d, read after d's last use by name
    z = d + 1
    w = e * 3
    return z, w


def test_a_buffer_an_aten_view_reads_later_is_not_written_over():
    """``reused_buffers`` let ``z`` take ``d``'s memory (``d`` dies by name at ``z``), while ``e``, a view of
    ``d``, was read after: wrong values even run in order (found in review; older than combos)."""
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    out, _ = _built(view_read_after_its_base_dies, [a, b])
    for got, want in zip(out(a, b), view_read_after_its_base_dies(a, b)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_parts_are_on_one_device():
    from ember.autograd.aot import aot_compile
    from ember.loopir.combo import Combo, combine
    from ember.loopir.lower import lower
    from ember.loopir.schedule import schedule

    def f(x, y):
        return x * 2, y + 1
    graphs = []
    aot_compile(torch.fx.symbolic_trace(f), [torch.randn(4096), torch.randn(4096, device="meta")],
                decompose=True, compile_graph=lambda g, kind: graphs.append(g) or g)
    sched = schedule(lower(graphs[0], "g"), spread={torch.device("cpu"), torch.device("meta")})
    assert not any(isinstance(s, Combo) for s in combine(sched, {}, lambda k: True).steps)


def test_a_graph_with_kernels_for_two_backends_compiles(monkeypatch):
    """A graph holding CUDA and CPU tensors compiles kernels for two backends (found in review: the second
    backend's bodies failed, a loop variable shadowing the function making them). Simulated here: ``meta``
    kernels as Triton's (built, never run), CPU ones on the Python backend."""
    import ember.codegen as cg
    import ember.codegen.triton as tr
    from ember.autograd.aot import aot_compile

    def f(x, y):
        return x * 2, y + 1
    graphs = []
    aot_compile(torch.fx.symbolic_trace(f), [torch.randn(4096), torch.randn(4096, device="meta")],
                decompose=True, compile_graph=lambda g, kind: graphs.append(g) or g)
    monkeypatch.setattr(cg.passes, "kernel_backend", lambda dev, options: "triton" if dev.type == "meta" else "python")
    monkeypatch.setattr(tr, "compile_kernels", lambda bodies, options=None, name="": [lambda *t: None] * len(bodies))
    monkeypatch.setattr(tr, "source", lambda body: "")
    fn = cg.compile_graph(graphs[0], "inference", make_options(None, {"cpu_backend": "python"}))
    assert callable(fn)


def flipped_view_then_update(p):
    q = torch.as_strided(p, (64,), (1,))    # an ATen view of p under another name
    r = q.flip(0) * 3                        # read at other points than p's update stores ...
    p.mul_(2)                                # ... in the same kernel
    return r


def test_an_update_is_not_stored_in_place_where_its_kernel_reads_a_view_of_the_input_elsewhere():
    """``inplace_stores`` follows ATen views: the kernel computing ``p``'s new value also reads ``q``, a view of
    ``p``, at mirrored points, so storing into ``p`` would race with those reads (found after review)."""
    p = torch.randn(64)
    out, fn = _built(flipped_view_then_update, [p.clone()])
    assert "new value stored in place" not in fn.source, fn.source
    got_p, want_p = p.clone(), p.clone()
    got = out(got_p)
    torch.testing.assert_close(got[0] if isinstance(got, (tuple, list)) else got, flipped_view_then_update(want_p))
    torch.testing.assert_close(got_p, want_p)
