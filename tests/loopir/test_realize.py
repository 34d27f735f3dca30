"""Which values the lowering stores (ember.loopir.lower): a value with several users is recomputed by each of
them unless recomputing costs more than a memory pass, and one that is stored is stored in its narrowest exact
dtype (a 16-bit value before its float32 upcast, a byte before its int64 widening)."""
from __future__ import annotations

import pytest
import torch

from ember.autograd.aot import decompose_graph
from ember.loopir import lower as lower_mod
from ember.loopir.ir import Pointwise

from .backends import CPU_BACKENDS

# the reuse policy that recomputes what the default one stores (measured slower on an H100; its paths tested here)
RECOMPUTE = lower_mod.ReusePolicy(expensive_stored=False, count_broadcast_reads=False)


def _lowered(fn, *args):
    from ember.autograd.trace import trace_aten
    gm = decompose_graph(trace_aten(fn, args, training=False).gm)
    return lower_mod.lower(gm, "graph")


def _stored(graph) -> list:
    return [n for n in graph.nodes if isinstance(n, Pointwise) and n.name not in graph.output_names()]


def test_cheap_value_with_two_users_is_recomputed():
    def f(x, m):
        y = ((x - m) * 0.5).abs() + 1       # used by a reduction and by a pointwise: recomputed by both
        return y.sum(0), y * y
    g = _lowered(f, torch.randn(64, 32), torch.randn(32))
    assert not _stored(g), g.python()


def test_value_reading_many_buffers_is_stored_once():
    def f(a, b, c, d, e):
        y = a * b + c * d + e               # five reads: stored once rather than reread by each user
        return y.sum(0), y.exp()
    g = _lowered(f, *[torch.randn(64, 32) for _ in range(5)])
    assert len(_stored(g)) == 1, g.python()


def test_upcast_value_is_stored_in_its_16_bit_dtype():
    def f(a, b, c, d, e):
        y = (a * b + c * d + e).float()     # used in float32 by two users, stored as the bf16 value
        return y.sum(0), y.exp()
    g = _lowered(f, *[torch.randn(64, 32, dtype=torch.bfloat16) for _ in range(5)])
    stored = _stored(g)
    assert len(stored) == 1 and stored[0].layout.dtype == torch.bfloat16, g.python()
    want = f(*[torch.ones(64, 32, dtype=torch.bfloat16)] * 5)
    assert want[0].dtype == torch.float32


def test_widens():
    assert lower_mod._widens(torch.bfloat16, torch.float32)
    assert lower_mod._widens(torch.int8, torch.int64) and lower_mod._widens(torch.uint8, torch.int32)
    assert not lower_mod._widens(torch.float32, torch.bfloat16)
    assert not lower_mod._widens(torch.int64, torch.int8) and not lower_mod._widens(torch.int8, torch.uint8)
    assert not lower_mod._widens(torch.int32, torch.float32)


def test_small_independent_reductions_share_a_launch(monkeypatch):
    """Reductions of one small iteration space (a split reduction's final sums, a batch norm's two channel
    statistics) run in one kernel even when they read nothing in common; large ones stay apart. (Outer sums are
    not split into partials for accuracy here: that would add kernels of its own.)"""
    import dataclasses

    import ember.heuristics as H
    from ember.loopir.schedule import Kernel, schedule
    monkeypatch.setattr(H, "DEFAULT", dataclasses.replace(H.DEFAULT, accurate_min_rnumel=1 << 30))

    def f(a, b):
        return a.sum(0), (b * 2).sum(0)

    def kernels(n):
        g = _lowered(f, torch.randn(n, 64), torch.randn(n, 64))
        return [k for k in schedule(g).steps if isinstance(k, Kernel)]
    assert len(kernels(512)) == 1
    assert len(kernels(2048)) == 2


def _loads(graph, name) -> set:
    from ember.loopir.expr import Load, walk
    return {e.buf for n in graph.nodes if n.name == name for e in walk(n.body) if isinstance(e, Load)}


def test_value_stored_for_a_matmul_is_loaded_by_its_other_users():
    """A post-norm layer's output feeds the next layer's matmul (an ATen call: stored anyway) and its residual
    add: the add loads that one buffer rather than recomputing the norm from the previous matmul's output and
    the residual (two reads of the same size, and the mean and variance kept as extra outputs)."""
    w1, w2 = torch.randn(48, 48), torch.randn(48, 48)

    def f(x):
        h = torch.nn.functional.layer_norm(torch.relu(x @ w1) + x, (48,))
        return torch.nn.functional.layer_norm(torch.relu(h @ w2) + h, (48,))
    from ember.loopir.ir import Extern
    g = _lowered(f, torch.randn(64, 48))
    externs = [i for i, n in enumerate(g.nodes) if isinstance(n, Extern)]
    first_mm = g.nodes[externs[0]].name
    after = [n.name for n in g.nodes[externs[1] + 1:]]      # the second layer's norm
    assert not any({first_mm, "arg0"} & _loads(g, name) for name in after), g.python()


def test_cheap_value_stored_for_a_matmul_and_read_from_one_input_is_recomputed():
    """Recomputing from one input of its size costs the same read as loading the stored value: left inline."""
    w = torch.randn(32, 32)

    def f(x):
        y = torch.relu(x) * 2.0             # stored for the matmul; the add recomputes it from x
        return y @ w + y
    g = _lowered(f, torch.randn(16, 32))
    out = next(n.name for n in g.nodes if isinstance(n, Pointwise) and n.name in g.output_names())
    assert not {n.name for n in g.nodes if isinstance(n, Pointwise)} & _loads(g, out), g.python()


def test_value_viewed_for_a_matmul_and_returned_is_stored_once():
    """Attention's math path: the masked softmax is viewed 3-d for its bmm and returned 4-d (saved for the
    backward). One buffer: the bmm takes a view of it, rather than the kernel storing it once per shape."""
    v, m = torch.randn(6, 16, 8), torch.zeros(2, 1, 1, 16)

    def f(x):
        s = torch.ops.aten._safe_softmax(x + m, -1)
        return torch.bmm(s.view(6, 16, 16), v), s
    g = _lowered(f, torch.randn(2, 3, 16, 16))
    assert _matmul_reads_output(g), g.python()
    got, want = ember_run(f, torch.randn(2, 3, 16, 16))
    torch.testing.assert_close(got, want)


def test_value_permuted_for_a_matmul_and_returned_is_stored_once():
    """The same through a permute the matmul takes as it is (a transposed operand); a guard: the lowering's
    memory-image check stored this once already."""
    w = torch.randn(16, 8)

    def f(x):
        y = torch.tanh(x) * 2.0
        return y.t() @ w, y
    g = _lowered(f, torch.randn(16, 32))
    assert _matmul_reads_output(g), g.python()
    got, want = ember_run(f, torch.randn(16, 32))
    torch.testing.assert_close(got, want)


def _matmul_reads_output(g) -> bool:
    from ember.loopir.ir import Extern
    mm = next(n for n in g.nodes if isinstance(n, Extern))
    return mm.args[0].name == g.outputs[1].name


def ember_run(f, x):
    import ember
    return ember.compile(f)(x), f(x)


def _attention(q, k, v, mask):
    s = (q @ k.transpose(-2, -1) / 8.0).masked_fill(mask, float("-inf"))
    return torch.softmax(s.float(), dim=-1).to(v.dtype) @ v


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_recomputed_probabilities_are_not_stored_when_recomputing(recompute, cpu_backend, monkeypatch):
    """A value with an exp used twice is stored once by the default policy, and recomputed by each user under
    ``RECOMPUTE``: the attention backward then stores no float32 buffer of the scores' size. Values and
    gradients equal eager's either way."""
    import ember
    if recompute:
        monkeypatch.setattr(lower_mod, "REUSE_POLICY", RECOMPUTE)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8, generator=g, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = torch.zeros(2, 1, 1, 16, dtype=torch.bool)
    mask[1, ..., -4:] = True
    stored = []
    real = lower_mod.Lowerer.realized

    def spy(self, tv, *layout):
        stored.append((tuple(tv.shape), tv.dtype))
        return real(self, tv, *layout)
    monkeypatch.setattr(lower_mod.Lowerer, "realized", spy)
    fn = ember.compile(_attention, options={"cpu_backend": cpu_backend})
    out = fn(q, k, v, mask)
    grad = torch.randn(out.shape, generator=g, dtype=out.dtype)
    got = torch.autograd.grad(out, (q, k, v), grad)
    want_out = _attention(q, k, v, mask)
    want = torch.autograd.grad(want_out, (q, k, v), grad)
    torch.testing.assert_close(out, want_out)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    fp32_scores = [s for s in stored if s == ((2, 3, 16, 16), torch.float32)]
    assert bool(fp32_scores) != recompute, stored


@pytest.mark.parametrize("recompute", [False, True])
def test_norm_output_reading_one_full_buffer_is_recomputed_when_recomputing(recompute, monkeypatch):
    """A layer norm's float32 output from a bf16 input, used by two users: five reads, but four of them are
    broadcast rows and columns (mean, rstd, weight, bias). The default policy counts them all and stores the
    value; ``RECOMPUTE`` counts the one full read and recomputes it per user."""
    if recompute:
        monkeypatch.setattr(lower_mod, "REUSE_POLICY", RECOMPUTE)

    def f(x, mean, rstd, w, b):
        y = (x.float() - mean) * rstd * w + b
        return y.sum(-1), y.to(torch.bfloat16) * 2
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(64, 32, generator=g).bfloat16(), torch.randn(64, 1, generator=g),
            torch.rand(64, 1, generator=g), torch.randn(32, generator=g), torch.randn(32, generator=g))
    graph = _lowered(f, *args)
    assert len(_stored(graph)) == (0 if recompute else 1), graph.python()


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_softmax_for_a_matmul_and_returned_recomputed(cpu_backend, monkeypatch):
    """``RECOMPUTE`` recomputes the probabilities' exp for both users (the matmul's 3-d operand and the returned
    4-d value): in C++'s looped softmax both outputs then hold an ``exp`` equal to loop 2's, and only one of them
    may be the stash the last loop reads back (the other output's final value is not the exp)."""
    import ember
    monkeypatch.setattr(lower_mod, "REUSE_POLICY", RECOMPUTE)
    mask = torch.zeros(2, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., -1] = True

    def f(x, v):
        p = torch.softmax(x.masked_fill(mask, float("-inf")) / 2.0, -1)
        return torch.matmul(p, v), p
    g = torch.Generator().manual_seed(0)
    x, v = torch.randn(2, 4, 6, 6, generator=g), torch.randn(2, 4, 6, 8, generator=g)
    got = ember.compile(f, options={"cpu_backend": cpu_backend})(x, v)
    for a, b in zip(got, f(x, v)):
        torch.testing.assert_close(a, b)


def test_value_read_from_three_buffers_by_three_users_is_stored():
    """A residual block's output gradient, ``(g1 + g2) * (out > 0)``, feeds a batch norm's sums, its input
    gradient and the residual path: each user's kernel would read the three full buffers again, where the
    stored value costs one store and one load per user. Two users, or two full buffers, stay recomputed."""
    def three(g1, g2, out, x):
        dy = (g1 + g2) * (out > 0)
        return dy.sum(0), (dy * x).sum(0), dy * 2 + x
    args = [torch.randn(64, 32) for _ in range(4)]
    assert len(_stored(_lowered(three, *args))) == 1, _lowered(three, *args).python()

    def two_users(g1, g2, out, x):
        dy = (g1 + g2) * (out > 0)
        return dy.sum(0), dy * 2 + x
    assert not _stored(_lowered(two_users, *args))

    def two_buffers(g1, out, x):
        dy = g1 * (out > 0)
        return dy.sum(0), (dy * x).sum(0), dy * 2 + x
    assert not _stored(_lowered(two_buffers, *args[1:]))


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_stored_block_gradient_matches_eager(cpu_backend):
    """The residual block whose output gradient is now stored once: values and gradients equal eager's."""
    import ember
    from ember.bench.models_handwritten import BasicBlock
    torch.manual_seed(0)
    m = torch.nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2))
    x = torch.randn(4, 8, 12, 12, requires_grad=True)
    ref = m(x)
    gx, *gw = torch.autograd.grad(ref.square().sum(), [x, *m.parameters()])
    got = ember.compile(m, options={"cpu_backend": cpu_backend})(x)
    hx, *hw = torch.autograd.grad(got.square().sum(), [x, *m.parameters()])
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    for a, b in zip([hx, *hw], [gx, *gw]):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
