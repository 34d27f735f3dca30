"""Layouts around extern calls: views of computed buffers reach ATen without copies (reshape of a strided
slice, as torch's ``view`` would), a computed argument keeps the layout it had in the trace (so CPU attention
returns the traced output layout and no restride copy runs), and a value needed in a permuted layout is
computed in memory order. Values and gradients equal eager's on every CPU backend."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember

from .backends import CPU_BACKENDS


def attention_from_fused_qkv(x, w, b):
    # GPT-2's attention: one linear for q, k and v, split, heads by view + transpose, SDPA, heads merged back
    B, T, C = x.shape
    qkv = torch.addmm(b, x.view(B * T, C), w).view(B, T, 3 * C)
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (t.view(B, T, 4, C // 4).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(B, T, C)


def transposed_weight_input(x, w):
    # the recomputed normalized value is an mm argument in transposed layout (a weight gradient's input)
    h = F.layer_norm(x, x.shape[-1:])
    return (h.t() @ w).sum(0), h.sum()


def _compiled_source(fn, args):
    from ember.autograd.aot import aot_compile
    from ember.codegen import compile_graph
    built = []

    def hook(g, kind):
        built.append(compile_graph(g, kind, None))
        return built[-1]
    gm = torch.fx.symbolic_trace(fn)
    aot_compile(gm, args, decompose=True, compile_graph=hook)
    return "\n".join(b.source for b in built)


def test_attention_inputs_are_views_of_the_linear_result():
    x, w, b = torch.randn(2, 8, 16), torch.randn(16, 48), torch.randn(48)
    src = _compiled_source(attention_from_fused_qkv, [x, w, b])
    calls = [ln for ln in src.splitlines() if ln.count("as_strided(") == 3 and "extern" in ln]
    assert len(calls) == 1, src          # q, k and v go to attention as views of the addmm result
    assert "=copy" not in src, src      # no kernel copies heads apart or back together


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@pytest.mark.parametrize("fn,shapes", [(attention_from_fused_qkv, [(2, 8, 16), (16, 48), (48,)]),
                                       (transposed_weight_input, [(12, 16), (12, 5)])])
def test_values_and_grads(fn, shapes, cpu_backend):
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(s, generator=g, requires_grad=True) for s in shapes]
    ref = fn(*args)
    ref_grads = torch.autograd.grad(sum(r.sum() for r in (ref if isinstance(ref, tuple) else (ref,))), args)
    ember.reset()
    cf = ember.compile(fn, options={"cpu_backend": cpu_backend})
    out = cf(*args)
    grads = torch.autograd.grad(sum(r.sum() for r in (out if isinstance(out, tuple) else (out,))), args)
    for a, b in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
        torch.testing.assert_close(a, b)
        assert a.stride() == b.stride() or not b.is_contiguous()
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)


def test_runtime_restride_does_not_run_for_attention(monkeypatch):
    """The wrapper's restride (a copy when an extern returns another layout than traced) is not called."""
    from ember.codegen import wrapper
    calls = []
    real = wrapper.restride

    def spy(t, shape, stride):
        calls.append((tuple(t.shape), tuple(t.stride()), stride))
        return real(t, shape, stride)
    monkeypatch.setattr(wrapper, "restride", spy)
    ember.reset()
    x, w, b = torch.randn(2, 8, 16), torch.randn(16, 48), torch.randn(48)
    cf = ember.compile(attention_from_fused_qkv)
    with torch.no_grad():
        torch.testing.assert_close(cf(x, w, b), attention_from_fused_qkv(x, w, b))
        calls.clear()
        cf(x, w, b)
    assert not [c for c in calls if len(c[0]) == 4], calls


def test_reshape_of_strided_slice_is_a_view():
    from ember.loopir.lowerings import _view_stride
    t = torch.randn(2, 8, 48)[:, :, 16:32]
    for new in [(2, 8, 4, 4), (16, 16), (2, 8, 16, 1), (2, 2, 4, 16)]:
        assert _view_stride(tuple(t.shape), tuple(t.stride()), new) == list(t.view(new).stride())
    assert _view_stride(tuple(t.shape), tuple(t.stride()), (2, 128)) is None      # view() raises too


def sliced_inputs(x, t, w):
    return F.cross_entropy(x, t), (x.exp() + 1) @ w.t(), x.t()[1:] * 2


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_inputs_with_a_storage_offset(cpu_backend):
    """Slices passed as inputs: kernels index from each tensor's own data pointer (the offset counts once)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 40, generator=g)[4:]
    t = torch.randint(0, 40, (12,), generator=g)[4:]
    w = torch.randn(8, 60, generator=g)[2:, 10:50]
    ember.reset()
    out = ember.compile(sliced_inputs, options={"cpu_backend": cpu_backend})(x, t, w)
    for a, b in zip(out, sliced_inputs(x, t, w)):
        torch.testing.assert_close(a, b)


def transposed_copy_into_bmm(p, g):
    # a contiguous copy of a transposed cast feeding a bmm (BERT's value gradient P^T @ dO, where the trace had
    # the transposed operand contiguous), and its mm counterpart
    pt = p.float().transpose(1, 2).contiguous().to(torch.bfloat16)
    return torch.bmm(pt, g), pt[0].t().contiguous().t() @ g[0]


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_matmul_operand_read_transposed_is_stored_in_its_inputs_order(cpu_backend):
    """A matmul operand computed from its input transposed is stored in the input's order and passed to the
    matmul transposed: the kernel reads and writes along memory (no strided pass over the input)."""
    p, g = torch.randn(3, 40, 24), torch.randn(3, 40, 8).bfloat16()
    src = _compiled_source(transposed_copy_into_bmm, [p, g])
    assert "empty_strided((3, 24, 40), (960, 1, 24)" in src, src
    ember.reset()
    out = ember.compile(transposed_copy_into_bmm, options={"cpu_backend": cpu_backend})(p, g)
    for a, b in zip(out, transposed_copy_into_bmm(p, g)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
def test_contiguous_inputs_are_checked_with_is_contiguous(cpu_backend, monkeypatch):
    """The wrapper checks an input expected contiguous with ``is_contiguous()``: a tensor whose only odd stride
    belongs to a dim of size 1 runs without a copy (the kernels never multiply that stride by a nonzero index)
    and gives eager's values."""
    from ember.codegen import wrapper
    copies = []
    real = wrapper.restride

    def spy(t, shape, stride):
        copies.append(tuple(t.stride()))
        return real(t, shape, stride)
    monkeypatch.setattr(wrapper, "restride", spy)
    fn = lambda x, y: (x * 2 + y).sum(-1)      # noqa: E731
    ember.reset()
    cf = ember.compile(fn, options={"cpu_backend": cpu_backend})
    x, y = torch.randn(1, 40), torch.randn(1, 40)
    torch.testing.assert_close(cf(x, y), fn(x, y))
    odd = torch.randn(40, 1).t()                 # shape (1, 40), stride (1, 1): contiguous
    assert odd.is_contiguous() and odd.stride() != x.stride()
    copies.clear()
    torch.testing.assert_close(cf(odd, y), fn(odd, y))
    assert copies == [], copies
    src = _compiled_source(fn, [x, y])
    assert "is_contiguous()" in src, src
