"""Autograd's version check on saved tensors: eager raises at backward ("one of the variables needed for gradient
computation has been modified by an inplace operation") when a tensor it saved for backward was modified in
place after it was saved, by the caller after the call or by the function itself. ember's compiled backward
saves other values (recomputed ones, fresh buffers), and its trace ran under saved-tensor hooks that turn the
check off, so it computed a gradient instead (fuzz seed 330031: ``t4 = silu(t2)``, a graph break, then
``t2.copy_(t4)``). Differential: the same stage raises the same error type as eager, and where eager does not
raise, values and gradients are equal."""
from __future__ import annotations

import pytest
import torch

import ember

STATE: list = []


def _graph_break(x):
    STATE.append(float(x.detach().sum()))


# -- functions: (fn, what the caller does to (inputs, outputs) after the call, before backward) -------------
def f_sin(x, w):
    return x.sin() * w


def f_exp(x, w):
    return (x * w).exp()


def f_sigmoid_and_view(x, w):
    s = (x + w).sigmoid()
    return s, s[0]


def f_matmul(x, w):
    return x @ w.t()


def f_input_mutated_inside_after_use(x, w):
    y = x.sin()
    x.mul_(2)
    return y * w


def f_intermediate_mutated_inside(x, w):
    t = x * w
    y = t.sin()
    t.add_(1)
    return y


def f_tanh_source_mutated_inside(x, w):
    t = x * w
    y = t.tanh()        # tanh saves its result, not t
    t.add_(1)
    return y


def f_intermediate_mutated_after_break(x, w):
    t = x * w
    y = t.sin()
    _graph_break(x)
    t.add_(1)
    return y, t


def f_relu_result(x, w):
    return (x - w).relu()


def f_scale(x, w):
    return x * 2 + w


def f_mutate_before_use(x, w):
    x.mul_(2)
    return x.sin() * w


def f_intermediate_mutated_before_save(x, w):
    t = x * 2
    t.add_(w)
    return t.sin()


def _mut_input(ins, outs):
    with torch.no_grad():
        ins[0].add_(1)


def _mut_weight(ins, outs):
    with torch.no_grad():
        ins[1].mul_(2)


def _mut_output(ins, outs):
    outs[0].add_(1)


def _mut_last_output(ins, outs):
    outs[-1].mul_(2)


def _nothing(ins, outs):
    pass


# (fn, after the call, eager raises at backward)
CASES = [
    (f_sin, _mut_input, True),
    (f_exp, _mut_output, True),
    (f_sigmoid_and_view, _mut_last_output, True),
    (f_matmul, _mut_weight, True),
    (f_relu_result, _mut_output, True),
    (f_input_mutated_inside_after_use, _nothing, True),
    (f_intermediate_mutated_inside, _nothing, True),
    (f_intermediate_mutated_after_break, _nothing, True),
    (f_scale, _mut_output, False),
    (f_scale, _mut_input, False),
    (f_mutate_before_use, _nothing, False),
    (f_intermediate_mutated_before_save, _nothing, False),
    (f_exp, _nothing, False),
    (f_tanh_source_mutated_inside, _nothing, False),
]


def _run(fn, after, seed):
    """(stage that raised or None, exception type name, outputs, input grads)."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(4, 3, generator=gen, requires_grad=True)
    w = torch.randn(4, 3, generator=gen, requires_grad=True)
    x = a * 1                   # a non-leaf: the function and the caller may modify it in place
    STATE.clear()
    try:
        outs = fn(x, w)
    except RuntimeError as e:
        return "forward", type(e).__name__, None, None
    outs = outs if isinstance(outs, tuple) else (outs,)
    after([x, w], outs)
    try:
        sum((o * (i + 1)).sum() for i, o in enumerate(outs)).backward()
    except RuntimeError as e:
        return "backward", type(e).__name__, None, None
    return None, None, [o.detach() for o in outs], [a.grad, w.grad]


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn,after,raises", CASES,
                         ids=[f"{c[0].__name__}-{c[1].__name__}" for c in CASES])
def test_modified_saved_tensor_raises_at_backward_like_eager(fn, after, raises, backend):
    ember.reset()
    compiled = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        expected = _run(fn, after, seed)
        assert (expected[0] == "backward") == raises, expected      # the table says what eager does
        actual = _run(compiled, after, seed)
        assert actual[:2] == expected[:2], f"eager: {expected[:2]}, ember {backend}: {actual[:2]}"
        if not raises:
            torch.testing.assert_close(actual[2], expected[2])
            torch.testing.assert_close(actual[3], expected[3])


def test_error_names_the_modified_tensor():
    ember.reset()
    f = ember.compile(f_exp)
    x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    y = f(x, w)
    y.add_(1)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation.*\[torch.float32 \[3\]\].*version 1"):
        y.sum().backward()


# -- eager checks a saved tensor only when the backward node that saved it runs ------------------------------
# (a gradient flows into it): not for an output the loss leaves unused, a detached branch, a dead value, nor a
# value the compiled forward saved that aliases an output the loss does not reach (fuzz seeds 350265, 350314,
# 350820, 351005, 341019). Each row: (fn, after the call, the outputs the loss uses, eager raises at backward).
def f_sin_and_scale(x, w):
    return x.sin() * w, x * 2


def f_detached_sin(x, w):
    d = x.sin().detach()
    return x * 3 + d * w


def f_exp_and_scale(x, w):
    return (x * w).exp(), w * 3


def f_sigmoid_twice(x, w):
    s = (x + w).sigmoid()
    return s, s * 2, w * 4


def f_dead_sin_across_break(x, w):
    t = x.tanh() / 3
    keep = [t, t * 2, t.sin()]      # the sin is dead: never reached by a gradient
    _graph_break(x)
    t.narrow(0, 0, 2).add_(w[:2])
    return (t,)


def f_log_softmax_unused_across_break(x, w):
    t1 = torch.log_softmax(x, 1)[::2]
    t3 = x * w
    _graph_break(x)
    t1.zero_()
    return (t3,)


def f_log_softmax_used_across_break(x, w):
    t1 = torch.log_softmax(x, 1)[::2]
    t3 = x * w
    _graph_break(x)
    t1.zero_()
    return t3, t1


def f_tanh_of_input(x, w):
    return x.tanh() * 2 + w         # eager saves the tanh, not x: the caller may then modify x


def f_relu_of_input_times_weight(x, w):
    return x.relu() * w


def f_amax_and_tanh(x, w):
    return x.amax(1), x.tanh() * w      # eager saves x for the amax only; the tanh's own result for the tanh


def f_column_max_and_sigmoid(x, w):
    return x[:, 1].amax(), x.sigmoid() + w     # eager saves a view of x (same memory) for the amax


def f_mean_of_view_and_exp(x, w):
    v = x[None, :, 0].narrow(0, 0, 1)
    return v.amax(), x.exp() * 0 + v.mean() * w


def _mut_first_output(ins, outs):
    outs[0].add_(1)


FLOW_CASES = [
    (f_sin_and_scale, _mut_input, (1,), False),
    (f_sin_and_scale, _mut_input, (0,), True),
    (f_sin_and_scale, _mut_input, (0, 1), True),
    (f_detached_sin, _mut_input, (0,), False),
    (f_exp_and_scale, _mut_first_output, (1,), False),
    (f_exp_and_scale, _mut_first_output, (0,), True),
    (f_sigmoid_twice, _mut_first_output, (2,), False),
    (f_sigmoid_twice, _mut_first_output, (1,), True),
    (f_sigmoid_twice, _mut_first_output, (1, 2), True),
    (f_dead_sin_across_break, _nothing, (0,), False),
    (f_log_softmax_unused_across_break, _nothing, (0,), False),
    (f_log_softmax_used_across_break, _nothing, (0,), False),
    (f_log_softmax_used_across_break, _nothing, (1,), True),
    (f_tanh_of_input, _mut_input, (0,), False),
    (f_relu_of_input_times_weight, _mut_input, (0,), False),
    (f_relu_of_input_times_weight, _mut_weight, (0,), True),
    # memory eager saved for one output's gradient, read by the compiled backward for another's (fuzz seed
    # 430626): a copy, checked only as eager checks it
    (f_amax_and_tanh, _mut_input, (1,), False),
    (f_amax_and_tanh, _mut_input, (0,), True),
    (f_column_max_and_sigmoid, _mut_input, (1,), False),
    (f_column_max_and_sigmoid, _mut_input, (0, 1), True),
    (f_mean_of_view_and_exp, _mut_input, (1,), False),
]


def _run_loss(fn, after, used, seed):
    """As ``_run``, with a loss of the outputs ``used`` only."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(4, 3, generator=gen, requires_grad=True)
    w = torch.randn(4, 3, generator=gen, requires_grad=True)
    x = a * 1
    STATE.clear()
    outs = fn(x, w)
    after([x, w], outs)
    try:
        sum((outs[i] * (i + 1)).sum() for i in used).backward()
    except RuntimeError as e:
        return "backward", type(e).__name__, None, None
    return None, None, [o.detach() for o in outs], [a.grad, w.grad]


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn,after,used,raises", FLOW_CASES,
                         ids=[f"{c[0].__name__}-{c[1].__name__}-{'_'.join(map(str, c[2]))}" for c in FLOW_CASES])
def test_saved_tensor_checked_only_where_a_gradient_flows(fn, after, used, raises, backend):
    ember.reset()
    compiled = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        expected = _run_loss(fn, after, used, seed)
        assert (expected[0] == "backward") == raises, expected      # the table says what eager does
        actual = _run_loss(compiled, after, used, seed)
        assert actual[:2] == expected[:2], f"eager: {expected[:2]}, ember {backend}: {actual[:2]}"
        if not raises:
            torch.testing.assert_close(actual[2], expected[2])
            torch.testing.assert_close(actual[3], expected[3])


@pytest.mark.parametrize("fn,after,used,raises", FLOW_CASES,
                         ids=[f"{c[0].__name__}-{c[1].__name__}-{'_'.join(map(str, c[2]))}" for c in FLOW_CASES])
def test_saved_tensor_check_under_saved_tensors_hooks(fn, after, used, raises):
    """The same table under the user's saved-tensor hooks, where autograd checks no version itself: where
    eager's check would not raise, ember does not either and computes eager's values. Where it would, eager
    under hooks computes from the modified tensor, which a backward that saved other values cannot reproduce:
    ember raises as without hooks (an error, not a gradient that differs from eager's)."""
    ember.reset()
    compiled = ember.compile(fn)

    def run(f):
        packed = []

        def pack(t):
            packed.append(t)
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            res = _run_loss(f, after, used, 0)
        return res, packed
    expected, _ = run(fn)
    actual, packed = run(compiled)
    assert expected[0] is None, expected        # eager under hooks: no check
    assert actual[0] == ("backward" if raises else None), f"eager: {expected[:2]}, ember: {actual[:2]}"
    assert packed, "the pack hook saw the compiled forward's saves"
    if not raises:
        torch.testing.assert_close(actual[2], expected[2])
        torch.testing.assert_close(actual[3], expected[3])


# -- an input that eager's graph does not connect to any output ----------------------------------------------
# A compiled graph's autograd node had an edge to every input that requires grad, so the backward reached the
# history of an input the outputs do not depend on (used by dead code, detached, compared) with an undefined
# gradient: the nodes there still ran and unpacked what they saved, raising where eager's backward never goes
# (fuzz seed 360755: a dead ``t3.expand(...) * t3`` after a graph break, t3 modified in place earlier). Each
# row: (fn(u, x), eager raises at backward); u's history holds a saved tensor modified after it was saved.
def g_dead(u, x):
    _dead = u * 3
    return x * 2


def g_detached(u, x):
    return x * 2 + u.detach()


def g_compared(u, x):
    return x * (u > 0)


def g_argmax_output(u, x):
    return x * 2, u.argmax()


def g_dead_across_break(u, x):
    t = u * 3
    _graph_break(x)
    return x * 2 + t.detach()


def g_inplace_on_dead_view(u, x):
    t = u * 1
    t[0].zero_()
    return x.sin()


def g_used(u, x):
    return x * 2 + u


def g_used_after_break(u, x):
    _graph_break(x)
    return x * u


UNCONNECTED_CASES = [(g_dead, False), (g_detached, False), (g_compared, False), (g_argmax_output, False),
                     (g_dead_across_break, False), (g_inplace_on_dead_view, False), (g_used, True),
                     (g_used_after_break, True)]


def _run_unconnected(fn, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(4, 3, generator=gen, requires_grad=True)
    x = torch.randn(4, 3, generator=gen, requires_grad=True)
    b = a * 1
    u = b.sin()             # SinBackward saves b ...
    with torch.no_grad():
        b.add_(1)           # ... which is then modified: reaching u's history raises
    STATE.clear()
    outs = fn(u, x)
    outs = outs if isinstance(outs, tuple) else (outs,)
    try:
        sum(o.float().sum() for o in outs if o.requires_grad).backward()
    except RuntimeError as e:
        return "backward", type(e).__name__, None, None
    return None, None, [o.detach() for o in outs], [a.grad, x.grad]


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn,raises", UNCONNECTED_CASES, ids=[c[0].__name__ for c in UNCONNECTED_CASES])
def test_input_eager_does_not_connect_is_not_reached(fn, raises, backend):
    ember.reset()
    compiled = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        expected = _run_unconnected(fn, seed)
        assert (expected[0] == "backward") == raises, expected
        actual = _run_unconnected(compiled, seed)
        assert actual[:2] == expected[:2], f"eager: {expected[:2]}, ember {backend}: {actual[:2]}"
        if not raises:
            torch.testing.assert_close(actual[2], expected[2])
            torch.testing.assert_close(actual[3], expected[3])


# -- a compiled node that no gradient reaches ----------------------------------------------------------------
# A later compiled graph that takes an output of an earlier one joins, in one autograd node, values that eager
# keeps in separate nodes: the loss reaches that node through another output, and autograd then calls the
# earlier graph's node too, with no gradient at all. It unpacked its saved values and raised for one modified
# since (fuzz seed 431329), where eager's node for it never runs. Each row: (fn(m, w) with m not requiring
# grad, the outputs the loss uses, eager raises at backward).
def n_mutated_after_break(m, w):
    t = (m * w).abs()               # eager's mul saves m for t's gradient
    _graph_break(w)
    m.mul_(2)
    return w.sin() * 2, t * t.tanh()


def n_mutated_then_break_again(m, w):
    t = m.view(-1) * w.view(-1)
    _graph_break(w)
    m.tanh_()
    t = t * t.tanh()
    s = w.softmax(0).flip(0)
    _graph_break(s)
    return s, t


def n_view_mutated_after_break(m, w):
    t = m[1:] * w[1:]
    _graph_break(w)
    m[2].zero_()
    return (w * 3).cos(), t.exp()


NO_GRADIENT_CASES = [(n_mutated_after_break, (0,), False), (n_mutated_after_break, (0, 1), True),
                     (n_mutated_then_break_again, (0,), False), (n_mutated_then_break_again, (1,), True),
                     (n_view_mutated_after_break, (0,), False), (n_view_mutated_after_break, (1,), True)]


def _run_no_gradient(fn, used, seed):
    gen = torch.Generator().manual_seed(seed)
    m = torch.randn(4, 3, generator=gen)
    w = torch.randn(4, 3, generator=gen, requires_grad=True)
    STATE.clear()
    outs = fn(m, w)
    try:
        sum((outs[i] * (i + 1)).sum() for i in used).backward()
    except RuntimeError as e:
        return "backward", type(e).__name__, None, None
    return None, None, [o.detach() for o in outs] + [m], [w.grad]


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("fn,used,raises", NO_GRADIENT_CASES,
                         ids=[f"{c[0].__name__}-{'_'.join(map(str, c[1]))}" for c in NO_GRADIENT_CASES])
def test_node_no_gradient_reaches_reads_nothing(fn, used, raises, backend):
    ember.reset()
    compiled = ember.compile(fn, backend=backend)
    for seed in (0, 1):
        expected = _run_no_gradient(fn, used, seed)
        assert (expected[0] == "backward") == raises, expected
        actual = _run_no_gradient(compiled, used, seed)
        assert actual[:2] == expected[:2], f"eager: {expected[:2]}, ember {backend}: {actual[:2]}"
        if not raises:
            torch.testing.assert_close(actual[2], expected[2])
            torch.testing.assert_close(actual[3], expected[3])
