"""Run by tests/runtime/test_graph_cache.py in fresh processes: compiles a table of programs (inference,
training, a dynamic batch, a size relation, an output view of an input, buffer mutation), checks each against
eager on fresh random inputs (values, gradients, mutated buffers) and prints one JSON line: the failures and
``ember.stats()``.

    python tests/runtime/graph_cache_child.py [--load ARTIFACTS] [--save ARTIFACTS] [--cases NAME,NAME]
"""
from __future__ import annotations

import copy
import json
import os
import sys

import torch

import ember


def _close(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                               torch.nn.Linear(16, 4))


class _Views(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x):
        return self.lin(x).relu(), x.t()


def _train(model: torch.nn.Module, batches, extra=()) -> bool:
    """Compiled vs eager on a copy: outputs, parameter gradients and buffers after each step."""
    ref = copy.deepcopy(model)
    run = ember.compile(model)
    ok = True
    for b in batches:
        x = torch.randn(b, *extra)
        out, want = run(x), ref(x)
        outs, wants = (out, want) if isinstance(out, tuple) else ((out,), (want,))
        sum(o.float().pow(2).sum() for o in outs if o.requires_grad).backward()
        sum(o.float().pow(2).sum() for o in wants if o.requires_grad).backward()
        ok &= _close(outs, wants)
        ok &= all(_close(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
        ok &= all(_close(p, q) for p, q in zip(model.buffers(), ref.buffers()))
        model.zero_grad(), ref.zero_grad()
    return bool(ok)


def mlp_infer() -> bool:
    m = _mlp().eval()
    run = ember.compile(m)
    with torch.no_grad():
        return all(_close(run(x), m(x)) for x in (torch.randn(6, 8), torch.randn(6, 8)))


def mlp_train() -> bool:
    return _train(_mlp(), (5, 5), (8,))


def dynamic_batch_train() -> bool:
    return _train(_mlp(), (4, 8, 11), (8,))      # the second call recompiles with a symbolic batch


def batchnorm_train() -> bool:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.BatchNorm1d(7), torch.nn.ReLU())
    return _train(m, (6, 6), (5,))               # running stats: buffers written back


def view_output() -> bool:
    torch.manual_seed(0)
    return _train(_Views(), (6, 6), (6,))


def size_relation() -> bool:
    """``x * y.sum(1)`` with both sizes symbolic relies on ``len(x) == len(y)``: a warm process must guard it."""
    run = ember.compile(lambda x, y: x * y.sum(1))
    ok = all(_close(run(x, y), x * y.sum(1)) for n in (4, 8, 9) for x, y in [(torch.randn(n), torch.randn(n, 4))])
    try:
        run(torch.randn(5), torch.randn(7, 4))
    except RuntimeError:
        return ok
    return False


def _leaves(*ts):
    ins = [t.clone().requires_grad_() for t in ts]
    return ins, [t.detach().clone().requires_grad_() for t in ins]


class _Branchy(torch.nn.Module):
    """A ``torch.cond`` on the parameters' data: the captured graph holds each branch as a subgraph."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(5, 5)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda a: self.lin(a).sin(), lambda a: self.lin(a).cos() * 2, (x,))


def cond_infer() -> bool:
    torch.manual_seed(0)
    m = _Branchy().eval()
    run = ember.compile(m)
    with torch.no_grad():
        return all(_close(run(x), m(x)) for x in (torch.randn(4, 5), -torch.rand(4, 5), torch.rand(4, 5)))


def vmap_train() -> bool:
    """``torch.func.vmap``'s body is a subgraph of the captured graph; the weight's gradient flows through it."""
    f = lambda x, w: torch.func.vmap(lambda r: (r @ w).tanh())(x)  # noqa: E731
    run = ember.compile(f)
    ok = True
    for _ in range(2):
        x = torch.randn(4, 6)
        (w,), (w2,) = _leaves(torch.randn(6, 3))
        out, want = run(x, w), f(x, w2)
        out.pow(2).sum().backward()
        want.pow(2).sum().backward()
        ok &= _close(out, want) and _close(w.grad, w2.grad)
    return bool(ok)


def _outputs(x, y):
    """Two differentiable outputs; ``y / x`` has x[0] == 0, so its gradient is inf there."""
    return y / x, (x * y * 2).sin()


def _two_outputs(uses) -> bool:
    """Training with two differentiable outputs; ``uses``: per call, which outputs the loss reads. A loss that
    leaves ``y / x`` unused must leave the inf out of x's gradient (eager never computes it)."""
    run = ember.compile(_outputs)
    ok = True
    for use in uses:
        x = torch.randn(4, 5)
        x[0] = 0.0
        ins, ref = _leaves(x, torch.randn(4, 5))
        outs, wants = run(*ins), _outputs(*ref)
        sum(outs[i].sum() for i in use).backward()
        sum(wants[i].sum() for i in use).backward()
        ok &= _close(outs[1], wants[1]) and all(
            (a.grad is None and b.grad is None) or torch.equal(a.grad.isfinite(), b.grad.isfinite()) and
            _close(torch.nan_to_num(a.grad), torch.nan_to_num(b.grad)) for a, b in zip(ins, ref))
    return bool(ok)


def two_outputs_all_used() -> bool:
    return _two_outputs([(0, 1), (0, 1)])


def two_outputs_some_unused() -> bool:
    return _two_outputs([(1,), (0, 1), (0,), (1,)])


CASES = [mlp_infer, mlp_train, dynamic_batch_train, batchnorm_train, view_output, size_relation, cond_infer,
         vmap_train, two_outputs_all_used]
# a warm process compiles for these: the backward variant of a loss that leaves an output unused is built again
OTHER_CASES = [two_outputs_some_unused]


# what builds a graph (AOT tracing, functionalization, partitioning, decompositions): a warm process whose graphs
# the whole-graph cache serves imports none of it
TRACING_MODULES = ("ember.autograd.trace", "ember.autograd.functionalize", "ember.autograd.partition",
                   "ember.autograd.fake", "ember.decomp.core")
# what compiles a graph's kernels, and sympy's arithmetic (its first ``Add`` imports sympy.tensor.tensor and
# sympy.combinatorics, ~50 ms; a static graph served by the whole-graph cache does no arithmetic on sizes)
COMPILE_MODULES = ("ember.loopir.lower", "ember.loopir.schedule", "ember.codegen.cpp", "ember.codegen.triton",
                   "triton", "networkx", "sympy.combinatorics", "sympy.tensor.tensor")


def main() -> None:
    args = sys.argv[1:]
    if "--load" in args:
        with open(args[args.index("--load") + 1], "rb") as f:
            ember.load_cache_artifacts(f.read())
    torch.manual_seed(os.getpid())          # fresh inputs in every process
    failed = []
    only = args[args.index("--cases") + 1].split(",") if "--cases" in args else None
    for case in [c for c in CASES + OTHER_CASES if (c in CASES and only is None) or c.__name__ in (only or ())]:
        try:
            ok = case()
        except Exception as e:      # noqa: BLE001 - reported to the test
            ok = False
            print(f"{case.__name__}: {type(e).__name__}: {e}", file=sys.stderr)
        if not ok:
            failed.append(case.__name__)
    if "--save" in args:
        with open(args[args.index("--save") + 1], "wb") as f:
            f.write(ember.save_cache_artifacts())
    print(json.dumps({"failed": failed, "stats": ember.stats(),
                      "tracing_modules": sorted(m for m in TRACING_MODULES if m in sys.modules),
                      "compile_modules": sorted(m for m in COMPILE_MODULES if m in sys.modules)}))


if __name__ == "__main__":
    main()
