"""OpInfo sweep for AOT autograd (issue 4 acceptance): forward outputs and gradients equal eager, ember's
backend "aot_eager" vs torch.compile(backend="aot_eager"), side by side in one run.

For every op in PyTorch's ``op_db`` that supports float32 on CPU, up to ``--samples`` sample inputs: the op is
wrapped in a function of its tensor arguments, compiled by each engine, run, and compared with eager
(outputs; then gradients of the sum of the floating outputs w.r.t. the inputs that require grad). An engine
passes an op when every sample matches. Prints the two pass counts and each engine's failures.

    python benchmarks/opinfo_aot.py [--samples 2] [--limit N] [--ops name,...] [--out results.json]

On a many-core machine the sweep can run as N processes, each over every N-th op, and then be merged:

    python benchmarks/opinfo_aot.py --shard 3/12 --out shard3.json ...      # one of 12 processes
    python benchmarks/opinfo_aot.py --merge shard*.json                     # the pass counts over all shards

Each shard rewrites its ``--out`` file after every op, so a shard cut off by a time limit still counts the ops
it finished (the merged summary says how many ops each engine was run on).
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


def _differs(a, b, values: bool = True) -> str:
    """'' where the tensors ``a`` match eager's ``b``, else what differs first (which tensor, and how)."""
    if len(a) != len(b):
        return f"{len(a)} tensors against eager's {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if (x is None) != (y is None):
            return f"tensor {i}: {'None' if x is None else 'a tensor'} where eager has the other"
        if x is None:
            continue
        if not values:      # uninitialized memory: only the metadata is defined
            if x.shape != y.shape or x.dtype != y.dtype:
                return f"tensor {i}: {x.dtype}{list(x.shape)} against eager's {y.dtype}{list(y.shape)}"
            continue
        try:
            tol = 1e-4 if x.dtype in (torch.float32, torch.float64) else 2e-2
            torch.testing.assert_close(x, y, atol=tol, rtol=tol, equal_nan=True)
        except AssertionError as e:
            return f"tensor {i}: " + " ".join(str(e).split())[:200]
    return ""


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
    p.add_argument("--shard", default="", help="K/N: run only every N-th op, starting at the K-th (0-based)")
    p.add_argument("--merge", nargs="*", help="merge the --out files of shards and print the summary")
    a = p.parse_args()
    if a.merge:
        merged = _merge(a.merge)
        if a.out:
            _write(a.out, *merged)
        return
    dtype = getattr(torch, a.dtype)
    from torch.testing._internal.common_methods_invocations import op_db
    ops = [o for o in op_db if dtype in o.supported_dtypes(a.device)]
    if a.ops:
        want = set(a.ops.split(","))
        ops = [o for o in ops if o.name in want]
    if a.limit:
        ops = ops[:a.limit]
    if a.shard:
        k, n = (int(x) for x in a.shard.split("/"))
        ops = ops[k::n]
    engines = {"ember": _engine("ember", a), "torch.compile": _engine("torch", a)}
    passed = {k: [] for k in engines}
    failed = {k: {} for k in engines}
    t0 = time.time()
    warnings.simplefilter("ignore")
    tried = []
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
                    why = _differs(co, ro, values) or _differs(cg, rg, values)
                    if why:
                        ok = False
                        kind = "output" if _differs(co, ro, values) else "gradient"
                        failed[name][op.name] = f"mismatch ({kind} {why})"
                        break
                if ok:
                    passed[name].append(op.name)
            except Exception as e:      # noqa: BLE001
                failed[name][op.name] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        tried.append(op.name)
        if a.out:
            _write(a.out, passed, failed, tried)
        if (i + 1) % 25 == 0:
            print(f"  {i + 1}/{len(ops)} ops, {time.time() - t0:.0f} s", file=sys.stderr)
    print(f"OpInfo {a.dtype} {a.device}, up to {a.samples} samples per op, {len(ops)} ops, ember backend "
          f"{a.backend} vs torch.compile backend {a.torch_backend}, {time.time() - t0:.0f} s")
    _summary(passed, failed)
    if a.out:
        _write(a.out, passed, failed, tried)


def _write(path, passed, failed, tried) -> None:
    Path(path).write_text(json.dumps({"passed": passed, "failed": failed, "tried": tried}, indent=1))


def _summary(passed, failed) -> None:
    for name in passed:
        print(f"  {name:<14} passed {len(passed[name])}")
    for a, b in (("torch.compile", "ember"), ("ember", "torch.compile")):
        only = sorted(set(passed[a]) - set(passed[b]))
        print(f"  passed by {a} but not {b} ({len(only)}): " + ", ".join(only[:60]))
        for op in only[:40]:
            print(f"    {op}: {failed[b].get(op)}")


def _merge(paths) -> None:
    """Sum the shards' results; an op counts once (op_db holds a few names twice, with variants)."""
    passed, failed, tried = {}, {}, []
    for path in paths:
        d = json.loads(Path(path).read_text())
        tried += d.get("tried", [])
        for name, ops in d["passed"].items():
            passed.setdefault(name, []).extend(ops)
        for name, ops in d["failed"].items():
            failed.setdefault(name, {}).update(ops)
    print(f"merged {len(paths)} shards: {len(tried)} ops run by both engines")
    _summary(passed, failed)
    return passed, failed, tried


if __name__ == "__main__":
    main()
