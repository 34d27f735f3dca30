"""Per-call overhead of a cached call: eager vs ember.compile vs torch.compile, both with backend="eager".

Two workloads where the tensor work is tiny, so the time is the wrapper's: (a) a function of two (8,) tensors
doing 10 ops; (b) a 20-layer MLP module of width 16. Every variant runs in this one process on the same
inputs; after a warm-up, calls are timed in batches with ``time.perf_counter_ns`` (batches of the variants
interleaved, so drift hits all alike) and the median per-call time over ``--calls`` calls is reported, with
the overhead over eager and ember's overhead as a fraction of torch.compile's (issue 2 target: at most 1/3).

    python benchmarks/overhead.py [--calls 10000] [--batch 100] [--threads 1] [--no-grad] [--out results.json]
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

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # the repo root, for `tests.*`
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


class _Recorder:
    """A torch.compile-contract backend that keeps the captured graph and its example inputs."""

    def __init__(self):
        self.graphs: list = []

    def __call__(self, gm, example_inputs):
        self.graphs.append((gm, list(example_inputs)))
        return gm.forward


def _bare_graph(compile_fn, target, args) -> Callable | Exception:
    """The captured FX graph called directly on its example inputs: the floor under any wrapper."""
    try:
        rec = _Recorder()
        compile_fn(target, backend=rec)(*args)
        if len(rec.graphs) != 1:
            return RuntimeError(f"expected one graph, got {len(rec.graphs)}")
        fwd, ex = rec.graphs[0][0].forward, rec.graphs[0][1]
        return lambda *_: fwd(*ex)
    except Exception as e:
        return e


def _reset_all() -> None:
    import torch._dynamo
    torch._dynamo.reset()
    try:
        import ember
        ember.reset()
    except Exception:
        pass


def variants(target, args) -> dict[str, Callable | Exception]:
    """eager, the two compiled wrappers (backend="eager"), and each one's bare captured graph. The graphs are
    captured first and the caches reset before the timed wrappers compile, so no timed wrapper has extra cache
    entries to skip over."""
    out: dict[str, Callable | Exception] = {"eager": target}
    try:
        import ember
        ember_compile = ember.compile
    except Exception as e:  # ember not built yet: report, keep measuring the rest
        ember_compile = None
        out["ember"] = out["ember graph"] = e
    import torch._dynamo  # noqa: F401

    _reset_all()
    if ember_compile is not None:
        out["ember graph"] = _bare_graph(ember_compile, target, args)
    out["torch.compile graph"] = _bare_graph(torch.compile, target, args)
    _reset_all()
    if ember_compile is not None:
        try:
            out["ember"] = ember_compile(target, backend="eager")
        except Exception as e:
            out["ember"] = e
    try:
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
            if not name.endswith("graph"):  # a bare graph returns the graph's flat outputs
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
    with torch.no_grad() if args_ns.no_grad else torch.enable_grad():
        fns = variants(target, args)
        errors = check_and_warm(fns, args, args_ns.warmup)
        per_call = time_batches(fns, args, args_ns.calls, args_ns.batch)
    eager = per_call["eager"]
    res = {"per_call_us": {k: v / 1e3 for k, v in per_call.items()},
           "overhead_us": {k: (v - eager) / 1e3 for k, v in per_call.items() if k in WRAPPERS},
           "wrapper_us": {k: (v - per_call[f"{k} graph"]) / 1e3 for k, v in per_call.items()
                          if k in WRAPPERS and f"{k} graph" in per_call},
           "errors": errors}
    for key, what in (("overhead_us", "overhead"), ("wrapper_us", "wrapper")):
        d = res[key]
        if "ember" in d and "torch.compile" in d and d["torch.compile"] > 0:
            res[f"ember_{what}_fraction_of_torch_compile"] = d["ember"] / d["torch.compile"]
    return res


WRAPPERS = ("ember", "torch.compile")


def print_table(results: dict) -> None:
    print("overhead = compiled − eager (the acceptance number)\n"
          "wrapper  = compiled − its own bare captured graph (guards, input pulling, glue); meaningful\n"
          "           also where the graph beats eager's module calls and the overhead is negative")
    print(f"{'case':<18} {'variant':<20} {'µs/call':>9} {'overhead µs':>12} {'wrapper µs':>11}"
          f" {'ember/tc overhead':>18} {'ember/tc wrapper':>17}")
    for case, r in results.items():
        for v, us in r["per_call_us"].items():
            oh, wr = r["overhead_us"].get(v), r["wrapper_us"].get(v)
            f_oh = r.get("ember_overhead_fraction_of_torch_compile") if v == "ember" else None
            f_wr = r.get("ember_wrapper_fraction_of_torch_compile") if v == "ember" else None
            print(f"{case:<18} {v:<20} {us:>9.2f} {_fmt(oh, 12)} {_fmt(wr, 11)}"
                  f" {_fmt(f_oh, 18)} {_fmt(f_wr, 17)}")
        for v, err in r["errors"].items():
            print(f"{case:<18} {v:<20} {'error':>9}  {err[:100]}")


def _fmt(x, width: int) -> str:
    return f"{x:>{width}.2f}" if x is not None else " " * width


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
