"""Capture time (the first call) of the nanoGPT-style model: ember vs torch.compile(backend="eager").

Each measurement is ``compile(...)`` plus the first call, with ``fullgraph=True`` and the eager backend, so it
is capture (bytecode analysis, graph building, guards, glue) and not code generation. By default every
measurement runs in a fresh process (cold caches); ``--in-process`` instead resets both compilers between runs
in this process. Imports (torch, torch._dynamo, ember) and one eager call of the model happen before the clock
starts, so neither side is charged for them. Reported: the median over ``--runs`` runs of the first call and
of the median of the 10 cached calls after it, per case:

- ``forward``: eval mode, no targets (inference);
- ``forward+loss``: train mode with targets (logits and the cross-entropy loss).

    python benchmarks/capture_time.py [--runs 5] [--n-layer 4] [--in-process] [--threads N] [--out results.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

COMPILERS = ("ember", "torch.compile")
CACHED_CALLS = 10
CASES = ("forward", "forward+loss")


def _setup(case: str, n_layer: int):
    import torch
    import torch._dynamo  # noqa: F401  (imported before timing: not charged to torch.compile)

    from tests.models import GPTConfig, gpt_factory

    model, make_batch = gpt_factory(0, GPTConfig(n_layer=n_layer))
    batch = make_batch(1)
    if case == "forward":
        model.eval()
        args, kwargs = batch.args, {}
    else:
        model.train()
        args, kwargs = batch.args, {"targets": batch.target}
    model(*args, **kwargs)  # warm ATen and the allocator
    return model, args, kwargs


def _compile(compiler: str, model):
    if compiler == "ember":
        import ember
        return ember.compile(model, backend="eager", fullgraph=True)
    import torch
    return torch.compile(model, backend="eager", fullgraph=True)


def _reset() -> None:
    import torch._dynamo
    torch._dynamo.reset()
    try:
        import ember
        ember.reset()
    except Exception:
        pass


def measure_once(compiler: str, case: str, n_layer: int) -> dict:
    """One measurement in this process: seconds for compile + first call, and the median of the next
    ``CACHED_CALLS`` (cached) calls."""
    model, args, kwargs = _setup(case, n_layer)
    if compiler == "ember":
        import ember
        ember.compile  # noqa: B018  (resolve the lazy import before timing)
    t0 = time.perf_counter()
    compiled = _compile(compiler, model)
    compiled(*args, **kwargs)
    first = time.perf_counter() - t0
    cached = []
    for _ in range(CACHED_CALLS):
        t = time.perf_counter()
        compiled(*args, **kwargs)
        cached.append(time.perf_counter() - t)
    return {"first_s": first, "cached_s": statistics.median(cached)}


def measure_fresh(compiler: str, case: str, n_layer: int, threads: int | None = None) -> dict:
    cmd = [sys.executable, __file__, "--child", compiler, case, "--n-layer", str(n_layer)]
    if threads:
        cmd += ["--threads", str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        raise RuntimeError(tail[-1] if tail else f"exit {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--in-process", action="store_true", help="reset between runs instead of fresh processes")
    p.add_argument("--case", choices=CASES, action="append")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads in each measurement")
    p.add_argument("--out", type=Path)
    p.add_argument("--child", nargs=2, metavar=("COMPILER", "CASE"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    if a.child:
        print(json.dumps(measure_once(a.child[0], a.child[1], a.n_layer)))
        return 0

    results: dict = {}
    for case in a.case or CASES:
        for compiler in COMPILERS:
            key = f"{case} / {compiler}"
            runs, error = [], None
            for _ in range(a.runs):
                try:
                    if a.in_process:
                        _reset()
                        runs.append(measure_once(compiler, case, a.n_layer))
                    else:
                        runs.append(measure_fresh(compiler, case, a.n_layer, a.threads))
                except Exception as e:
                    error = f"{type(e).__name__}: {e}"
                    break
            results[key] = {"case": case, "compiler": compiler, "runs": runs, "error": error}
            if runs:
                results[key]["first_ms_median"] = 1e3 * statistics.median(r["first_s"] for r in runs)
                results[key]["cached_ms_median"] = 1e3 * statistics.median(r["cached_s"] for r in runs)

    how = "in-process with reset" if a.in_process else "fresh process"
    print(f"nanoGPT n_layer={a.n_layer}, {how} per run, median of {a.runs}")
    print(f"{'case':<14} {'compiler':<14} {'first call ms':>14} {'cached call ms':>15}  "
          "ratio to torch.compile")
    for case in a.case or CASES:
        tc = results.get(f"{case} / torch.compile", {}).get("first_ms_median")
        for compiler in COMPILERS:
            r = results[f"{case} / {compiler}"]
            if r["error"]:
                print(f"{case:<14} {compiler:<14} {'error':>14}  {r['error'][:100]}")
                continue
            ratio = f"{r['first_ms_median'] / tc:.2f}" if tc else ""
            first, cached = r["first_ms_median"], r["cached_ms_median"]
            print(f"{case:<14} {compiler:<14} {first:>14.1f} {cached:>15.2f}  {ratio}")
    if a.out:
        import torch
        meta = {"python": platform.python_version(), "torch": torch.__version__, "n_layer": a.n_layer,
                "runs": a.runs, "fresh_process": not a.in_process, "device": "cpu",
                "threads": torch.get_num_threads(), "cached_calls": CACHED_CALLS}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
