"""torch.cond and torch.while_loop inside compiled code (issue 34 part 4): graph nodes whose branches and loop
bodies are captured subgraphs, never specialized on the predicate. Each program is called with inputs whose
predicate flips between calls: values and gradients equal eager's, no graph break, no fallback, no
recompile, no more graphs than torch.compile (hop_harness.check)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ember
from tests.capture.hop_harness import check, table

PROGRAMS, program = table()


def _sign(i):
    return 1.0 if i % 2 == 0 else -1.0


def _r(*s, grad=True):
    return torch.randn(*s).requires_grad_(grad)


def _pos(i, *s, grad=True):
    """A tensor whose sum has the sign of call ``i``'s predicate."""
    return (torch.rand(*s) * _sign(i) + 0.01 * _sign(i)).requires_grad_(grad)


@program(lambda i: (_pos(i, 4, 3), _r(4, 3)), calls=3)
def cond_simple():
    return lambda x, y: torch.cond(x.sum() > 0, lambda a, b: (a * b).sin(), lambda a, b: (a - b).cos(), (x, y)) + 1


@program(lambda i: (_r(5, 3), _pos(i, 3)), calls=3)
def cond_tuple_outputs():
    def t(a):
        return a.sum(1) * 2, a.amax()

    def f(a):
        return a.mean(1), a.amin()
    return lambda x, y: (lambda r: r[0] * r[1])(torch.cond(y.sum() > 0, t, f, (x,)))


@program(lambda i: (_r(6, 4), _pos(i, 1)), calls=3)
def cond_closure_weight():
    w = torch.randn(4, 4)

    def f(x, p):
        return torch.cond(p[0] > 0, lambda a: a @ w, lambda a: a @ w.t() - 1, (x,)).relu()
    return f


@program(lambda i: (_pos(i, 8, 4),), calls=3)
def cond_module_params():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return torch.cond(x.mean() > 0, lambda v: self.a(v).tanh(), lambda v: self.b(v).sigmoid(), (x,))
    return M()


@program(lambda i: (_pos(i, 3, 3), _pos(i // 2, 3)), calls=4)
def cond_nested():
    def inner_t(a, b):
        return a * b

    def inner_f(a, b):
        return a + b

    def t(a, b):
        return torch.cond(b.sum() > 0, inner_t, inner_f, (a, b)).exp()

    def f(a, b):
        return (a - b).sin()
    return lambda x, y: torch.cond(x.sum() > 0, t, f, (x, y))


@program(lambda i: (_pos(i, 4), torch.tensor(i % 2 == 0)), calls=3)
def cond_bool_tensor_pred():
    return lambda x, p: torch.cond(p, lambda a: a.cumsum(0), lambda a: a.flip(0) * 3, [x]) * x


@program(lambda i: (_pos(i, 5, 3),), calls=3)
def cond_inside_vmap():
    return lambda x: torch.vmap(lambda r: torch.cond(r.sum() > 0, lambda a: a.sin(), lambda a: a.cos(), (r,)))(x)


@program(lambda i: (_pos(i, 6),), calls=3)
def cond_guards_a_domain():
    # the branch not taken would be NaN (sqrt/log of negatives): its NaNs must reach neither values nor gradients
    return lambda x: torch.cond(x.sum() > 0, lambda a: a.sqrt() + a.log(), lambda a: a * 2, (x,))


@program(lambda i: (_r(4, 3, grad=False), _r(3, grad=False), torch.tensor(3 + i)), calls=3)
def while_counter():
    def f(x, y, n):
        i0 = torch.zeros((), dtype=torch.int64)
        i, out = torch.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, v * 0.9 + y), (i0, x))
        return out, i
    return f


@program(lambda i: (_r(4, 3, grad=False) * (1 + 3 * i), _r(3, grad=False)), calls=3)
def while_until_converged():
    def f(x, y):
        return torch.while_loop(lambda v: v.abs().sum() < 100.0, lambda v: (v * 1.5 + y,), (x,))[0] - 1
    return f


@program(lambda i: (torch.tensor(5 + i),), calls=3)
def while_fibonacci():
    def f(n):
        a, b = torch.zeros(()), torch.ones(())
        k = torch.zeros((), dtype=torch.int64)
        return torch.while_loop(lambda k, a, b: k < n, lambda k, a, b: (k + 1, b.clone(), a + b), (k, a, b))[1:]
    return f


@program(lambda i: (_r(2, 4),), calls=2)
def while_in_no_grad_module():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            with torch.no_grad():
                k = torch.zeros((), dtype=torch.int64)
                _, y = torch.while_loop(lambda k, v: k < 3, lambda k, v: (k + 1, self.lin(v).tanh()), (k, x))
            return y * 2
    return M()


# torch.while_loop's gradient (eager and torch.compile 2.13 both give one): the trip count depends on the data,
# so each program's calls take different numbers of trips (zero included)
@program(lambda i: (_r(4, 3), _r(3), torch.tensor(2 + i)), calls=3)
def while_grad_counter():
    def f(x, y, n):
        i0 = torch.zeros((), dtype=torch.int64)
        i, out = torch.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, v * 0.9 + y.sin()), (i0, x))
        return out * 2, i
    return f


@program(lambda i: ((torch.rand(4, 3) * (1 + 3 * i)).requires_grad_(), _r(3)), calls=3)
def while_grad_until_converged():
    def f(x, y):
        return torch.while_loop(lambda v: v.abs().sum() < 60.0, lambda v: (v * 1.5 + y * v,), (x,))[0].tanh()
    return f


@program(lambda i: (_r(2, 4), torch.tensor(1 + i)), calls=3)
def while_grad_module_params():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x, n):
            k = torch.zeros((), dtype=torch.int64)
            _, y = torch.while_loop(lambda k, v: k < n, lambda k, v: (k + 1, self.lin(v).tanh()), (k, x))
            return y * 2 + x
    return M()


@program(lambda i: (_r(3), _r(3), torch.tensor(1 + 2 * i)), calls=2)
def while_grad_two_carried():
    def f(a, b, n):
        k = torch.zeros((), dtype=torch.int64)
        return torch.while_loop(lambda k, u, v: k < n, lambda k, u, v: (k + 1, u + v, u * v.tanh()), (k, a * 2, b))
    return f


@program(lambda i: (_r(5), torch.tensor(3 + i)), calls=2)
def while_grad_fibonacci_like():
    def f(x, n):
        k = torch.zeros((), dtype=torch.int64)
        return torch.while_loop(lambda k, a, b: k < n, lambda k, a, b: (k + 1, b.clone(), a * b + 1), (k, x, x.cos()))[1:]
    return f


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_control_flow_equals_eager_in_one_graph(prog, backend):
    check(prog, backend)


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_control_flow_with_symbolic_sizes(prog, backend):
    check(prog, backend, dynamic=True, symbolic=True)


def test_branches_that_disagree_break_with_a_clear_reason():
    def f(x):
        return torch.cond(x.sum() > 0, lambda a: a.sum(), lambda a: a * 2, (x,))
    ember.reset()
    with pytest.raises(ember.Unsupported) as e:
        ember.compile(f, fullgraph=True)(torch.randn(3))
    msg = str(e.value)
    assert "torch.cond: the branches return different results" in msg and "test_control_flow_hop.py" in msg


def test_while_loop_gradient_is_one_graph_with_its_backward_op():
    """The forward graph calls ember_hop::while_loop and the backward graph its while_loop_backward (the loop
    re-run from the saved inputs), no break: values and gradients equal the unrolled loop's for trip counts of
    0, 1 and 5. (The reference is the unrolled loop: torch 2.13's own while_loop gradient, eager and compiled,
    is the one-trip gradient when the loop takes zero trips.)"""
    def f(x, w, n):
        return torch.while_loop(lambda v, k: k < n, lambda v, k: (v.sin() * w, k + 1),
                                (x, torch.zeros((), dtype=torch.int64)))[0]

    def unrolled(x, w, n):
        for _ in range(int(n)):
            x = x.sin() * w
        return x
    ember.reset()
    c = ember.compile(f, fullgraph=True)
    for n in (0, 1, 5, 0):
        x, w = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
        xc, wc = (t.detach().clone().requires_grad_() for t in (x, w))
        want, got = unrolled(x, w, n), c(xc, wc, torch.tensor(n))
        torch.testing.assert_close(got, want)
        g = torch.randn(3)
        gw = torch.autograd.grad(want, (x, w), g, allow_unused=True, materialize_grads=True)
        for a, b in zip(torch.autograd.grad(got, (xc, wc), g), gw):
            torch.testing.assert_close(a, b)
    assert ember.stats()["graphs_compiled"] == 1 and ember.stats()["graph_breaks"] == 0
