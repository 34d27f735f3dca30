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


CASES = [mlp_infer, mlp_train, dynamic_batch_train, batchnorm_train, view_output, size_relation]


def main() -> None:
    args = sys.argv[1:]
    if "--load" in args:
        with open(args[args.index("--load") + 1], "rb") as f:
            ember.load_cache_artifacts(f.read())
    torch.manual_seed(os.getpid())          # fresh inputs in every process
    failed = []
    only = args[args.index("--cases") + 1].split(",") if "--cases" in args else None
    for case in [c for c in CASES if only is None or c.__name__ in only]:
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
    print(json.dumps({"failed": failed, "stats": ember.stats()}))


if __name__ == "__main__":
    main()
