"""OpInfo sweep for AOT autograd (issue 4 acceptance): forward outputs and gradients equal eager, ember's
backend "aot_eager" vs torch.compile(backend="aot_eager"), side by side in one run.

For every op in PyTorch's ``op_db`` that supports float32 on CPU, up to ``--samples`` sample inputs: the op is
wrapped in a function of its tensor arguments, compiled by each engine, run, and compared with eager
(outputs; then gradients of the sum of the floating outputs w.r.t. the inputs that require grad). An engine
passes an op when every sample matches. Prints the two pass counts and each engine's failures.

    python bench/opinfo_aot.py [--samples 2] [--limit N] [--ops name,...] [--out results.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _flat_tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _flat_tensors(y)]
    if isinstance(x, dict):
        return [t for y in x.values() for t in _flat_tensors(y)]
    return []


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(y) for y in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _run(fn, sample):
    args = _clone([sample.input, *sample.args])
    kwargs = _clone(dict(sample.kwargs))
    out = fn(*args, **kwargs)
    leaves = [t for t in _flat_tensors((args, kwargs)) if t.requires_grad]
    outs = [o for o in _flat_tensors(out) if o.is_floating_point() and o.requires_grad]
    grads = []
    if leaves and outs:
        loss = sum(o.sum() for o in outs)
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return _flat_tensors(out), list(grads)


_UNINITIALIZED = ("empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted")


def _same(a, b, values: bool = True) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if (x is None) != (y is None):
            return False
        if x is None:
            continue
        if not values:      # uninitialized memory: only the metadata is defined
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            continue
        try:
            tol = 1e-4 if x.dtype in (torch.float32, torch.float64) else 2e-2
            torch.testing.assert_close(x, y, atol=tol, rtol=tol, equal_nan=True)
        except AssertionError:
            return False
    return True


def _engine(name, args):
    if name == "ember":
        import ember
        opts = {"cpu_backend": args.cpu_backend} if args.backend == "ember" else None

        def make(op):
            return ember.compile(lambda *a, **k: op(*a, **k), backend=args.backend, options=opts)
        return make

    def make(op):
        import torch._dynamo
        torch._dynamo.reset()
        return torch.compile(lambda *a, **k: op(*a, **k), backend=args.torch_backend)
    return make


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--ops", default="")
    p.add_argument("--out", default="")
    p.add_argument("--backend", default="aot_eager", help="ember's backend (aot_eager or ember)")
    p.add_argument("--torch-backend", default="aot_eager", help="torch.compile's backend (aot_eager or inductor)")
    p.add_argument("--cpu-backend", default="cpp", help="ember's CPU kernel backend with --backend ember")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    a = p.parse_args()
    dtype = getattr(torch, a.dtype)
    from torch.testing._internal.common_methods_invocations import op_db
    ops = [o for o in op_db if dtype in o.supported_dtypes(a.device)]
    if a.ops:
        want = set(a.ops.split(","))
        ops = [o for o in ops if o.name in want]
    if a.limit:
        ops = ops[:a.limit]
    engines = {"ember": _engine("ember", a), "torch.compile": _engine("torch", a)}
    passed = {k: [] for k in engines}
    failed = {k: {} for k in engines}
    t0 = time.time()
    warnings.simplefilter("ignore")
    for i, op in enumerate(ops):
        try:
            samples = list(op.sample_inputs(a.device, dtype, requires_grad=op.supports_autograd))[:a.samples]
        except Exception:       # noqa: BLE001 - an OpInfo that cannot make samples is not counted
            continue
        refs = []
        try:
            for s in samples:
                refs.append(_run(op.op, s))
        except Exception:       # noqa: BLE001 - eager itself fails: not counted
            continue
        for name, make in engines.items():
            try:
                ok = True
                for s, (ro, rg) in zip(samples, refs):
                    co, cg = _run(make(op.op), s)
                    values = op.name not in _UNINITIALIZED
                    if not (_same(co, ro, values) and _same(cg, rg, values)):
                        ok = False
                        failed[name][op.name] = "mismatch"
                        break
                if ok:
                    passed[name].append(op.name)
            except Exception as e:      # noqa: BLE001
                failed[name][op.name] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        if (i + 1) % 25 == 0:
            print(f"  {i + 1}/{len(ops)} ops, {time.time() - t0:.0f} s", file=sys.stderr)
    print(f"OpInfo {a.dtype} {a.device}, up to {a.samples} samples per op, {len(ops)} ops, ember backend "
          f"{a.backend} vs torch.compile backend {a.torch_backend}, {time.time() - t0:.0f} s")
    for name in engines:
        print(f"  {name:<14} passed {len(passed[name])}")
    only_torch = sorted(set(passed["torch.compile"]) - set(passed["ember"]))
    print(f"  passed by torch.compile but not ember ({len(only_torch)}): " + ", ".join(only_torch[:60]))
    for op in only_torch[:40]:
        print(f"    {op}: {failed['ember'].get(op)}")
    if a.out:
        Path(a.out).write_text(json.dumps({"passed": passed, "failed": failed}, indent=1))


if __name__ == "__main__":
    main()
