"""`assert` on a tensor and `Tensor.data = y` inside compiled code (issue 32), differential against eager.

A passing tensor assert costs no graph break (checked under fullgraph=True); a failing one raises eager's
AssertionError with the user's message, before any later side effect, on the default (C++) backend so the
check really runs in compiled code.

PYTEST_DONT_REWRITE: pytest's assert rewriting would replace the programs' `assert` bytecode under test.
"""
from __future__ import annotations

import pytest
import torch

import ember
from tests.capture.harness import assert_same, clone_value

pytestmark = pytest.mark.usefixtures("fresh_ember")


def _first_is_3(x):
    assert x[0] == 3, "first must be 3"
    return x * 2


def _all_positive(x):
    assert (x > 0).all(), "all positive"
    return x.sin() + 1


def _no_message(x):
    y = x.exp()
    assert y.sum() > 3.5
    return y - 1


def _helper_check(t):
    assert t.max() < 10, "too large"


def _inlined(x):
    _helper_check(x)
    return x.cos()


def _two_asserts(x):
    assert x.numel() == 3, "static check"
    assert x[1] != 0, "second is zero"
    y = x / x[1]
    return y


def _bool_scalar_tensor(x, flag):
    assert flag, "flag off"
    return x + 1


def _negated(x):
    assert not x.isnan().any(), "has nan"
    return x + 1


def _and_chain(x, y):
    assert x.sum() > 0 and (y < 5).all(), "bad pair"
    return x * y


def _and_python_first(x):
    assert x.dim() == 1 and x[-1] < 0.5, "last too big"
    return x.neg()


# name -> (fn, passing args, failing args)
ASSERT_CASES = {
    "indexed_compare": (_first_is_3, lambda: (torch.tensor([3.0, 1.0]),),
                        lambda: (torch.tensor([2.0, 1.0]),)),
    "all": (_all_positive, lambda: (torch.rand(4) + 0.5,), lambda: (torch.rand(4) - 2.0,)),
    "no_message": (_no_message, lambda: (torch.ones(3),), lambda: (torch.zeros(3),)),
    "inlined_helper": (_inlined, lambda: (torch.rand(5),), lambda: (torch.rand(5) + 20,)),
    "two_asserts": (_two_asserts, lambda: (torch.rand(3) + 1,), lambda: (torch.tensor([1.0, 0.0, 2.0]),)),
    "negated": (_negated, lambda: (torch.rand(3),), lambda: (torch.tensor([1.0, float("nan")]),)),
    "and_first": (_and_chain, lambda: (torch.rand(3), torch.rand(3)),
                  lambda: (-torch.rand(3), torch.rand(3))),
    "and_second": (_and_chain, lambda: (torch.rand(3), torch.rand(3)),
                   lambda: (torch.rand(3), torch.rand(3) + 9)),
    "and_python_first": (_and_python_first, lambda: (torch.rand(3) * 0.4,), lambda: (torch.rand(3) + 0.6,)),
    "bool_input": (_bool_scalar_tensor, lambda: (torch.rand(2), torch.tensor(True)),
                   lambda: (torch.rand(2), torch.tensor(False))),
}


def _eager_error(fn, args):
    with pytest.raises(AssertionError) as ei:
        fn(*clone_value(args))
    return str(ei.value)


@pytest.mark.parametrize("fail_first", [False, True])
@pytest.mark.parametrize("name", list(ASSERT_CASES))
def test_tensor_assert_fullgraph(name, fail_first):
    fn, good, bad = ASSERT_CASES[name]
    cf = ember.compile(fn, fullgraph=True)
    order = [bad, good, bad] if fail_first else [good, bad, good]
    for make in order:
        args = make()
        if make is bad:
            msg = _eager_error(fn, args)
            with pytest.raises(AssertionError) as ei:
                cf(*clone_value(args))
            assert str(ei.value) == msg
        else:
            assert_same(cf(*clone_value(args)), fn(*clone_value(args)))


def _appends_after(x, log):
    assert (x > 0).all(), "positive"
    log.append(x.sum())
    return x + 1


def test_failing_assert_skips_later_side_effects():
    cf = ember.compile(_appends_after, fullgraph=True)
    log_c, log_e = [], []
    assert_same(cf(torch.ones(3), log_c), _appends_after(torch.ones(3), log_e))
    with pytest.raises(AssertionError, match="positive"):
        cf(-torch.ones(3), log_c)
    with pytest.raises(AssertionError, match="positive"):
        _appends_after(-torch.ones(3), log_e)
    assert_same(log_c, log_e)


def _mutates_after(x):
    assert x[0] > 0, "first positive"
    x.add_(1)
    return x * 2


def _setitem_after(x):
    assert x[0] > 0, "first positive"
    x[1] = 7.0
    return x


def _view_write_after(x):
    assert x[0] > 0, "first positive"
    x[1:].mul_(2)
    return x.sum()


def _out_after(x):
    assert x[0] > 0, "first positive"
    torch.add(x, 1, out=x)
    return x


@pytest.mark.parametrize("fn", [_mutates_after, _setitem_after, _view_write_after, _out_after],
                         ids=lambda fn: fn.__name__)
def test_failing_assert_leaves_input_unmutated(fn):
    """A write to an input after the assert would run inside the graph before the check: the graph breaks
    there (and fullgraph=True refuses it with the reason)."""
    cf = ember.compile(fn)
    for v in ([1.0, 2.0], [-1.0, 2.0], [3.0, 0.0]):
        xc, xe = torch.tensor(v), torch.tensor(v)
        try:
            oe = fn(xe)
        except AssertionError as e:
            with pytest.raises(AssertionError, match=str(e)):
                cf(xc)
        else:
            assert_same(cf(xc), oe)
        assert_same(xc, xe, "caller's x")
    with pytest.raises(ember.errors.Unsupported, match="written in place after an `assert`"):
        ember.compile(fn, fullgraph=True)(torch.tensor([1.0, 2.0]))


def _grad_fn(x, w):
    assert (w.abs() < 100).all(), "weights exploded"
    return (x @ w).tanh().sum()


def test_tensor_assert_gradients():
    cf = ember.compile(_grad_fn, fullgraph=True)
    x = torch.randn(3, 4)
    w = torch.randn(4, 2, requires_grad=True)
    wc = w.detach().clone().requires_grad_(True)
    assert_same(cf(x, wc), _grad_fn(x, w))
    cf(x, wc).backward()
    _grad_fn(x, w).backward()
    assert_same(wc.grad, w.grad, "grad")
    with pytest.raises(AssertionError, match="weights exploded"):
        cf(x, (wc.detach() * 1000).requires_grad_(True))


def _ambiguous(x):
    assert x > 0, "never reached"
    return x


def test_multi_element_assert_raises_eager_error():
    """bool() of a several-element tensor is eager's RuntimeError, not an assertion."""
    cf = ember.compile(_ambiguous)
    with pytest.raises(RuntimeError, match="ambiguous"):
        _ambiguous(torch.ones(3))
    with pytest.raises(RuntimeError, match="ambiguous"):
        cf(torch.ones(3))


# -- Tensor.data = y -------------------------------------------------------------------------------------
def _sd_input(x, y):
    x.data = y
    return x + 1, x.shape, x.dtype


def _sd_local(x, y):
    z = x * 2
    z.data = y
    return z, z is not y


def _sd_then_inplace(x, y):
    x.data = y
    x.add_(1)                   # writes y's storage too, as eager
    return x.sum()


def _sd_computed(x, y):
    x.data = y * 3
    return x.mul_(2), x


def _sd_twice_in_list(x, y):
    box = [x]
    x.data = y
    x.data = y[:1]
    return box[0] is x, box[0] + 0


def _sd_grad_source(x, w):
    x.data = w * 2              # the target does not require grad; w's graph is not attached to x
    return (w * x).sum()


def _sd_grad_read(x, y):
    x.add_(1)
    x.data = y
    return x.grad is None, x * 1


def _sd_then_source_changes(x, y):
    x.data = y
    y.data = torch.zeros([0])   # x keeps y's old storage
    return x


def _sd_chain(x, y):
    y.data = x * 5
    x.data = y
    return x, y


SETDATA_CASES = {
    "input": (_sd_input, lambda: (torch.zeros(3), torch.rand(2, dtype=torch.float64))),
    "local": (_sd_local, lambda: (torch.rand(3), torch.rand(4))),
    "then_inplace": (_sd_then_inplace, lambda: (torch.zeros(3), torch.rand(2))),
    "computed": (_sd_computed, lambda: (torch.zeros(5), torch.rand(2, 2))),
    "twice_in_list": (_sd_twice_in_list, lambda: (torch.zeros(3), torch.rand(4))),
    "then_source_changes": (_sd_then_source_changes, lambda: (torch.ones(2), torch.rand(3))),
    "chain": (_sd_chain, lambda: (torch.ones(2), torch.rand(3))),
    "grad_read": (_sd_grad_read, lambda: (torch.zeros(3), torch.rand(2))),
    "grad_source": (_sd_grad_source, lambda: (torch.zeros(3), torch.rand(3, requires_grad=True))),
}


def _aliasing(args):
    return [[a.data_ptr() == b.data_ptr() for b in args] for a in args]


@pytest.mark.parametrize("name", list(SETDATA_CASES))
def test_set_data_fullgraph(name):
    fn, make = SETDATA_CASES[name]
    cf = ember.compile(fn, fullgraph=True)
    for _ in range(2):
        args = make()
        ae, ac = clone_value(args), clone_value(args)
        oe, oc = fn(*ae), cf(*ac)
        assert_same(oc, oe)
        assert_same(list(ac), list(ae), "caller's args")
        assert _aliasing(ac) == _aliasing(ae), "storage sharing with y differs from eager"
        if name == "grad_source":
            oe.backward()
            oc.backward()
            assert_same(ac[1].grad, ae[1].grad, "w.grad")


def _sd_requires_grad(x, y):
    x.data = y
    return x * 2


def test_set_data_on_requires_grad_is_a_break_not_a_wrong_result():
    x = torch.zeros(3, requires_grad=True)
    with pytest.raises(ember.errors.Unsupported, match="requires grad"):
        ember.compile(_sd_requires_grad, fullgraph=True)(x, torch.ones(2))
    xe, xc = torch.zeros(3, requires_grad=True), torch.zeros(3, requires_grad=True)
    ye = torch.rand(2)
    oe, oc = _sd_requires_grad(xe, ye), ember.compile(_sd_requires_grad)(xc, ye.clone())
    assert_same(oc, oe)
    oe.sum().backward()
    oc.sum().backward()
    assert_same(xc.grad, xe.grad, "x.grad")
    assert_same(xc, xe, "x")


def _local_writes_after(x):
    assert x.min() > 0, "positive"
    out = torch.zeros(3)
    out[0] = x.sum()
    y = x.clone()
    y.mul_(2)
    return out + y[:3]


def test_graph_local_writes_after_assert_stay_in_the_graph():
    """Writes to the graph's own tensors are invisible when the assertion fails: one graph (fullgraph)."""
    cf = ember.compile(_local_writes_after, fullgraph=True)
    x = torch.rand(4) + 0.1
    assert_same(cf(x), _local_writes_after(x))
    with pytest.raises(AssertionError, match="positive"):
        cf(-x)


def _or_chain(x, y):
    assert x.sum() > 0 or y.sum() > 0, "both non-positive"
    return x + y


def test_or_assert_on_tensor_is_correct():
    """`assert a or b` on a tensor `a`: which operand runs depends on data, so the graph breaks there."""
    cf = ember.compile(_or_chain)
    one = torch.ones(2)
    for x, y in ((one, -one), (-one, one), (-one, -one)):
        try:
            oe = _or_chain(x, y)
        except AssertionError as e:
            with pytest.raises(AssertionError, match=str(e)):
                cf(x, y)
        else:
            assert_same(cf(x, y), oe)


def test_failing_assert_traceback_points_at_the_users_assert():
    import traceback
    cf = ember.compile(_inlined, fullgraph=True)
    cf(torch.rand(5))
    with pytest.raises(AssertionError) as ei:
        cf(torch.rand(5) + 20)
    last = traceback.extract_tb(ei.value.__traceback__)[-1]
    assert (last.filename, last.name) == (__file__, "_helper_check")
    assert last.lineno == _helper_check.__code__.co_firstlineno + 1


def _random_after(x):
    assert x[0] > 0, "pos"
    return x + torch.rand(3)


def _dropout_after(x):
    assert x[0] > 0, "pos"
    return torch.nn.functional.dropout(x, 0.5, training=True)


@pytest.mark.parametrize("fn", [_random_after, _dropout_after], ids=lambda fn: fn.__name__)
def test_failing_assert_leaves_the_generator_untouched(fn):
    """A random op after the assert would draw before the check: the graph breaks there."""
    cf = ember.compile(fn)
    torch.manual_seed(1)
    cf(torch.ones(3))
    states = []
    for g in (fn, cf):
        torch.manual_seed(0)
        with pytest.raises(AssertionError, match="pos"):
            g(-torch.ones(3))
        states.append(torch.get_rng_state())
    assert torch.equal(states[0], states[1])
