"""Per-call overhead of a cached call: eager vs ember.compile vs torch.compile, both with backend="eager".

Two workloads where the tensor work is tiny, so the time is the wrapper's: (a) a function of two (8,) tensors
doing 10 ops; (b) a 20-layer MLP module of width 16. Every variant runs in this one process on the same
inputs; after a warm-up, calls are timed in batches with ``time.perf_counter_ns`` (batches of the variants
interleaved, so drift hits all alike) and the median per-call time over ``--calls`` calls is reported, with
the overhead over eager and ember's overhead as a fraction of torch.compile's (issue 2 target: at most 1/3).

    python bench/overhead.py [--calls 10000] [--batch 100] [--threads 1] [--no-grad] [--out results.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def ten_ops(x, y):
    a = x + y
    b = a * x
    c = b - y
    d = torch.sin(c)
    e = d.relu()
    f = e / (y.abs() + 1)
    g = f.exp()
    h = g.sum()
    return h * x + a


def make_fn_case():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, generator=g), torch.randn(8, generator=g)
    return ten_ops, (x, y)


def make_mlp_case(depth: int = 20, width: int = 16):
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for i in range(depth):
        layers.append(nn.Linear(width, width))
        if i < depth - 1:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    x = torch.randn(4, width, generator=torch.Generator().manual_seed(1))
    return model, (x,)


CASES = {
    "fn_2x(8,)_10ops": make_fn_case,
    "mlp_20x16": make_mlp_case,
}


def variants(target) -> dict[str, Callable | Exception]:
    out: dict[str, Callable | Exception] = {"eager": target}
    try:
        import ember
        ember.reset()
        out["ember"] = ember.compile(target, backend="eager")
    except Exception as e:  # ember not built yet: report, keep measuring the rest
        out["ember"] = e
    try:
        import torch._dynamo
        out["torch.compile"] = torch.compile(target, backend="eager")
    except Exception as e:
        out["torch.compile"] = e
    return out


def check_and_warm(fns: dict, args: tuple, warmup: int) -> dict[str, str]:
    """Run each variant ``warmup`` times (compiles on the first call) and check it equals eager."""
    errors = {}
    expected = fns["eager"](*args)
    for name, fn in list(fns.items()):
        if isinstance(fn, Exception):
            errors[name] = f"{type(fn).__name__}: {fn}"
            continue
        try:
            for _ in range(warmup):
                out = fn(*args)
            torch.testing.assert_close(out, expected)
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    for name in errors:
        fns.pop(name, None)
    return errors


def time_batches(fns: dict, args: tuple, calls: int, batch: int) -> dict[str, float]:
    """Median per-call time (ns) of each variant over ``calls`` calls, timed in interleaved batches
    whose order rotates every round."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    rounds = max(1, calls // batch)
    loop = range(batch)
    order = list(fns.items())
    for r in range(rounds):
        for name, fn in order[r % len(order):] + order[:r % len(order)]:  # rotate who goes first
            t0 = time.perf_counter_ns()
            for _ in loop:
                fn(*args)
            samples[name].append((time.perf_counter_ns() - t0) / batch)
    return {name: statistics.median(s) for name, s in samples.items()}


def run_case(name: str, make, args_ns) -> dict:
    target, args = make()
    fns = variants(target)
    with torch.no_grad() if args_ns.no_grad else torch.enable_grad():
        errors = check_and_warm(fns, args, args_ns.warmup)
        per_call = time_batches(fns, args, args_ns.calls, args_ns.batch)
    eager = per_call["eager"]
    res = {"per_call_us": {k: v / 1e3 for k, v in per_call.items()},
           "overhead_us": {k: (v - eager) / 1e3 for k, v in per_call.items() if k != "eager"},
           "errors": errors}
    oh = res["overhead_us"]
    if "ember" in oh and "torch.compile" in oh and oh["torch.compile"] > 0:
        res["ember_overhead_fraction_of_torch_compile"] = oh["ember"] / oh["torch.compile"]
    return res


def print_table(results: dict) -> None:
    print(f"{'case':<18} {'variant':<14} {'µs/call':>10} {'overhead µs':>12} {'ember/tc overhead':>18}")
    for case, r in results.items():
        frac = r.get("ember_overhead_fraction_of_torch_compile")
        for v, us in r["per_call_us"].items():
            oh = r["overhead_us"].get(v)
            col = f"{frac:.2f}" if (v == "ember" and frac is not None) else ""
            print(f"{case:<18} {v:<14} {us:>10.2f} {'' if oh is None else f'{oh:12.2f}':>12} {col:>18}")
        for v, err in r["errors"].items():
            print(f"{case:<18} {v:<14} {'error':>10}  {err[:100]}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=10_000, help="timed calls per variant (default 10000)")
    p.add_argument("--batch", type=int, default=100, help="calls per timed batch (default 100)")
    p.add_argument("--warmup", type=int, default=200, help="untimed calls per variant first (default 200)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: leave as is)")
    p.add_argument("--no-grad", action="store_true", help="time under torch.no_grad()")
    p.add_argument("--case", choices=sorted(CASES), action="append", help="run only these cases")
    p.add_argument("--out", type=Path, help="write results as JSON here")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)

    results = {name: run_case(name, CASES[name], a) for name in (a.case or CASES)}
    print_table(results)
    if a.out:
        meta = {"python": platform.python_version(), "torch": torch.__version__,
                "machine": platform.machine(), "processor": platform.processor(),
                "threads": torch.get_num_threads(), "calls": a.calls, "batch": a.batch, "warmup": a.warmup,
                "grad": not a.no_grad, "device": "cpu"}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
