"""Indirect loads (gather, index_select / embedding, advanced indexing with negative indices) become loads
whose address is a loaded value inside fused kernels: values and gradients equal eager, and no graph falls back
to an extern ATen call for them."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.loopir import lower as lower_mod

from .backends import CPU_BACKENDS


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


INDIRECT = ("prims.gather", "prims.index_select", "prims.index")
CASES = {
    "cross_entropy": (lambda l, t: F.cross_entropy(l, t),
                      lambda g: (torch.randn(8, 100, generator=g), torch.randint(0, 100, (8,), generator=g))),
    "embedding": (lambda w, i: (F.embedding(i, w) * 2).sum(-1),
                  lambda g: (torch.randn(50, 16, generator=g), torch.randint(0, 50, (4, 7), generator=g))),
    "gather_dim0": (lambda x, i: torch.gather(x, 0, i) + 1,
                    lambda g: (torch.randn(5, 6, generator=g), torch.randint(0, 5, (3, 6), generator=g))),
    "advanced_split_dims": (lambda x, i, j: x[i, :, j] * 3,
                            lambda g: (torch.randn(5, 6, 7, generator=g), torch.randint(-5, 5, (4,), generator=g),
                                       torch.randint(0, 7, (4,), generator=g))),
    "advanced_negative_2d": (lambda x, i: x[:, i] - 1,
                             lambda g: (torch.randn(5, 6, generator=g), torch.randint(-6, 6, (2, 3), generator=g))),
    "gather_then_outer_sum": (lambda x, i: torch.gather(x, 1, i).sum(0),
                              lambda g: (torch.randn(300, 6, generator=g), torch.randint(0, 6, (300, 2), generator=g))),
}


@pytest.mark.parametrize("cpu_backend", CPU_BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_indirect_loads(name, cpu_backend):
    fn, make = CASES[name]
    ember.reset()
    f = ember.compile(fn, options={"cpu_backend": cpu_backend})
    before = sum(lower_mod.MISSING_LOWERINGS[k] for k in INDIRECT)
    for seed in (0, 1):
        args = list(make(_g(seed)))
        args[0].requires_grad_(True)
        out, ref = f(*args), fn(*args)
        torch.testing.assert_close(out, ref)
        g1 = torch.autograd.grad(out.sum(), args[0])[0]
        g2 = torch.autograd.grad(ref.sum(), args[0])[0]
        torch.testing.assert_close(g1, g2)
    after = sum(lower_mod.MISSING_LOWERINGS[k] for k in INDIRECT)
    assert after == before, dict(lower_mod.MISSING_LOWERINGS)


def test_loss_gathers_each_row_in_the_row_kernel():
    """Cross-entropy's mean over rows of ``logits[r, target[r]] - max[r] - log(sum[r])``: the gather and the
    row's terms run in the kernel computing the row's max and sum (one gather per row program), and the final
    reduction loads a per-row vector, with no indirect load of its own."""
    from ember.autograd.aot import aot_compile
    from ember.loopir.expr import Bind, walk
    from ember.loopir.ir import Reduction
    from ember.loopir.lower import lower
    from ember.loopir.schedule import Kernel, schedule
    fn = lambda x, t: F.cross_entropy(x, t)  # noqa: E731
    scheds = []

    def compile_graph(gm, kind):
        scheds.append(schedule(lower(gm, kind)))
        return gm
    x, t = torch.randn(16, 300), torch.randint(0, 300, (16,))
    aot_compile(torch.fx.symbolic_trace(fn), [x, t], decompose=True, compile_graph=compile_graph)
    kernels = [k for k in scheds[0].steps if isinstance(k, Kernel)]
    assert len(kernels) == 2, scheds[0].python()
    rows, final = kernels
    assert rows.xnumel == 16 and any(isinstance(e, Bind) for n in rows.nodes for e in walk(n.body))
    assert final.xnumel == 1 and all(isinstance(n, Reduction) or n.name not in final.reads for n in final.nodes)
    assert not any(isinstance(e, Bind) for n in final.nodes for e in walk(n.body)), scheds[0].python()


def test_row_gather_is_loaded_before_the_reduction_loops():
    """The gathered logit, used after the loops with the row's max and sum, is loaded before them (its address
    depends only on the target): the dependent load's latency hides behind the loops."""
    from ember.autograd.aot import aot_compile
    from ember.loopir.kernel import kernel_body
    from ember.loopir.lower import lower
    from ember.loopir.schedule import Kernel, schedule
    fn = lambda x, t: F.cross_entropy(x.float(), t)  # noqa: E731
    bodies = []

    def compile_graph(gm, kind):
        rows = next(k for k in schedule(lower(gm, kind)).steps if isinstance(k, Kernel))
        bodies.append(kernel_body(rows, persistent=False))
        return gm
    x, t = torch.randn(16, 300).bfloat16(), torch.randint(0, 300, (16,))
    aot_compile(torch.fx.symbolic_trace(fn), [x, t], decompose=True, compile_graph=compile_graph)
    first = bodies[0].sections[0]
    assert first.level == "x" and bodies[0].sections[1].level == "r"
    gathers = [st for st in first.stmts if st.kind == "load" and any(s.name.startswith("tmp")
                                                                       for s in st.args[1].free_symbols)]
    assert gathers, bodies[0].python()
