"""Dynamic shapes, capture stage: the shape rules of ops whose PyTorch meta kernels take only concrete sizes
(ember/capture/torch/symrules.py). Each program reads every size of the op's result in Python, so an
unknown size would compile the frame static (one graph per size). Backend "eager": outputs equal eager's,
one symbolic graph serves the changed sizes, and the graph count is at most torch.compile's.

Programs here use ops that later stages do not take symbolically yet (see tests/dynamic_programs.py for the
table every stage runs)."""
import pytest
import torch
import torch.nn.functional as F

import ember


def _read(y):
    return y.reshape(*y.shape) * 2 + y.size(-1)


def _torch_count(fn, inputs) -> int:
    import torch._dynamo
    torch._dynamo.reset()
    n = [0]

    def counting(gm, example_inputs):
        n[0] += 1
        return gm.forward
    c = torch.compile(fn, backend=counting)
    for args in inputs:
        c(*args)
    torch._dynamo.reset()
    return n[0]


CASES = {
    "unbind_static_dim": (lambda x: sum(_read(a) for a in x.unbind(1)), lambda n: (torch.randn(n, 3),)),
    "unbind_dynamic_dim": (lambda x: torch.stack([a.sum() for a in x.unbind(0)]), lambda n: (torch.randn(n, 3),)),
    "split_loop": (lambda x: torch.stack([_read(a).sum() for a in x.split(3)]), lambda n: (torch.randn(n, 2),)),
    "split_sections": (lambda x: _read(x.split([2, x.size(1) - 2], dim=1)[1]), lambda n: (torch.randn(3, n),)),
    "chunk_dynamic_dim": (lambda x: _read(x.chunk(2)[1]), lambda n: (torch.randn(2 * n, 3),)),
    "cumsum": (lambda x: _read(x.cumsum(0)), lambda n: (torch.randn(n, 3),)),
    "unfold": (lambda x: _read(x.unfold(0, 2, 1)), lambda n: (torch.randn(n, 3),)),
    "interpolate_scale": (lambda x: _read(F.interpolate(x, scale_factor=2.0)), lambda n: (torch.randn(1, n, 4),)),
    "interpolate_size": (lambda x: _read(F.interpolate(x, size=x.size(-1) * 2)), lambda n: (torch.randn(1, 2, n),)),
    "repeat_expand_as": (lambda x: _read(x.repeat(2, 1)) .sum() + _read(x[:1].expand_as(x)).sum(),
                         lambda n: (torch.randn(n, 3),)),
    "transpose_t_squeeze": (lambda x: _read(x.unsqueeze(1).transpose(0, 2).squeeze(1).t()),
                            lambda n: (torch.randn(n, 3),)),
    "narrow_by_size": (lambda x: _read(x.narrow(0, 1, x.size(0) - 1)), lambda n: (torch.randn(n, 3),)),
    "all_any_amax": (lambda x: _read((x > 0).all(1).float() + (x > 0).any(1).float() + x.amax(1)),
                     lambda n: (torch.randn(n, 3),)),
    "addmm": (lambda x, w: _read(torch.addmm(torch.zeros(5), x, w)), lambda n: (torch.randn(n, 4), torch.randn(4, 5))),
    "to_dtype_layer_norm": (lambda x: _read(F.layer_norm(x.double(), (3,)).float()), lambda n: (torch.randn(n, 3),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_keeps_sizes_symbolic(name):
    fn, make = CASES[name]
    sizes = (3, 5, 8, 6)
    ember.reset()
    c = ember.compile(fn, backend="eager")
    calls = []
    for s in sizes:
        torch.manual_seed(s)
        args = make(s)
        calls.append(args)
        torch.testing.assert_close(c(*args), fn(*args))
    st = ember.stats()
    assert st["fallbacks_to_eager"] == 0, st
    assert st["graphs_compiled"] <= _torch_count(fn, calls), st
    assert st["symbolic_graphs"] >= 1, st


def test_unrolled_pieces_guard_their_count():
    """split/unbind unroll one output per piece: a size giving another count must not reuse the entry (a
    wrong answer before: the pieces of the first symbolic call were reused)."""
    for fn in (lambda x: torch.stack([a.sum() for a in x.split(2)]),
               lambda x: torch.stack([a.sum() for a in x.unbind(0)])):
        ember.reset()
        c = ember.compile(fn, backend="eager")
        for n in (3, 5, 8, 6, 9):
            x = torch.randn(n, 4)
            torch.testing.assert_close(c(x), fn(x))
