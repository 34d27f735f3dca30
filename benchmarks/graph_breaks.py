"""A 12-layer model with a ``print`` of a scalar per layer: eager vs torch.compile vs ember, one run.

Issue 3 acceptance: time per call of a model whose every layer graph-breaks, ember vs torch.compile with the
same kind of backend (``backend="eager"``: the captured graphs run as they are) vs eager, and the number of
graphs each compiler produces.

Two models (tests/capture/graph_break_models.py), both an input projection, 12 pre-norm residual MLP blocks
(width ``--width``) and a head:

- ``print_in_block``: each block's ``forward`` prints ``x.pow(2).mean().item()``;
- ``print_in_loop``: the model's own ``for i, layer in enumerate(self.layers)`` loop prints it after each
  layer.

Every variant is checked against eager first (outputs and printed text). Timed calls print into a null stream;
after ``--warmup`` calls, calls are timed in interleaved batches and the median per-call time is reported, for
forward calls with autograd (parameters require grad) and under ``torch.no_grad()``. Graph counts: graphs
handed to the backend while compiling and running (a counting backend that behaves exactly like
``backend="eager"``), and what ``ember.explain`` / ``torch._dynamo.explain`` report.

    python benchmarks/graph_breaks.py [--calls 400] [--batch 20] [--warmup 5] [--width 64] [--threads 1]
                                 [--out results.json]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.capture.graph_break_models import LoopPrintingStack, PrintingStack  # noqa: E402

MODELS = {"print_in_block": PrintingStack, "print_in_loop": LoopPrintingStack}
VARIANTS = ("eager", "torch.compile", "ember")


class CountingEager:
    """``backend="eager"`` (run the captured graph as is) that counts the graphs it is handed."""

    def __init__(self):
        self.count = 0

    def __call__(self, gm, example_inputs):
        self.count += 1
        return gm.forward


class _Null(io.TextIOBase):
    def write(self, s):
        return len(s)


def _reset() -> None:
    import torch._dynamo

    import ember
    torch._dynamo.reset()
    ember.reset()


def make_variants(model: torch.nn.Module) -> tuple[dict[str, Callable], dict[str, CountingEager]]:
    import ember
    counters = {"torch.compile": CountingEager(), "ember": CountingEager()}
    fns = {"eager": model,
           "torch.compile": torch.compile(model, backend=counters["torch.compile"]),
           "ember": ember.compile(model, backend=counters["ember"])}
    return fns, counters


def check(fns: dict, x: torch.Tensor) -> dict[str, str]:
    """First calls (they compile): each variant's output and printed text against eager's."""
    errors = {}
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        expected = fns["eager"](x)
    want = buf.getvalue()
    for name in VARIANTS[1:]:
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                out = fns[name](x)
            torch.testing.assert_close(out, expected)
            if buf.getvalue() != want:
                errors[name] = "printed output differs from eager's"
        except Exception as e:  # noqa: BLE001 - reported in the table
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return errors


def time_batches(fns: dict, x, calls: int, batch: int, warmup: int) -> dict[str, float]:
    """Median per-call seconds of each variant, timed in interleaved batches whose order rotates."""
    samples: dict[str, list[float]] = {n: [] for n in fns}
    with contextlib.redirect_stdout(_Null()):
        for fn in fns.values():
            for _ in range(warmup):
                fn(x)
        order = list(fns.items())
        for r in range(max(1, calls // batch)):
            for name, fn in order[r % len(order):] + order[:r % len(order)]:
                t0 = time.perf_counter()
                for _ in range(batch):
                    fn(x)
                samples[name].append((time.perf_counter() - t0) / batch)
    return {n: statistics.median(s) for n, s in samples.items()}


def explain_counts(cls, width: int, x) -> dict[str, dict]:
    import torch._dynamo

    import ember
    out = {}
    torch.manual_seed(0)
    model = cls(d=width)
    _reset()
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            e = ember.explain(model)(x)
            out["ember"] = {"graphs": e.graph_count, "breaks": e.graph_break_count}
        except Exception as ex:  # noqa: BLE001
            out["ember"] = {"error": f"{type(ex).__name__}: {ex}"}
        try:
            t = torch._dynamo.explain(model)(x)
            out["torch.compile"] = {"graphs": t.graph_count, "breaks": t.graph_break_count}
        except Exception as ex:  # noqa: BLE001
            out["torch.compile"] = {"error": f"{type(ex).__name__}: {ex}"}
    _reset()
    return out


def run_model(name: str, cls, args) -> dict:
    import torch._dynamo.utils
    res: dict = {"explain": explain_counts(cls, args.width, torch.randn(args.rows, args.width))}
    for mode in ("autograd", "no_grad"):
        torch.manual_seed(0)
        model = cls(d=args.width)
        x = torch.randn(args.rows, args.width, generator=torch.Generator().manual_seed(1))
        _reset()
        torch._dynamo.utils.counters.clear()
        with torch.no_grad() if mode == "no_grad" else torch.enable_grad():
            fns, counters = make_variants(model)
            errors = check(fns, x)
            for n in errors:
                fns.pop(n)
            per_call = time_batches(fns, x, args.calls, args.batch, args.warmup)
        res[mode] = {"per_call_ms": {n: s * 1e3 for n, s in per_call.items()},
                     "graphs": {n: c.count for n, c in counters.items()},
                     "dynamo_unique_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"],
                     "errors": errors}
    _reset()
    return res


def print_table(results: dict) -> None:
    print(f"{'model':<15} {'mode':<9} {'variant':<14} {'ms/call':>8} {'vs eager':>9} {'graphs':>7}"
          f" {'explain graphs':>15} {'explain breaks':>15}")
    for model, r in results.items():
        for mode in ("autograd", "no_grad"):
            m = r[mode]
            eager = m["per_call_ms"].get("eager")
            for v in VARIANTS:
                ex = r["explain"].get(v, {})
                if v in m["errors"]:
                    print(f"{model:<15} {mode:<9} {v:<14} failed: {m['errors'][v]}")
                    continue
                ms = m["per_call_ms"][v]
                rel = f"{ms / eager:.2f}x" if eager else "-"
                g = m["graphs"].get(v, "-")
                eg = ex.get("graphs", ex.get("error", "-")) if v != "eager" else "-"
                eb = ex.get("breaks", "-") if v != "eager" else "-"
                print(f"{model:<15} {mode:<9} {v:<14} {ms:>8.3f} {rel:>9} {g!s:>7} {eg!s:>15} {eb!s:>15}")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import warnings
    warnings.filterwarnings("ignore")
    results = {}
    for name in args.models.split(","):
        results[name] = run_model(name, MODELS[name], args)
    print(f"torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}, "
          f"{args.threads} thread(s), width {args.width}, batch {args.rows}, 12 layers, "
          f"median of {max(1, args.calls // args.batch)} batches of {args.batch} calls;\n"
          f"backend=\"eager\" for both compilers; 'graphs' = graphs handed to the backend while checking, "
          f"warming up and timing")
    print_table(results)
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    return results


if __name__ == "__main__":
    os.environ.setdefault("TORCHDYNAMO_VERBOSE", "0")
    main()
