"""Data-dependent shapes inside graphs (issue 34 part 3): the programs of data_dependent_programs.py (nonzero,
boolean masks, masked_select, unique, ``.item()`` as a size, index_select/index_add by nonzero indices, a
top-2 mixture of experts), each called with random, all-false and all-true masks.

For each: outputs and gradients equal eager's, one compiled entry serves every data-dependent size (graph count
at most torch.compile's with capture_scalar_outputs / capture_dynamic_output_shape_ops), no graph break and no
fallback to eager. Also: the options off give a graph break that names them; a decision on a data-dependent
size breaks with a reason naming the condition; a torch._check the program relies on is checked at run time.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import torch

import ember

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_dependent_programs import KINDS, PROGRAMS, torch_graph_count  # noqa: E402


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b, (a, b)


def _call(fn, args, training):
    args = [a.detach().clone().requires_grad_(training and a.is_floating_point()) for a in args]
    out = fn(*args)
    flat = out if isinstance(out, (tuple, list)) else [out]
    outs = [o for o in flat if isinstance(o, torch.Tensor) and o.requires_grad]
    leaves = [a for a in args if a.requires_grad]
    grads = []
    if training and outs and leaves:
        loss = sum((o.float() * torch.linspace(0.5, 1.5, o.numel()).reshape(o.shape)).sum() for o in outs)
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return out, grads


ON = {"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": True}


class _Hints(logging.Handler):
    """Collects ember's perf hints: a graph that runs as captured or with eager autograd says so there."""

    def __init__(self):
        super().__init__()
        self.msgs = []

    def emit(self, record):
        self.msgs.append(record.getMessage())


EAGER_HINTS = ("runs as captured", "runs with eager autograd")


def run(prog, training: bool, options: dict | None = None) -> dict:
    ember.reset()
    hints = _Hints()
    logger = logging.getLogger("ember")
    logger.addHandler(hints)
    ember.set_logs(perf_hints=True)
    try:
        stats = _run(prog, training, options)
    finally:
        ember.set_logs(perf_hints=False)
        logger.removeHandler(hints)
    stats["eager_hints"] = [m for m in hints.msgs if any(h in m for h in EAGER_HINTS)]
    return stats


def _run(prog, training: bool, options: dict | None) -> dict:
    c = ember.compile(prog.fn, options={**ON, **(options or {})})
    for i, kind in enumerate(KINDS):
        torch.manual_seed(i)
        args = prog.inputs(kind)
        got, want = _call(c, args, training), _call(prog.fn, args, training)
        _same(got[0], want[0])
        assert len(got[1]) == len(want[1])
        for g, w in zip(got[1], want[1]):
            if w is None:
                assert g is None or not g.abs().sum()
            else:
                _same(g, w)
    return ember.stats()


def check(prog, training: bool, options: dict | None = None) -> dict:
    training = training and prog.grad
    stats = run(prog, training, options)
    assert stats["fallbacks_to_eager"] == 0, stats
    assert stats["graph_breaks"] == 0, stats
    assert stats["graphs_compiled"] <= torch_graph_count(prog, training), stats
    return stats


def cases(programs) -> list:
    """(program, training) pairs: inference for every program, training for those with a gradient (a program
    whose outputs are integers, such as nonzero's indices, has no training variant)."""
    return [pytest.param(p, t, id=f"{p.name}-{'train' if t else 'infer'}")
            for p in programs for t in (False, True) if p.grad or not t]


# Known gaps: (program, training) -> why its graph runs with eager autograd (values and gradients still equal
# eager's; the test fails if a gap closes, so that it leaves this list). None open.
GAPS: dict[tuple[str, bool], str] = {}


@pytest.mark.parametrize("prog, training", cases(PROGRAMS))
def test_program(prog, training):
    stats = check(prog, training)
    # ember's graphs ran on compiled kernels (the data-dependent op an ATen call inside the wrapper), not as
    # captured nor with eager autograd
    if (prog.name, training) in GAPS:
        assert stats["eager_hints"], f"gap closed: remove {prog.name} from GAPS"
    else:
        assert not stats["eager_hints"], stats["eager_hints"]


OFF = [("capture_dynamic_output_shape_ops", lambda x: x[x > 0] * 2, (torch.randn(6),)),
       ("capture_dynamic_output_shape_ops", lambda x: torch.nonzero(x) + 1, (torch.randn(6),)),
       ("capture_dynamic_output_shape_ops", lambda x: torch.unique(x.round()) + 1, (torch.randn(6),)),
       ("capture_scalar_outputs", lambda x, t: torch.arange(t.item()) + x.sum(), (torch.randn(6), torch.tensor(3)))]


@pytest.mark.parametrize("option,fn,args", OFF, ids=[f"{o}-{i}" for i, (o, _, _) in enumerate(OFF)])
def test_option_off_breaks_naming_it(option, fn, args):
    ember.reset()
    with pytest.raises(ember.Unsupported, match=option):
        ember.compile(fn, fullgraph=True, options={**ON, option: False})(*args)
    ember.reset()
    out = ember.compile(fn, options={**ON, option: False})(*args)
    _same(out, fn(*args))
    assert ember.stats()["graph_breaks"] == 1


def _branch_on_count(x):
    n = (x > 0).sum().item()
    if n > 2:
        return x * 2
    return x - 1


def _branch_on_rows(x):
    y = x[x > 0]
    if y.shape[0] > 3:
        return y.sum()
    return y.mean()


def _range_of_count(x):
    n = int((x > 0).sum().item()) + 1
    for _ in range(n):      # the glue after the break reads n from the graph's outputs
        x = x * 0.5 + 1
    return x


@pytest.mark.parametrize("fn", [_branch_on_count, _branch_on_rows, _range_of_count])
def test_decision_on_data_dependent_size_breaks_with_reason(fn):
    """No guess from a stand-in value: a branch on an unbacked size is a graph break naming the condition and
    the op that produced it; the results still equal eager's for every count."""
    ember.reset()
    with pytest.raises(ember.Unsupported, match=r"depends on a data-dependent size \(u0 = .* at .*test_data_dep"):
        ember.compile(fn, fullgraph=True, options=ON)(torch.randn(8))
    ember.reset()
    c = ember.compile(fn, options=ON)
    for kind in KINDS:
        x = torch.randn(8).abs() * (1 if kind != "empty" else -1)
        _same(c(x), fn(x))


def test_runtime_check_fails_clearly():
    """A torch._check on a data-dependent int is checked when the graph runs."""
    def fn(x, t):
        n = t.item()
        torch._check(n <= x.shape[0])
        return torch.arange(n) + x.sum()
    ember.reset()
    c = ember.compile(fn, fullgraph=True, options=ON)
    x = torch.randn(6)
    _same(c(x, torch.tensor(4)), fn(x, torch.tensor(4)))
    with pytest.raises(RuntimeError, match=r"u\d+ <= 6"):
        c(x, torch.tensor(9))
