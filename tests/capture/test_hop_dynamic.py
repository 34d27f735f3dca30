"""Higher-order operators over symbolic sizes (issue 34): torch.func transforms, torch.cond and torch.while_loop
in graphs whose input sizes change from call to call. Under ``dynamic=True`` the sizes are symbolic from the
first call; under ``dynamic=None`` the second call's new sizes make them symbolic (automatic dynamic, one
recompile, as torch.compile). Each program: values and gradients equal eager on every call, no graph break, no
fallback, a graph with symbolic sizes, no more graphs than torch.compile with the same option
(hop_harness.check)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.func import functional_call, grad, jacrev, vjp, vmap

from tests.capture.hop_harness import check, table
from tests.capture.test_control_flow_hop import cond_module_params
from tests.capture.test_func_transforms import per_sample_grads

PROGRAMS, program = table()


def _r(*s, grad=True):
    return torch.randn(*s).requires_grad_(grad)


def _n(i):
    """The varying size of call ``i``."""
    return (5, 8, 6)[i % 3]


def _pos(i, *s):
    sign = 1.0 if i % 2 == 0 else -1.0
    return (torch.rand(*s) * sign + 0.01 * sign).requires_grad_(True)


@program(lambda i: (_r(_n(i), 3), _r(3)), calls=3, sizes_vary=True)
def vmap_rows():
    return lambda x, w: vmap(lambda a, b: (a * b).sum().tanh(), in_dims=(0, None))(x, w) * 2


@program(lambda i: (_r(4, _n(i)),), calls=3, sizes_vary=True)
def vmap_reads_example_size():
    # the body reads a size of its per-example argument: a symbol of the enclosing graph
    return lambda x: vmap(lambda a: a.cumsum(0) / a.shape[0], in_dims=1, out_dims=1)(x)


@program(lambda i: (_r(_n(i), 2, 3), _r(3)), calls=3, sizes_vary=True)
def vmap_nested_dynamic():
    return lambda x, y: vmap(vmap(lambda a, b: a * b + b.exp(), in_dims=(0, None)), in_dims=(0, None))(x, y)


@program(lambda i: (_r(_n(i), 4), _r(4)), calls=3, sizes_vary=True)
def grad_of_loss():
    return lambda x, w: grad(lambda v: (x @ v).sin().mean())(w) * w


@program(lambda i: (_r(_n(i), 3), _r(3)), calls=3, sizes_vary=True)
def vjp_of_closure():
    def f(x, w):
        out, fn = vjp(lambda v: (x @ v).sin(), w)
        return out, fn(out.cos())[0]
    return f


@program(lambda i: (_r(_n(i), 3), _r(3)), calls=3, sizes_vary=True)
def jacrev_dynamic_rows():
    return lambda x, w: jacrev(lambda v: (x @ v).tanh())(w).sum(1)


# the static table's per-sample-gradient program, its batch changing between calls
program(lambda i: (_r(_n(i), 4, grad=False), torch.randn(_n(i), 2)), calls=3, sizes_vary=True)(per_sample_grads)


@program(lambda i: (_r(_n(i), 4),), calls=3, sizes_vary=True)
def functional_call_dynamic_batch():
    lin = nn.Linear(4, 2)

    def f(x):
        params = {k: v * 2 for k, v in lin.named_parameters()}
        return functional_call(lin, params, (x,)).sum(1)
    return f


@program(lambda i: (_pos(i, _n(i), 3), _r(_n(i), 3)), calls=3, sizes_vary=True)
def cond_dynamic_rows():
    return lambda x, y: torch.cond(x.sum() > 0, lambda a, b: (a * b).sin(), lambda a, b: (a - b).cos(),
                                   (x, y)) + 1


@program(lambda i: (_pos(i, _n(i), 3),), calls=3, sizes_vary=True)
def cond_branch_reads_size():
    return lambda x: torch.cond(x.mean() > 0, lambda a: a / a.shape[0], lambda a: a * a.size(1), (x,))


program(lambda i: (_pos(i, 8, 4),), calls=3)(cond_module_params)      # the static table's module, dynamic=True


@program(lambda i: (_pos(i, _n(i), 3),), calls=3, sizes_vary=True)
def cond_inside_vmap_dynamic():
    return lambda x: vmap(lambda r: torch.cond(r.sum() > 0, lambda a: a.sin(), lambda a: a.cos(), (r,)))(x)


@program(lambda i: (_r(_n(i), 3, grad=False), _r(3, grad=False), torch.tensor(3 + i)), calls=3, sizes_vary=True)
def while_dynamic_rows():
    def f(x, y, n):
        i0 = torch.zeros((), dtype=torch.int64)
        i, out = torch.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, v * 0.9 + y), (i0, x))
        return out, i
    return f


@program(lambda i: (_r(_n(i), 3), _r(3), torch.tensor(2 + i)), calls=3, sizes_vary=True)
def while_grad_dynamic_rows():
    def f(x, y, n):
        i0 = torch.zeros((), dtype=torch.int64)
        return torch.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, (v * y).sin() + v), (i0, x))[1]
    return f


@program(lambda i: (_r(_n(i), 3), _r(_n(i)), torch.tensor(1 + i)), calls=3, sizes_vary=True)
def while_reads_enclosing_size():
    # a size read before the loop is a free int of both bodies (the op's SymInt[] operand), not a tensor
    def f(x, y, k):
        n = y.shape[0]
        i0 = torch.zeros((), dtype=torch.int64)
        return torch.while_loop(lambda i, v: i * n < k * n, lambda i, v: (i + 1, v.tanh() * n + y.unsqueeze(1)),
                                (i0, x))[1]
    return f


@program(lambda i: (_pos(i, _n(i), 3), _r(_n(i))), calls=3, sizes_vary=True)
def cond_and_vmap_read_enclosing_size():
    def f(x, y):
        n = y.shape[0]
        a = torch.cond(x.sum() > 0, lambda a: a * n, lambda a: a - n, (x,))
        return vmap(lambda r: r / n)(a) + y.unsqueeze(1)
    return f


@program(lambda i: (_r(_n(i), 3, grad=False) * (1 + 3 * i),), calls=3, sizes_vary=True)
def while_body_reads_size():
    def f(x):
        return torch.while_loop(lambda v: v.abs().sum() < 100 * v.shape[0], lambda v: (v * 1.5 + 1,), (x,))[0]
    return f


# dynamic=True for every program; automatic dynamic (dynamic=None) where the sizes change between calls
CASES = [(p, True) for p in PROGRAMS] + [(p, None) for p in PROGRAMS if p.sizes_vary]


@pytest.mark.parametrize("backend", ["aot_eager", "ember"])
@pytest.mark.parametrize("prog,dynamic", CASES,
                         ids=[f"{p.name}-{'dynamic' if d else 'automatic'}" for p, d in CASES])
def test_higher_order_op_with_symbolic_sizes(prog, dynamic, backend):
    check(prog, backend, dynamic=dynamic, symbolic=True)
