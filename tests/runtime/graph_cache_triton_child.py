"""Run by tests/runtime/test_graph_cache_triton.py in fresh processes: compiles a table of programs with the
Triton kernel backend (CPU tensors under Triton's interpreter, ``cpu_backend="triton"``; the same code path
as CUDA tensors on a GPU), checks each against eager on fresh random inputs (values, gradients, buffers) and
prints one JSON line: the failures and ``ember.stats()``.

    python tests/runtime/graph_cache_triton_child.py [--cases NAME,NAME] [--autotune] [--choice first|last]
        [--save ARTIFACTS] [--load ARTIFACTS]

``--autotune``: mode max-autotune without CUDA graphs. ``--choice``: each autotuned kernel picks its first
candidate (the ATen matmul, the heuristic configuration) or its last (a Triton matmul template, another
configuration) instead of timing them, so that both kinds of choice go through the cache.
"""
from __future__ import annotations

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"        # before triton is imported

import torch  # noqa: E402

import ember  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_cache_child import _close, _mlp, _train  # noqa: E402


def _options() -> dict:
    return {"cpu_backend": "triton", "max_autotune": "--autotune" in sys.argv}


def _compile(fn):
    return ember.compile(fn, options=_options())


def softmax_infer() -> bool:
    f = lambda x: torch.softmax(x * 2, -1) + x.sum()  # noqa: E731
    run = _compile(f)
    return all(_close(run(x), f(x)) for x in (torch.randn(7, 33), torch.randn(7, 33)))


def wide_softmax_infer() -> bool:
    """Rows of 600: max-autotune also tries the looped form of the reduction (a ``_Reordered`` candidate)."""
    f = lambda x: torch.softmax(x, -1)  # noqa: E731
    run = _compile(f)
    return all(_close(run(x), f(x)) for x in (torch.randn(3, 600), torch.randn(3, 600)))


def matmul_train() -> bool:
    def f(x, w):
        return torch.softmax((x @ w).tanh(), -1).sum(0)
    run = _compile(f)
    ok = True
    for _ in range(2):
        x, w = torch.randn(8, 16), torch.randn(16, 32, requires_grad=True)
        w2 = w.detach().clone().requires_grad_()
        out, ref = run(x, w), f(x, w2)
        out.sum().backward()
        ref.sum().backward()
        ok &= _close(out, ref) and _close(w.grad, w2.grad)
    return bool(ok)


def mlp_train() -> bool:
    import copy
    torch.manual_seed(0)
    model = _mlp()
    ref = copy.deepcopy(model)
    run = _compile(model)
    ok = True
    for b in (6, 6):
        x = torch.randn(b, 8)
        out, want = run(x), ref(x)
        out.pow(2).sum().backward()
        want.pow(2).sum().backward()
        ok &= _close(out, want) and all(_close(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
        model.zero_grad(), ref.zero_grad()
    return bool(ok)


def dynamic_batch() -> bool:
    """The third call recompiles with a symbolic batch: kernels over size symbols, a grid computed per launch."""
    f = lambda x: (x.relu() * 3).sum(1)  # noqa: E731
    run = _compile(f)
    return all(_close(run(x), f(x)) for x in (torch.randn(4, 9), torch.randn(6, 9), torch.randn(11, 9)))


CASES = [softmax_infer, matmul_train, mlp_train, dynamic_batch, wide_softmax_infer]


def _force_choice(which: str) -> None:
    from ember.codegen import autotune

    def tune(self, args):
        best = 0 if which == "first" else len(self.choices) - 1
        autotune._save(self.key, {"choice": best, "name": self.name, "labels": self.labels, "times_us": []})
        return best
    autotune.Autotuned.tune = tune


def main() -> None:
    args = sys.argv[1:]
    if "--load" in args:
        with open(args[args.index("--load") + 1], "rb") as f:
            ember.load_cache_artifacts(f.read())
    if "--choice" in args:
        _force_choice(args[args.index("--choice") + 1])
    torch.manual_seed(os.getpid())          # fresh inputs in every process
    only = args[args.index("--cases") + 1].split(",") if "--cases" in args else None
    failed = []
    for case in [c for c in CASES if only is None or c.__name__ in only]:
        try:
            ok = case()
        except Exception as e:      # noqa: BLE001 - reported to the test
            ok = False
            import traceback
            traceback.print_exc()
            print(f"{case.__name__}: {type(e).__name__}: {e}", file=sys.stderr)
        if not ok:
            failed.append(case.__name__)
    if "--save" in args:
        with open(args[args.index("--save") + 1], "wb") as f:
            f.write(ember.save_cache_artifacts())
    print(json.dumps({"failed": failed, "stats": ember.stats()}))


if __name__ == "__main__":
    main()
