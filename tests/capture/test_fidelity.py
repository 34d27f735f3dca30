"""Capture fidelity: object identity through in-place ops, the module-call protocol as CPython runs it, and
the compiled module sharing its state with the original. Each case compares ember with eager."""
from __future__ import annotations

import types

import pytest
import torch

import ember

BACKENDS = ["eager", "aot_eager", "ember"]


def _inplace_is_receiver(x):
    y = x.add_(1)
    return x is y, y * 2


def _inplace_chain_identity(x):
    y = x.mul_(2).add_(1)
    return y is x, x + 0


def _set_of_inplace(x):
    return len({x, x.add_(1)}), x * 1


def _contiguous_is_self(x):
    return x.contiguous() is x, x.relu_() is x, x


def _out_is_out(x, y):
    z = torch.add(x, 1, out=y)
    return z is y, y + 0


def _list_index_after_inplace(x):
    items = [x]
    x.sub_(3)
    return items.index(x.mul_(2)), items[0] is x, x + 0


IDENTITY_CASES = [
    (_inplace_is_receiver, 1), (_inplace_chain_identity, 1), (_set_of_inplace, 1), (_contiguous_is_self, 1),
    (_out_is_out, 2), (_list_index_after_inplace, 1),
]


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.allclose(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,n", IDENTITY_CASES, ids=[c[0].__name__ for c in IDENTITY_CASES])
def test_inplace_returns_receiver(fresh_ember, fn, n, backend):
    args = [torch.randn(3, 4) for _ in range(n)]
    expected = fn(*[a.clone() for a in args])
    mine = [a.clone() for a in args]
    got = ember.compile(fn, backend=backend)(*mine)
    assert _same(got, expected), (got, expected)


class _Plus(torch.nn.Module):
    def forward(self, x):
        return x + 1


class _CallOverride(_Plus):
    def __call__(self, x):
        return 5 * self.forward(x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_override_direct_and_inlined(fresh_ember, backend):
    m = _CallOverride()
    x = torch.randn(3)
    assert torch.allclose(ember.compile(m, backend=backend)(x), m(x))
    assert torch.allclose(ember.compile(lambda t: m(t) * 2, backend=backend)(x), m(x) * 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_instance_forward_assigned_after_compile(fresh_ember, backend):
    m = _Plus()
    cm = ember.compile(m, backend=backend)
    x = torch.randn(3)
    assert torch.allclose(cm(x), x + 1)
    m.forward = types.MethodType(lambda self, t: t * 10, m)
    assert torch.allclose(cm(x), x * 10)
    m.forward = lambda t: t - 4                 # a plain function: called without self, as eager does
    assert torch.allclose(cm(x), m(x))
    del m.forward
    assert torch.allclose(cm(x), x + 1)


class _Step(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 10

    def forward(self, x):
        return x + self.step


@pytest.mark.parametrize("backend", BACKENDS)
def test_attribute_writes_reach_original(fresh_ember, backend):
    m = _Step()
    cm = ember.compile(m, backend=backend)
    x = torch.zeros(2)
    assert torch.equal(cm(x), x + 10)
    cm.step = 11
    assert m.step == 11 and cm.step == 11
    assert torch.equal(cm(x), x + 11)
    cm.eval()
    assert not m.training and not cm.training
    cm.training = True
    assert m.training
    cm.extra = 3
    assert m.extra == 3
    del cm.extra
    assert not hasattr(m, "extra")


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_named_self(fresh_ember, backend):
    def f(self, x):
        return x + self

    a, b = torch.randn(3), torch.randn(3)
    assert torch.allclose(ember.compile(f, backend=backend)(a, b), f(a, b))


class _StaticForward(torch.nn.Module):
    @staticmethod
    def forward(x):
        return x * 3 + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_static_forward(fresh_ember, backend):
    m = _StaticForward()
    x = torch.randn(4)
    assert torch.allclose(ember.compile(m, backend=backend)(x), m(x))
    assert torch.allclose(ember.compile(lambda t: m(t) - 1, backend=backend)(x), m(x) - 1)

    def after_break(t):
        print("break")
        return m(t)
    assert torch.allclose(ember.compile(after_break, backend=backend)(x), m(x))


# -- process-wide state read by the trace: a constant of the trace and a guard of the entry ------------------
class _SetGradOn:
    def __enter__(self):
        self.prev = torch.is_grad_enabled()
        torch._C._set_grad_enabled(True)

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.prev)


class _SetGradOnAfterBreak(_SetGradOn):
    def __enter__(self):
        print("entering")                       # a graph break before the mode changes
        super().__enter__()


def _branch_on_grad_in_ctx(cm_cls):
    def f(x):
        with cm_cls():
            y = x + 1 if torch.is_grad_enabled() else x - 1
        return y, torch.is_grad_enabled()
    return f


def _branch_on_profiler(x):
    return x + 1 if torch.autograd._profiler_enabled() else x - 1


def _branch_on_deterministic(x):
    return x + 1 if torch.are_deterministic_algorithms_enabled() else x - 1


def _branch_on_autocast_cpu(x):
    return x + 1 if torch.is_autocast_cpu_enabled() else x - 1


def _sets_grad_and_returns(x):
    torch._C._set_grad_enabled(True)
    return x * 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cm_cls", [_SetGradOn, _SetGradOnAfterBreak])
def test_user_context_sets_grad_mode(fresh_ember, backend, cm_cls):
    f = _branch_on_grad_in_ctx(cm_cls)
    cf = ember.compile(f, backend=backend)
    x = torch.zeros(2)
    for _ in range(2):
        with torch.no_grad():
            assert _same(cf(x), f(x))
        assert _same(cf(x), f(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_mode_set_inside_stays_set(fresh_ember, backend):
    x = torch.ones(2, requires_grad=True)
    try:
        with torch.no_grad():
            r = ember.compile(_sets_grad_and_returns, backend=backend)(x)
            assert torch.is_grad_enabled() and r.requires_grad
    finally:
        torch._C._set_grad_enabled(True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_profiler_state_is_guarded(fresh_ember, backend):
    cf = ember.compile(_branch_on_profiler, backend=backend)
    x = torch.zeros(2)
    assert torch.equal(cf(x), x - 1)
    with torch.autograd.profiler.profile():
        assert torch.equal(cf(x), x + 1)
    assert torch.equal(cf(x), x - 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_deterministic_mode_is_guarded(fresh_ember, backend):
    cf = ember.compile(_branch_on_deterministic, backend=backend)
    x = torch.zeros(2)
    assert torch.equal(cf(x), x - 1)
    torch.use_deterministic_algorithms(True)
    try:
        assert torch.equal(cf(x), x + 1)
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(cf(x), x - 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_state_reads(fresh_ember, backend):
    cf = ember.compile(_branch_on_autocast_cpu, backend=backend)
    x = torch.zeros(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(cf(x), x + 1)
    assert torch.equal(cf(x), x - 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_mode_and_no_grad_entries_differ(fresh_ember, backend):
    cf = ember.compile(lambda t: t * 2, backend=backend)
    x = torch.ones(2)
    with torch.inference_mode():
        assert cf(x).is_inference()
    with torch.no_grad():
        assert not cf(x).is_inference()


def _forked_draws(x):
    with torch.random.fork_rng():
        y = torch.rand_like(x)
    return y + torch.rand_like(x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fork_rng_inside_compiled_code(fresh_ember, backend):
    cf = ember.compile(_forked_draws, backend=backend)
    x = torch.ones(3)
    for _ in range(3):                          # the second call entered a spent context manager before
        torch.manual_seed(0)
        got = cf(x)
        after = torch.rand(2)
        torch.manual_seed(0)
        assert torch.equal(got, _forked_draws(x)) and torch.equal(after, torch.rand(2))


def test_torch_functions_dynamo_rewraps_keep_their_rules(fresh_ember):
    """Importing torch._dynamo replaces torch.manual_seed with a wrapper: it is still a graph break (it ran
    once, at compile time, as a graph op otherwise), and a guarded global-state read keeps its guard."""
    import torch._dynamo  # noqa: F401

    def f(x):
        torch.manual_seed(3)
        return x + torch.rand(2)

    with pytest.raises(ember.Unsupported):
        ember.compile(f, fullgraph=True)(torch.ones(2))
    cf = ember.compile(f)
    assert torch.equal(cf(torch.ones(2)), f(torch.ones(2)))
    torch.rand(1)
    assert torch.equal(cf(torch.ones(2)), f(torch.ones(2)))
