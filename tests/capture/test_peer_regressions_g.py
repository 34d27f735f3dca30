"""Reproducers from PyTorch's Dynamo test files run against ember, seventh batch (issue 32, tools/peer on
test_generator / test_backward_higher_order_ops): each compiled and compared with eager on fresh inputs."""
from __future__ import annotations

import types

import pytest
import torch

import ember


# -- generators the trace started, leaving compiled code ---------------------------------------------------
# A generator made and advanced inside the compiled function, then returned, stored into an existing object,
# or live at a graph break, was refused ("has started running"): the glue could only remake an unstarted one
# by calling its function again. The glue now builds a real generator paused where the traced one is (its
# code, instruction pointer, stack and locals), whose rest runs lazily when the caller iterates. Each case
# checks the values, the laziness (the log right after the call), sends, return values and cleanup.
def _items(t, log):
    log.append("start")
    yield t + 1
    log.append("second")
    yield t * 2
    log.append("third")
    yield t.sin()


def _advanced(t, log):
    g = _items(t, log)
    next(g)
    return g


def _exhausted(t, log):
    g = _items(t, log)
    out = list(g)
    return g, out[2]


def _sub(t, log):
    log.append("sub")
    x = yield t + 1
    log.append(f"sub got {x}")
    yield t + 2
    return "sub done"


def _delegating(t, log):
    r = yield from _sub(t, log)
    log.append(f"outer got {r}")
    yield t + 3


def _inside_yield_from(t, log):
    g = _delegating(t, log)
    next(g)
    return g


def _guarded(t, log):
    try:
        yield t + 1
        yield t + 2
    finally:
        log.append("finally")


def _in_try_finally(t, log):
    g = _guarded(t, log)
    next(g)
    return g


def _returns_value(t, log):
    total = t * 0
    for i in range(4):
        total = total + (yield t + i)
    log.append("summed")
    return total


def _sent_and_returned(t, log):
    g = _returns_value(t, log)
    next(g)
    g.send(t * 10)
    return g


def _counting_closure(t, log):
    n = 0

    def gen():
        nonlocal n
        for x in (t, t + 1, t + 2):
            n += 1
            yield x

    def seen():
        return n

    g = gen()
    next(g)
    return g, seen


def _stored_in_argument(t, log):
    g = _items(t, log)
    next(g)
    log.append(g)
    return t.cos()


def _two_sharing_state(t, log):
    acc = []

    def gen(k):
        for i in range(3):
            acc.append(k * 10 + i)
            yield t * i + k

    a, b = gen(1), gen(2)
    next(a)
    next(b)
    next(a)
    return a, b, acc


STARTED = [_advanced, _exhausted, _inside_yield_from, _in_try_finally, _sent_and_returned, _counting_closure,
           _stored_in_argument, _two_sharing_state]


def _run_out(v, log, send=None):
    """Everything a caller can observe by driving what came back: items (with the log after each), sends,
    the StopIteration value, closure reads; generators stored in ``log`` are driven too."""
    if isinstance(v, types.GeneratorType):
        seen = []
        try:
            while True:
                x = next(v) if send is None else v.send(send)
                seen.append((x.clone() if isinstance(x, torch.Tensor) else x, [s for s in log if isinstance(s, str)]))
        except StopIteration as e:
            seen.append(("stop", e.value))
        return seen
    if isinstance(v, tuple):
        return tuple(_run_out(x, log, send) for x in v)
    if isinstance(v, list):
        return [_run_out(x, log, send) for x in v]
    if callable(v):
        return ("call", v())
    return v


def _same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("fn", STARTED, ids=[c.__name__.lstrip("_") for c in STARTED])
def test_started_generator_leaves_compiled_code(fresh_ember, fn):
    t = torch.randn(3)
    log_e, log_c = [], []
    want = fn(t, log_e)
    got = ember.compile(fn, backend="eager", fullgraph=True)(t, log_c)
    assert [s for s in log_c if isinstance(s, str)] == [s for s in log_e if isinstance(s, str)]   # lazy
    send = t * 100 if fn is _sent_and_returned else None
    _same(_run_out(got, log_c, send), _run_out(want, log_e, send))
    _same(_run_out(log_c, log_c), _run_out(log_e, log_e))


@pytest.mark.parametrize("fn", [_advanced, _in_try_finally, _inside_yield_from])
def test_started_generator_close_and_throw(fresh_ember, fn):
    """The rebuilt generator's cleanup runs at close(), and a throw() reaches its frame (and sub-generator)."""
    t = torch.randn(3)
    for op in ("close", "throw"):
        log_e, log_c = [], []
        want = fn(t, log_e)
        got = ember.compile(fn, backend="eager", fullgraph=True)(t, log_c)
        if op == "close":
            assert got.close() == want.close()
        else:
            with pytest.raises(KeyError) as ee:
                want.throw(KeyError("k"))
            with pytest.raises(KeyError) as ec:
                got.throw(KeyError("k"))
            assert ec.value.args == ee.value.args
        assert log_c == log_e
        assert list(got) == list(want) == []


@ember.disable
def _opaque(x):
    return x + 1


def _live_at_break(t, log):
    g = _items(t, log)
    a = next(g)
    b = _opaque(a)          # a graph break with the started generator in a local
    return a + b + next(g), list(g)


def test_started_generator_live_at_graph_break(fresh_ember):
    """Without fullgraph the break hands the paused generator to the continuation: both halves compile."""
    t = torch.randn(3)
    log_e, log_c = [], []
    want = _live_at_break(t, log_e)
    got = ember.compile(_live_at_break, backend="eager")(t, log_c)
    torch.testing.assert_close(got, want)
    assert log_c == log_e
    assert ember.stats()["graphs_compiled"] >= 2


# -- the cond operator called directly ------------------------------------------------------------------------
# ``torch.ops.higher_order.cond(pred, true_fn, false_fn, operands)`` (what torch.cond's eager path hands to
# torch.compile in a wrapper function) was wrapped as a plain Python object, its ``__call__`` traced into
# torch's dispatch machinery: "passing a CondOp to a torch operation". It is now a constant called through
# torch.cond's capture rule (test_generator.py::test_untrack_generator_after_hop computes its reference with
# an eager torch.cond, which compiles).
_COND = torch.ops.higher_order.cond


def _cond_tensor_pred(t, cond=_COND):
    return cond(t.sum() > 0, lambda x: x.sin() + 1, lambda x: x.cos() - 1, (t,))


def _cond_two_operands(t, cond=_COND):
    u = t * 2
    return cond(t[0] > t[1], lambda a, b: (a + b, a * b), lambda a, b: (a - b, a / (b.abs() + 1)), (t, u))


def _cond_bool_pred(t, cond=_COND):
    return cond(t.shape[0] > 2, lambda x: x * 3, lambda x: x / 3, [t])


def _cond_in_wrapper(t, cond=_COND):
    def wrapper(*args):         # torch.cond's own shape: the operator called through a wrapper's *args
        return cond(*args)
    return wrapper(t.mean() < 0, lambda x: x.exp(), lambda x: x.tanh(), (t,))


COND_CASES = [_cond_tensor_pred, _cond_two_operands, _cond_bool_pred, _cond_in_wrapper]


@pytest.mark.parametrize("fn", COND_CASES, ids=[c.__name__.lstrip("_") for c in COND_CASES])
def test_cond_operator_called_directly(fresh_ember, fn):
    """Values and gradients against eager torch.cond (eager autograd through the bare operator is torch's
    own internal path, which needs a tracing mode)."""
    for sign in (1.0, -1.0):
        t = (torch.rand(4) + 0.5) * sign
        t[1] = -t[1] * 3
        te, tc = t.clone().requires_grad_(), t.clone().requires_grad_()
        want = fn(te, torch.cond)
        got = ember.compile(fn, backend="eager", fullgraph=True)(tc)
        torch.testing.assert_close(got, want)
        sum(x.sum() for x in (want if isinstance(want, tuple) else (want,))).backward()
        sum(x.sum() for x in (got if isinstance(got, tuple) else (got,))).backward()
        torch.testing.assert_close(tc.grad, te.grad)


# -- Tensor.register_hook on a tensor from outside the call ----------------------------------------------------
# ``x.register_hook(fn)`` inside compiled code broke the graph ("Tensor.register_hook inside compiled code";
# test_backward_higher_order_ops.py). The forward does not depend on it and the gradient reaches ``x`` only
# after the call returned, so the glue registers it on the real tensor after the graph ran. Each case compares
# values, gradients and what the hooks saw with eager, over two calls (each call registers once more).
def _triple(g):
    return g * 3


class _Seen:
    def __init__(self):
        self.grads = []

    def hook(self, g):
        self.grads.append(g.clone())


def _hook_on_input(x, y, m, seen):
    x.register_hook(_triple)
    return x * y


def _hook_partial_observer(x, y, m, seen):
    import functools
    x.register_hook(functools.partial(_Seen.hook, seen))
    return (x * y).sin()


def _hook_closure_made_inside(x, y, m, seen):
    k = y.shape[0]

    def scale(g):
        return g * k
    y.register_hook(scale)
    return x * y + y


def _hook_on_parameter(x, y, m, seen):
    m.weight.register_hook(lambda g: g.clamp(max=0.1))
    return m(x.unsqueeze(0)).sum() * y


def _hook_on_non_leaf_input(x, y, m, seen):
    y.register_hook(seen.hook)
    return (x + 1) * y


HOOK_CASES = [_hook_on_input, _hook_partial_observer, _hook_closure_made_inside, _hook_on_parameter,
              _hook_on_non_leaf_input]


def _hook_args(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, generator=g).requires_grad_()
    w = torch.randn(4, generator=g).requires_grad_()
    y = w * 2 if seed % 2 else w          # a non-leaf input on odd seeds
    torch.manual_seed(seed)
    return x, y, w, torch.nn.Linear(4, 3), _Seen()


@pytest.mark.parametrize("fn", HOOK_CASES, ids=[c.__name__.lstrip("_") for c in HOOK_CASES])
def test_register_hook_on_outside_tensor(fresh_ember, fn):
    cfn = ember.compile(fn, backend="eager", fullgraph=True)
    for seed in (1, 2):
        xe, ye, we, me, se = _hook_args(seed)
        xc, yc, wc, mc, sc = _hook_args(seed)
        for _ in range(2):
            want, got = fn(xe, ye, me, se), cfn(xc, yc, mc, sc)
            torch.testing.assert_close(got, want)
            want.sum().backward(retain_graph=True)
            got.sum().backward(retain_graph=True)
        for a, b in ((xc, xe), (wc, we), (mc.weight, me.weight), (mc.bias, me.bias)):
            torch.testing.assert_close(a.grad, b.grad)
        torch.testing.assert_close(sc.grads, se.grads)


def _hook_handle_used(x, y, m, seen):
    h = x.register_hook(_triple)
    h.remove()
    return x * y


def test_register_hook_refusals_match_eager(fresh_ember):
    """No hook on a tensor that does not require grad (eager's RuntimeError, without fullgraph: an exception
    leaving the traced code is a refusal under fullgraph); a handle used in the trace is
    refused under fullgraph and runs eagerly without it."""
    x, y = torch.randn(3), torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="doesn't require gradient") as want:
        _hook_on_input(x, y, None, None)
    with pytest.raises(RuntimeError, match="doesn't require gradient") as got:
        ember.compile(_hook_on_input, backend="eager")(x, y, None, None)
    assert str(got.value) == str(want.value)
    x.requires_grad_()
    with pytest.raises(ember.Unsupported, match="hook handle"):
        ember.compile(_hook_handle_used, backend="eager", fullgraph=True)(x, y, None, None)
    out = ember.compile(_hook_handle_used, backend="eager")(x, y, None, None)
    out.sum().backward()
    torch.testing.assert_close(x.grad, y.detach())


# -- exceptions carrying traced values ---------------------------------------------------------------------------
# A generator's ``return t * 5`` (StopIteration.value), ``raise ValueError(t)`` or a ``finally: return Foo(3)``
# broke the graph ("a Tensor value is needed as a Python constant here", "creating ValueError with non-constant
# arguments"): the trace's exceptions are real objects, so their arguments had to be constants. A builtin
# exception made with traced arguments now keeps them beside it (exc_values.ExcVar): ``e.args``, ``e.value``
# and the cause/context chain read them; what would read the real object's arguments is refused.
class _Box:
    def __init__(self, x):
        self.x = x


def _returns_tensor(t):
    yield t + 1
    return t * 5


def _stop_value_from_next(t):
    it = _returns_tensor(t)
    next(it)
    try:
        next(it)
    except StopIteration as e:
        return e.value + 1, e.args[0] * 2
    return t, t


def _stop_value_from_send(t):
    it = _returns_tensor(t)
    next(it)
    try:
        it.send(3)
    except StopIteration as e:
        return e.value.cos()
    return t


def _finally_returns_object():
    try:
        yield 1
    finally:
        return _Box(3)  # noqa: B012


def _stop_value_from_throw(t):
    it = _finally_returns_object()
    next(it)
    try:
        it.throw(ValueError)
    except StopIteration as e:
        return t + e.args[0].x
    return t


def _raise_with_tensor(t):
    try:
        raise ValueError(t * 2, _Box(4))
    except ValueError as e:
        return e.args[0] + e.args[1].x, isinstance(e, ValueError), type(e).__name__


def _traced_cause(t):
    try:
        try:
            raise KeyError(t.sin())
        except KeyError as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError as r:
        return r.__cause__.args[0] * 3, str(r)


def _through_contextmanager(t):
    import contextlib

    @contextlib.contextmanager
    def catching(out):
        try:
            yield
        except IndexError as e:
            out.append(e.args[0] + 1)

    out = []
    with catching(out):
        raise IndexError(t * 7)
    return out[0]


EXC_CASES = [_stop_value_from_next, _stop_value_from_send, _stop_value_from_throw, _raise_with_tensor,
             _traced_cause, _through_contextmanager]


@pytest.mark.parametrize("fn", EXC_CASES, ids=[c.__name__.lstrip("_") for c in EXC_CASES])
def test_exception_carrying_traced_values(fresh_ember, fn):
    for _ in range(2):
        t = torch.randn(3)
        _same(ember.compile(fn, backend="eager", fullgraph=True)(t), fn(t))


def _str_of_traced_exception(t):
    try:
        raise KeyError(t)
    except KeyError as e:
        return str(e)


def test_exception_with_traced_values_read_as_object_is_refused(fresh_ember):
    """``str(e)`` would read the real object's arguments: refused under fullgraph, eager's answer without."""
    t = torch.randn(3)
    with pytest.raises(ember.Unsupported):
        ember.compile(_str_of_traced_exception, backend="eager", fullgraph=True)(t)
    assert ember.compile(_str_of_traced_exception, backend="eager")(t) == _str_of_traced_exception(t)


# -- throw and close through `yield from` ----------------------------------------------------------------------
# ``gen.throw(E)`` on a generator waiting in ``yield from`` broke the graph ("generator.throw() into a generator
# suspended in `yield from`"), and a user iterator object delegated to was wrapped as a plain iterator: its
# ``send``/``throw``/``close`` methods were never called (close() of the outer generator silently skipped the
# iterator's close, also when the generator was dropped at return). The throw now goes to the sub-generator
# (recursively) or the iterator's ``throw(typ, val, tb)``; the sub-iterator's end or failure resumes the outer
# frame past the ``yield from`` as CPython 3.11 does; close() calls a user iterator's close().
class _Delegate:
    def __init__(self, log):
        self.log = log

    def __iter__(self):
        return self

    def __next__(self):
        return 1

    def send(self, v):
        self.log.append(("send", v))
        return 2

    def throw(self, typ, val=None, tb=None):
        self.log.append("iter throw")
        return 3

    def close(self):
        self.log.append("iter close")


def _yf_iter_close(t, log):
    def outer():
        yield from _Delegate(log)
    g = outer()
    next(g)
    g.close()
    return t + len(log)


def _yf_iter_throw_then_dropped(t, log):
    def outer():
        yield from _Delegate(log)
    g = outer()
    next(g)
    return t + g.throw(ValueError)        # g is closed as the frame returns: the iterator's close() runs


def _yf_iter_send(t, log):
    def outer():
        yield from _Delegate(log)
    g = outer()
    next(g)
    return t + g.send(5)


def _yf_sub_catches(t, log):
    def sub():
        try:
            yield 1
        except ValueError:
            log.append("sub caught")
            yield t * 2
    def outer():
        yield from sub()
    g = outer()
    next(g)
    return g.throw(ValueError)


def _yf_sub_finally_outer_catches(t, log):
    def sub():
        try:
            yield 1
        finally:
            log.append("sub finally")
    def outer():
        try:
            yield from sub()
        except ValueError:
            log.append("outer caught")
            yield t + 10
    g = outer()
    next(g)
    return g.throw(ValueError)


def _yf_sub_returns_on_throw(t, log):
    def sub():
        try:
            yield 1
        except ValueError:
            return t * 3
    def outer():
        r = yield from sub()
        log.append("outer got")
        yield r + 1
    g = outer()
    next(g)
    return g.throw(ValueError)


def _yf_nested(t, log):
    def leaf():
        try:
            yield 1
        except ValueError:
            log.append("leaf caught")
            yield t - 2
    def mid():
        yield from leaf()
    def outer():
        yield from mid()
    g = outer()
    next(g)
    return g.throw(ValueError)


def _yf_plain_iterator(t, log):
    def outer():
        try:
            yield from iter([1, 2, 3])
        except ValueError:
            yield t * 5
    g = outer()
    next(g)
    return g.throw(ValueError)


def _yf_uncaught(t, log):
    def sub():
        try:
            yield 1
        finally:
            log.append("sub finally")
    def outer(inner):
        yield from inner
    out = []
    for inner in (sub(), iter([1, 2])):         # a sub-generator, a plain iterator: out of g.throw() to here
        g = outer(inner)
        next(g)
        try:
            g.throw(KeyError("k"))
        except KeyError as e:
            out.append(e.args[0])
    return t * len(out), out


YF_CASES = [_yf_uncaught, _yf_iter_close, _yf_iter_throw_then_dropped, _yf_iter_send, _yf_sub_catches,
            _yf_sub_finally_outer_catches, _yf_sub_returns_on_throw, _yf_nested, _yf_plain_iterator]


@pytest.mark.parametrize("fn", YF_CASES, ids=[c.__name__.lstrip("_") for c in YF_CASES])
def test_throw_and_close_through_yield_from(fresh_ember, fn):
    t = torch.randn(3)
    log_e, log_c = [], []
    want = fn(t, log_e)
    got = ember.compile(fn, backend="eager", fullgraph=True)(t, log_c)
    _same(got, want)
    assert log_c == log_e


class _HookedForward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        self.lin.weight.register_hook(lambda g: g * 0)
        return self.lin(x)


def test_register_hook_in_exported_model_is_refused(fresh_ember):
    """ember.export checks the model on its real parameters: a hook registered there would outlive the export,
    and the exported program would not carry it. Refused, and nothing is left on the parameters."""
    m = _HookedForward()
    with pytest.raises(ember.Unsupported, match="register_hook"):
        ember.export(m, (torch.randn(4, 3),))
    m.lin(torch.randn(4, 3)).sum().backward()
    assert m.lin.weight.grad.abs().sum() > 0          # no zeroing hook was left behind
    out = ember.compile(m, backend="eager", fullgraph=True)(torch.randn(4, 3))   # compiled: registered as eager
    m.lin.weight.grad = None
    out.sum().backward()
    assert m.lin.weight.grad.abs().sum() == 0
