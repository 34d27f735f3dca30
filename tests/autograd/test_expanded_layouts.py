"""Layouts of expanded tensors (a stride of 0) as eager allocates them, and attention over expanded keys.

Grouped-query and multi-query attention repeat keys and values across heads with ``expand`` + ``reshape``
(transformers' ``repeat_kv``, GPTBigCode): the keys reach the CPU flash-attention op with strides
``(l*e, 0, e, 1)``. AOT autograd passes the arguments of an op it keeps as an ATen call (the attention op is
tagged random because of dropout) in eager's memory order, and that order came from sorting strides, which put
the expanded head dim innermost: the keys were copied with a last-dim stride of ``h`` and the kernel, which
assumes a last-dim stride of 1, returned garbage (GPTBigCode's logits off by 0.14). ``empty_like`` in eager
keeps an expanded dim where row-major order puts it; ``memory_order`` now follows that rule.
"""
import pytest
import torch
import torch.nn.functional as F

import ember
from ember.decomp.helpers import memory_order

LAYOUTS = {
    "expanded_heads": lambda: torch.randn(2, 1, 8, 8)[:, :, None].expand(2, 1, 4, 8, 8).reshape(2, 4, 8, 8),
    "expanded_middle": lambda: torch.randn(3, 1, 5).expand(3, 4, 5),
    "expanded_rows": lambda: torch.randn(1, 6).expand(4, 6),
    "expanded_then_permuted": lambda: torch.randn(5, 1, 3).expand(5, 4, 3).permute(2, 0, 1),
    "transposed_then_expanded": lambda: torch.randn(5, 3).t()[:, :, None].expand(3, 5, 4),
    "expanded_column_transposed": lambda: torch.randn(4, 1).expand(4, 3).t(),
    "sliced_transpose": lambda: torch.randn(6, 4).t()[:, ::2],
    "channels_last": lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
    "equal_strides": lambda: torch.randn(4, 1, 1, 3).permute(0, 2, 1, 3),
}


def _strides_of(order, shape):
    order = order if order is not None else tuple(range(len(shape)))
    strides, cur = [0] * len(shape), 1
    for d in reversed(order):
        strides[d] = cur
        cur *= shape[d] if shape[d] > 1 else 1
    return strides


@pytest.mark.parametrize("case", list(LAYOUTS))
def test_memory_order_is_empty_like_layout(case):
    t = LAYOUTS[case]()
    want = torch.empty_like(t).stride()
    got = _strides_of(memory_order(t), tuple(t.shape))
    assert [g for g, n in zip(got, t.shape) if n > 1] == [w for w, n in zip(want, t.shape) if n > 1]


def _repeat_kv(q, k, v):
    """transformers' repeat_kv: (b, kv_heads, l, e) -> (b, heads, l, e) by expand + reshape."""
    b, kvh, l, e = k.shape
    n = q.shape[1] // kvh
    k = k[:, :, None].expand(b, kvh, n, l, e).reshape(b, kvh * n, l, e)
    v = v[:, :, None].expand(b, kvh, n, l, e).reshape(b, kvh * n, l, e)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _multi_query_masked(q, k, v):
    """GPTBigCode: one key/value head expanded over the query heads, a boolean mask expanded over batch."""
    b, h, l, e = q.shape
    mask = torch.ones(l, l, dtype=torch.bool).tril()[None, None].expand(b, 1, l, l)
    k = k[:, :1][:, :, None].expand(b, 1, h, l, e).reshape(b, h, l, e)
    v = v[:, :1][:, :, None].expand(b, 1, h, l, e).reshape(b, h, l, e)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.35)


def _expanded_keys_only(q, k, v):
    k = k[:, :1].expand_as(q)
    return F.scaled_dot_product_attention(q, k, v[:, :1].expand_as(q))


ATTENTION = {"repeat_kv": _repeat_kv, "multi_query_masked": _multi_query_masked,
             "expanded_keys": _expanded_keys_only}
BACKENDS = {"ember": dict(), "aot_eager_prims": dict(backend="aot_eager", options={"aot_decompose": True})}


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("case", list(ATTENTION))
def test_attention_over_expanded_keys_matches_eager(case, backend, training):
    fn = ATTENTION[case]
    compiled = ember.compile(fn, **BACKENDS[backend])
    q = torch.randn(2, 4, 8, 8, requires_grad=training)
    k = torch.randn(2, 2, 8, 8, requires_grad=training)
    v = torch.randn(2, 2, 8, 8, requires_grad=training)
    ref = fn(q, k, v)
    inputs = [t.detach().clone().requires_grad_(training) for t in (q, k, v)]
    got = compiled(*inputs)
    torch.testing.assert_close(got, ref)
    if training:
        g = torch.randn_like(ref)
        ref.backward(g)
        got.backward(g)
        for a, b in zip(inputs, (q, k, v)):
            torch.testing.assert_close(a.grad, b.grad)
