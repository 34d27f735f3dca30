"""Programs with data-dependent shapes (issue 34 part 3): nonzero, boolean masks (get and set), masked_select,
unique, ``.item()`` feeding a size, index_select/index_add by nonzero indices, a small mixture of experts.

Each program is called with a sequence of input kinds: ``"rand"`` (random signs), ``"empty"`` (every mask
false: zero-size results), ``"full"`` (every mask true) and ``"rand"`` again with other values, so one graph
must serve every data-dependent size, 0 included.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

KINDS = ("rand", "empty", "full", "rand")


def signed(kind: str, *shape) -> torch.Tensor:
    """Random values whose signs follow ``kind`` (masks ``x > 0`` are random, all false or all true)."""
    x = torch.randn(*shape)
    if kind == "empty":
        return -x.abs() - 0.1
    if kind == "full":
        return x.abs() + 0.1
    return x


def count(kind: str, n: int) -> torch.Tensor:
    """A 0-dim int64 tensor for ``.item()`` programs: random in [1, n), 0 for "empty", n for "full"."""
    if kind == "empty":
        return torch.tensor(0)
    if kind == "full":
        return torch.tensor(n)
    return torch.randint(1, n, ())


@dataclass(frozen=True)
class Program:
    name: str
    fn: Callable
    inputs: Callable[[str], tuple]
    grad: bool = True        # floating inputs get gradients in the training run


PROGRAMS: list[Program] = []


def program(inputs, grad: bool = True):
    def deco(fn):
        PROGRAMS.append(Program(fn.__name__, fn, inputs, grad))
        return fn
    return deco


@program(lambda k: (signed(k, 10),))
def mask_get(x):
    return x[x > 0] * 2


@program(lambda k: (signed(k, 7, 4),))
def mask_get_rows(x):
    return x[x.sum(1) > 0].sin() + 1


@program(lambda k: (signed(k, 9),))
def mask_get_reduce(x):
    y = x[x > 0]
    return y.sum() * 2 + (y * y).sum()


@program(lambda k: (signed(k, 6, 5),))
def mask_set_scalar(x):
    y = x * 1.5
    y[x > 0] = 0.0
    return y


@program(lambda k: (signed(k, 8),))
def mask_set_values(x):
    y = x.clone()
    m = x > 0
    y[m] = y[m] * 3
    return y


@program(lambda k: (signed(k, 11),), grad=False)
def nonzero_1d(x):
    return torch.nonzero(x > 0)


@program(lambda k: (signed(k, 4, 5),), grad=False)
def nonzero_2d_plus(x):
    return (x > 0).nonzero() * 2 + 1


@program(lambda k: (signed(k, 12),), grad=False)
def nonzero_as_tuple(x):
    return torch.nonzero(x > 0, as_tuple=True)[0] + 1


@program(lambda k: (signed(k, 10),))
def masked_select_sum(x):
    return torch.masked_select(x, x > 0).sum() + x.sum()


@program(lambda k: (signed(k, 5, 4), signed(k, 4)))
def masked_select_bcast(x, w):
    return torch.masked_select(x, w > 0) * 3


@program(lambda k: (signed(k, 16),), grad=False)
def unique_sorted(x):
    return torch.unique((x * 2).round())


@program(lambda k: (signed(k, 16),), grad=False)
def unique_counts(x):
    v, c = torch.unique((x * 2).round(), return_counts=True)
    return v * 2, c + 1


@program(lambda k: (signed(k, 12),), grad=False)
def unique_inverse(x):
    v, inv = (x * 2).round().unique(return_inverse=True)
    return v + 1, inv * 2


@program(lambda k: (signed(k, 8), count(k, 9)))
def item_arange(x, t):
    n = int(t.item())
    return torch.arange(n) * 2 + x.sum()


@program(lambda k: (signed(k, 8), count(k, 9)))
def item_new_zeros(x, t):
    n = t.item()
    return x.new_zeros(n) + x.mean()


@program(lambda k: (signed(k, 9, 3),))
def index_select_nonzero(x):
    idx = torch.nonzero(x[:, 0] > 0).squeeze(1)
    return x.index_select(0, idx).sin() * 2


@program(lambda k: (signed(k, 9, 3), torch.randn(4, 3)))
def index_add_nonzero(x, acc):
    idx = torch.nonzero(x[:, 0] > 0).squeeze(1)
    return acc.repeat(3, 1).index_add(0, idx, x[idx] * 2)


@program(lambda k: (signed(k, 8), count(k, 8)))
def item_checked_slice(x, t):
    n = t.item()
    torch._check_is_size(n)
    torch._check(n <= x.shape[0])
    return x[:n] * 2


@program(lambda k: (signed(k, 8, 3), count(k, 8)))
def item_checked_slice_rows_step(x, t):
    # a slice whose end and length are data-dependent, with a step: floor((u + 1)/2) rows
    n = t.item()
    torch._check_is_size(n)
    torch._check(n <= x.shape[0])
    return x[:n:2].cos() * x[:n:2].sum()


@program(lambda k: (signed(k, 8), count(k, 8)))
def item_checked_narrow(x, t):
    n = t.item()
    torch._check_is_size(n)
    torch._check(n <= x.shape[0])
    return x.narrow(0, 0, n).exp() + 1


@program(lambda k: (signed(k, 7, 3), signed(k, 7, 3)))
def mask_set_rows_values(x, y):
    # index_put of rows selected by a mask, with one value row per selected row
    z = x.clone()
    m = x.sum(1) > 0
    z[m] = y[m].tanh() * 2
    return z


@program(lambda k: (signed(k, 9), torch.randn(9)))
def mask_set_masked_select(x, y):
    z = y * 2
    m = x > 0
    z[m] = torch.masked_select(x * y, m)
    return z


# .item() of a float (capture_scalar_outputs): a Python float known at run time, used in arithmetic
@program(lambda k: (signed(k, 5, 3),))
def item_float_scale(x):
    s = x.sum().item()
    return x * s + 1


@program(lambda k: (signed(k, 6),))
def item_float_arithmetic(x):
    m = x.max().item()
    return (x - m).exp() / (2.0 * m + 3) - m ** 2


@program(lambda k: (signed(k, 4, 3),))
def item_float_inplace_and_returned(x):
    s = x.abs().amax().item()      # a max: its float is exact in any order (returned, compared as a number)
    s += 1
    s *= 2
    return x / s, s, -s


@program(lambda k: (signed(k, 7), count(k, 7)))
def item_float_with_item_int(x, t):
    n = t.item()
    torch._check_is_size(n)
    torch._check(n <= x.shape[0])
    s = x[:n].sum().item()
    return x[:n] * s + s * n


# torch.unique(x, dim=...) (data-dependent number of distinct slices)
@program(lambda k: (torch.randint(0, 2, (8, 2)).float() * (1 if k != "empty" else 0),), grad=False)
def unique_dim0(x):
    return torch.unique(x, dim=0) * 2


@program(lambda k: (torch.randint(0, 2, (2, 9)) * (1 if k != "full" else 0),), grad=False)
def unique_dim1_inverse_counts(x):
    u, inv, c = torch.unique(x, dim=1, return_inverse=True, return_counts=True)
    return u.sum(0), inv, c


@program(lambda k: (torch.randint(0, 3, (7, 2)), signed(k, 2)))
def unique_rows_weighted(k, w):
    u = torch.unique(k, dim=0, sorted=True)
    return u.float() @ w.sin()


@program(lambda k: (signed(k, 10, 3),))
def mask_then_gather(x):
    idx = (x[:, 1] > 0).nonzero()[:, 0]
    return x[idx].cos() + x[idx].sum(0)


def moe_inputs(kind: str, n: int = 12, dim: int = 8, experts: int = 8) -> tuple:
    x = torch.randn(n, dim)
    gate = torch.randn(dim, experts)
    w1 = torch.randn(experts, dim, 2 * dim) * 0.3
    w2 = torch.randn(experts, 2 * dim, dim) * 0.3
    return x, gate, w1, w2


def moe(x, gate, w1, w2):
    """Top-2 routing over ``w1.shape[0]`` experts: each expert runs on the tokens routed to it (``nonzero``),
    and its weighted output is added back with ``index_add``."""
    scores = torch.softmax(x @ gate, dim=-1)
    top_w, top_i = scores.topk(2, dim=-1)
    top_w = top_w / top_w.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(w1.shape[0]):
        tok, slot = torch.where(top_i == e)
        h = torch.relu(x[tok] @ w1[e]) @ w2[e]
        out = out.index_add(0, tok, h * top_w[tok, slot].unsqueeze(-1))
    return out


PROGRAMS.append(Program("moe_top2", moe, moe_inputs))


def torch_graph_count(prog: Program, training: bool) -> int:
    """torch.compile's graph count for ``prog``'s calls, with capture_scalar_outputs and
    capture_dynamic_output_shape_ops on."""
    import torch._dynamo
    n = [0]

    def counting(gm, example_inputs):
        n[0] += 1
        return gm.forward
    cfg = torch._dynamo.config
    torch._dynamo.reset()
    with cfg.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True):
        c = torch.compile(prog.fn, backend=counting)
        for i, k in enumerate(KINDS):
            torch.manual_seed(i)
            args = [a.requires_grad_(training and prog.grad and a.is_floating_point())
                    for a in prog.inputs(k)]
            c(*args)
    torch._dynamo.reset()
    return n[0]


_ = Any
