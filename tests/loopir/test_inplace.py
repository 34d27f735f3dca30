"""Mutated inputs whose new value a kernel computes are stored in place (no copy back), and only when safe:
results, mutations and autograd version counters equal eager's."""
from __future__ import annotations

import importlib.util

import pytest
import torch

import ember

from .backends import CPU_BACKENDS

BACKENDS = CPU_BACKENDS + (["triton"] if importlib.util.find_spec("triton") else [])


def sgd_momentum(params, grads, bufs):
    with torch.no_grad():
        for p, g, b in zip(params, grads, bufs):
            b.mul_(0.9).add_(g)
            p.add_(b, alpha=-0.1)


def reads_old_value_later(x, y):
    old = x * 2          # computed before the update ...
    x.add_(y)
    return old.sum(1) + x[:, 0]   # ... and the update's result is also read at other points


def returns_old_and_new(x):
    old = x.clone()
    x.mul_(3)
    return old


def overwritten_before_other_reads(x, y):
    # the new x does not need the old one, which another result reads at the same point
    other = x.exp() * 2
    x.copy_(y * 3)
    return other


def gelu_after_matmul(a, w):
    h = a @ w                    # a fresh extern result that dies at the GELU kernel
    return torch.nn.functional.gelu(h) * 2, (h * 0.5).exp()[:, :3]


def dead_buffer_read_after_store(x):
    h = x @ x.t()
    # a pointwise kernel whose first output does not need h, and whose second does: h's memory is no donor
    return torch.sigmoid(x[:, :1]).expand_as(h) + 0, h * 2


def softmax_over_scores(q, k):
    s = q @ k.t()                # dies at the softmax kernel: on Triton its probabilities take its memory
    return torch.softmax(s * 0.125, -1) * 3


def reduction_reads_after_a_store(a, w):
    h = a @ w
    # one kernel: h * 2 stored first, then the rows' sums of exp(h), then their product with h stored last
    return h * 2, h.exp().sum(-1, keepdim=True) * h


def looped_rows_with_a_store_needing_no_reduction(a, b):
    x = a @ b                    # rows of 8192: looped on Triton; x dies at the one kernel below
    var = ((x - x.sum(-1, keepdim=True) / x.shape[-1]) ** 2).sum(-1)
    return var, x * 2            # x * 2, the kernel's last node, needs no reduction: its loop comes first


def looped_softmax_over_scores(a, b):
    return torch.softmax(a @ b, -1) * 3      # the last node needs both reductions: stored in the last loop


CASES = {
    "sgd_momentum": (sgd_momentum, lambda g: ([torch.randn(5, 7, generator=g) for _ in range(3)],
                                              [torch.randn(5, 7, generator=g) for _ in range(3)],
                                              [torch.randn(5, 7, generator=g) for _ in range(3)])),
    "reads_old_value_later": (reads_old_value_later, lambda g: (torch.randn(6, 4, generator=g),
                                                                torch.randn(6, 4, generator=g))),
    "returns_old_and_new": (returns_old_and_new, lambda g: (torch.randn(8, generator=g),)),
    "overwritten_before_other_reads": (overwritten_before_other_reads,
                                       lambda g: (torch.randn(6, 32, generator=g), torch.randn(6, 32, generator=g))),
    "gelu_after_matmul": (gelu_after_matmul, lambda g: (torch.randn(8, 16, generator=g),
                                                        torch.randn(16, 32, generator=g))),
    "dead_buffer_read_after_store": (dead_buffer_read_after_store, lambda g: (torch.randn(16, 16, generator=g),)),
    "softmax_over_scores": (softmax_over_scores, lambda g: (torch.randn(64, 16, generator=g),
                                                            torch.randn(48, 16, generator=g))),
    "looped_rows_with_a_store_needing_no_reduction": (
        looped_rows_with_a_store_needing_no_reduction,
        lambda g: (torch.randn(4, 16, generator=g), torch.randn(16, 8192, generator=g))),
    "looped_softmax_over_scores": (looped_softmax_over_scores, lambda g: (torch.randn(4, 16, generator=g),
                                                                          torch.randn(16, 8192, generator=g))),
    "reduction_reads_after_a_store": (reduction_reads_after_a_store,
                                      lambda g: (torch.randn(8, 16, generator=g) * 0.3,
                                                 torch.randn(16, 40, generator=g) * 0.3)),
}


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    return type(x)(_clone(v) for v in x)


@pytest.mark.parametrize("cpu_backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_mutated_inputs(name, cpu_backend):
    fn, make = CASES[name]
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": cpu_backend})
    for seed in (0, 1):
        args = make(torch.Generator().manual_seed(seed))
        a1, a2 = _clone(args), _clone(args)
        leaves1 = [t for t in torch.utils._pytree.tree_leaves(a1)]
        versions = [t._version for t in leaves1]
        out1, out2 = f(*a1), fn(*a2)
        torch.testing.assert_close(out1, out2)
        torch.testing.assert_close(a1, a2)
        leaves2 = torch.utils._pytree.tree_leaves(a2)
        for t1, t2, v in zip(leaves1, leaves2, versions):
            assert (t1._version > v) == (t2._version > 0), "a mutated input's version counter moves as in eager"


def test_optimizer_update_is_stored_in_place(monkeypatch):
    """The SGD update's kernels write the parameters directly: the graph returns the inputs themselves."""
    import ember.autograd.runtime as rt
    seen = []
    orig = rt.finish

    def spy(write_backs, aliases, args, outs):
        seen.extend(outs[j] is args[i] for i, j in write_backs)
        return orig(write_backs, aliases, args, outs)
    monkeypatch.setattr(rt, "finish", spy)
    ember.reset()
    f = ember.compile(sgd_momentum, options={"cpu_backend": "python"})
    f(*CASES["sgd_momentum"][1](torch.Generator().manual_seed(0)))
    assert seen and all(seen), seen


def test_dead_matmul_result_is_reused_by_its_epilogue():
    """On the CPU, GELU after a matmul writes over the matmul's result (no new allocation)."""
    from ember.codegen import compile_graph
    from ember.autograd.aot import aot_compile
    built = []

    def hook(g, kind):
        built.append(compile_graph(g, kind, None))
        return built[-1]
    gm = torch.fx.symbolic_trace(lambda a, w: torch.nn.functional.gelu(a @ w))
    aot_compile(gm, [torch.randn(8, 16), torch.randn(16, 32)], decompose=True, compile_graph=hook)
    assert "new value stored in place" in built[0].source, built[0].source

