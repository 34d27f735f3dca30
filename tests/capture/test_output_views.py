"""A graph output that is a view of another graph output (an intermediate and a view of it, both live after
the graph: returned together, or both used after a graph break) shares its memory as in eager, so an in-place
update through one is seen through the other (the fuzzer's most frequent wrong-output class)."""
from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ["aot_eager", "ember"]


def _view_mutated_after_break(x):
    t = x * -1.2 + 0.2
    v = torch.split(t, 2, dim=0)[1][1]
    if x.amax().item() > 100.0:
        return (t,)
    v.sigmoid_()
    return (t,)


def _base_mutated_after_break(x):
    t = x * 1 + 0.2
    v = t[1]
    if t.mean() > -100.0:      # tensor condition: a graph break
        t.tanh_()
    return (v,)


def _unsqueezed_split_after_print(x):
    t = x * -1.35 + -0.69
    v = torch.split(t.unsqueeze(-1), 1, dim=0)[-2]
    print("s", float(v.sum()))
    v.relu_()
    return v, t, torch.stack([t, t * 2], 0).std(dim=2, keepdim=True)


def _transposed_base(x):
    t = (x * 2).t()
    v = t[1:3, ::2]
    if x.sum().item() > 100.0:
        return (t,)
    v.mul_(-3)
    return t, v


def _fill_through_chunk(x):
    t = torch.minimum(x, x)
    a = t.chunk(3, 0)[1]
    if t.amax() > -100.0:
        a.fill_(2.0)
    return (t,)


def _caller_mutates(x):
    t = x.cos() + 1
    return t, t[::2], t.reshape(-1)[1:3]


# no output is dense: both are strided views of an intermediate that is not returned (fuzz seed 307043)
def _strided_column_copied_in_loop(x):
    t = (x * 1).chunk(3, 1)[0].t()
    for _ in range(1):
        t.squeeze(0).copy_(x[x > -0.47].numel() * 1.0 + 0 * x.sum())
    return (t,)


def _strided_views_mutated_after_break(x):
    t = (x + 1)[:, ::2]
    v = t[1:, 1:]
    if x.sum().item() > 100.0:
        return (t,)
    v.mul_(-2)
    return t, v


def _caller_mutates_strided_views(x):
    t = (x * 3)[::2]
    return t, t[:, 1]


# a dense member (the scalar) that does not hold the strided one it is a view of (fuzz seed 436867): the
# strided member, which holds it, is the base
def _scalar_of_strided_column_clamped_after_break(x):
    t = torch.lerp(x[0].abs(), x.abs() + 3, 0.3)[:, 0]      # above 0.5: the clamp changes it
    s = t[0]
    if x.sum().item() > 100.0:
        return (t,)
    s.clamp_(-0.5, 0.5)
    return (t,)


def _row_of_strided_rows_after_break(x):
    t = (x * 2 + 1)[::2, 1:]
    r = t[1]
    if x.amax().item() > 100.0:
        return (t,)
    r.mul_(-1)
    return t, r


# two equal values (stored once by the kernel compiler) are distinct tensors in eager: updating one after a graph
# break must leave the other (fuzz seed 434911)
def _equal_sums_one_updated_after_break(x):
    t = x + 0.5
    x = x + 0.5
    if t.amin() > -100.0:
        t.index_put_((torch.tensor([0, 1]),), torch.tensor(-0.74))
        t = t * torch.tanh(x)
    return (t,)


def _equal_products_returned(x):
    return x * 3, x * 3


CASES = [(_equal_sums_one_updated_after_break, (3, 4)), (_equal_products_returned, (4, 2)),
         (_scalar_of_strided_column_clamped_after_break, (3, 6)), (_row_of_strided_rows_after_break, (5, 4)),
         (_view_mutated_after_break, (6,)), (_base_mutated_after_break, (3, 6)),
         (_unsqueezed_split_after_print, (3, 6)), (_transposed_base, (4, 5)), (_fill_through_chunk, (6,)),
         (_caller_mutates, (4, 3)), (_strided_column_copied_in_loop, (5, 2)),
         (_strided_views_mutated_after_break, (4, 6)), (_caller_mutates_strided_views, (5, 3))]


def _run(fn, x):
    outs = fn(x)
    outs[-1].add_(0.5)          # the caller mutates one output: views of it must see it, as in eager
    return [o.clone() for o in outs]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_output_views_share_memory(fresh_ember, backend, case):
    fn, shape = CASES[case]
    compiled = ember.compile(fn, backend=backend)
    for _ in range(2):
        x = torch.randn(shape)
        expected, actual = _run(fn, x.clone()), _run(compiled, x.clone())
        assert len(expected) == len(actual)
        for e, a in zip(expected, actual):
            assert e.shape == a.shape and torch.allclose(e, a, atol=1e-5), (e, a)


@pytest.mark.parametrize("backend", BACKENDS)
def test_output_view_mutated_after_break_grads(fresh_ember, backend):
    def fn(x):
        t = x * 2
        v = t[1]
        if x.sum().item() > 100.0:
            return t
        v.mul_(3)
        return t

    compiled = ember.compile(fn, backend=backend)
    for _ in range(2):
        x = torch.randn(3, 4, requires_grad=True)
        y = x.detach().clone().requires_grad_()
        e, a = fn(x), compiled(y)
        assert torch.allclose(e, a)
        (e * e).sum().backward()
        (a * a).sum().backward()
        assert torch.allclose(x.grad, y.grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_equal_values_updated_after_break_stay_distinct(fresh_ember, backend):
    """Two graph outputs with equal values (``t4 = x0 + x1; x0 = x0 + x1``), stored once by the kernel compiler,
    are distinct tensors in eager: the update of one after a graph break must not show in the other (fuzz seed
    434911: ember returned one buffer for both)."""
    def fn(x0, x1):
        t4 = x0 + x1
        x0 = x0 + x1
        if t4.min() > -100:
            t4.index_put_((torch.tensor([0, 1]),), torch.tensor(-0.74))
            t4 = t4 * torch.tanh(x0)
        return (t4,)

    compiled = ember.compile(fn, backend=backend)
    for _ in range(2):
        a, b = torch.randn(3, 6, 5), torch.randn(3, 6, 5)
        torch.testing.assert_close(compiled(a, b)[0], fn(a, b)[0])
