"""Kernel microbenchmarks (issues 5 and 6): ember vs torch.compile vs eager, side by side in one run.

Cases: softmax, LayerNorm, RMSNorm, GELU-MLP epilogue (matmul + bias + GELU), cross-entropy over a 32k
vocabulary, a pointwise chain, and an Adam-like in-place update over many tensors. For each: the median time of
each engine (interleaved rounds, CUDA events on GPU), ember / torch.compile, and the bandwidth ember achieves
(ideal bytes read + written per call / time) as a fraction of the measured device copy bandwidth. Every case is
checked against eager first.

    python benchmarks/kernels.py [--device cuda|cpu] [--dtype float32|bfloat16] [--small] [--mode M] [--out file.json]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ember.bench.measure import synchronize, time_interleaved  # noqa: E402


def _nbytes(xs: Any) -> int:
    if isinstance(xs, torch.Tensor):
        return xs.numel() * xs.element_size()
    if isinstance(xs, (list, tuple)):
        return sum(_nbytes(x) for x in xs)
    return 0


def softmax(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b)


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def gelu_mlp(x, w, b):
    return F.gelu(x @ w + b)


def cross_entropy(logits, target):
    return F.cross_entropy(logits.float(), target)


def pointwise_chain(x, y):
    return torch.sigmoid(x) * y + torch.tanh(x - y) * 0.5 - torch.exp(-x.abs())


def adam_update(params, grads, m, v):
    with torch.no_grad():
        for p, g, mi, vi in zip(params, grads, m, v):
            mi.mul_(0.9).add_(g, alpha=0.1)
            vi.mul_(0.999).addcmul_(g, g, value=0.001)
            p.addcdiv_(mi, vi.sqrt().add_(1e-8), value=-1e-3)


def cases(device: str, dtype: torch.dtype, small: bool) -> list[tuple[str, Callable, tuple, int]]:
    """(name, fn, args, ideal bytes moved per call)."""
    g = torch.Generator(device="cpu").manual_seed(0)

    def r(*shape, dt=dtype):
        return torch.randn(*shape, generator=g, dtype=torch.float32).to(device=device, dtype=dt)
    rows, cols = (256, 1024) if small else (8192, 4096)
    out = []
    x = r(rows, cols)
    out.append(("softmax", softmax, (x,), 2 * _nbytes(x)))
    w, b = r(cols), r(cols)
    out.append(("layer_norm", layer_norm, (x, w, b), 2 * _nbytes(x) + _nbytes((w, b))))
    out.append(("rms_norm", rms_norm, (x, w), 2 * _nbytes(x) + _nbytes(w)))
    m, k, n = (256, 256, 1024) if small else (4096, 1024, 4096)
    a, wm, bm = r(m, k), r(k, n), r(n)
    out.append(("gelu_mlp", gelu_mlp, (a, wm, bm), _nbytes((a, wm, bm)) + m * n * a.element_size()))
    vocab, toks = (32768, 64) if small else (32768, 4096)
    logits = r(toks, vocab)
    target = torch.randint(0, vocab, (toks,), generator=g).to(device)
    out.append(("cross_entropy_32k", cross_entropy, (logits, target), _nbytes((logits, target))))
    numel = 1 << 16 if small else 1 << 26
    p, q = r(numel), r(numel)
    out.append(("pointwise_chain", pointwise_chain, (p, q), 3 * _nbytes(p)))
    sizes = [(64, 64), (256,), (128, 512)] * (4 if small else 40)
    params = [r(*s, dt=torch.float32) for s in sizes]
    grads = [r(*s, dt=torch.float32) for s in sizes]
    ms = [torch.zeros_like(t) for t in params]
    vs = [torch.zeros_like(t).abs() + 1e-3 for t in params]
    out.append(("adam_update", adam_update, (params, grads, ms, vs), 7 * _nbytes(params)))
    return out


def time_queued(fns: dict[str, Callable], sets: list[tuple], reps: int) -> dict[str, float]:
    """Median device milliseconds of each ``fn(*args)``, the engines interleaved, ``args`` cycling through
    ``sets`` (copies of the inputs: together larger than L2, so no call reads its inputs from cache), each call
    queued behind a GPU sleep so its host work (guards, wrapper, launches) is done before its kernels may run:
    the time of the kernels alone, without gaps (docs/performance.md). Host time per call is
    ``benchmarks/overhead.py``'s and ``benchmarks/host_enqueue.py``'s number."""
    import statistics

    from ember.bench.measure import sleep_cycles_per_ms
    host = host_ms(fns, sets)
    # at least 0.5 ms, and twice the slowest call's host work (an update over 480 tensors takes ~0.5 ms of
    # guards and launches): the sleep must outlast it, or the host time shows in the measured interval
    cycles = int(sleep_cycles_per_ms() * max(0.5, 2 * max(host.values())))
    samples: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(reps):
        args = sets[r % len(sets)]
        events = []
        for name in names[r % len(names):] + names[:r % len(names)]:
            torch.cuda._sleep(cycles)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[name](*args)
            e.record()
            events.append((name, s, e))
        torch.cuda.synchronize()
        for name, s, e in events:
            samples[name].append(s.elapsed_time(e))
    return {k: statistics.median(v) for k, v in samples.items()}


def host_ms(fns: dict[str, Callable], sets: list[tuple], reps: int = 7) -> dict[str, float]:
    """Median host milliseconds of each ``fn(*args)`` call (guards, wrapper, launches; the device is idle
    before each, so queueing does not block)."""
    import statistics
    out: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(reps):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn(*sets[r % len(sets)])
            out[name].append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return {k: statistics.median(v) for k, v in out.items()}


def copy_bandwidth(device: str) -> float:
    n = (1 << 28) if device == "cuda" else (1 << 24)
    x = torch.empty(n, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    times, _ = time_interleaved({"copy": lambda: y.copy_(x)}, torch.device(device), 20)
    return 2 * _nbytes(x) / (times["copy"].median_ms * 1e-3)


def _clone(args: Any) -> Any:
    if isinstance(args, torch.Tensor):
        return args.clone()
    if isinstance(args, (list, tuple)):
        return type(args)(_clone(a) for a in args)
    return args


def _close(a: Any, b: Any, tol: float) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.allclose(a.float(), b.float(), atol=tol, rtol=tol, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return all(_close(x, y, tol) for x, y in zip(a, b))
    return a == b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", default="")
    ap.add_argument("--only", default="")
    ap.add_argument("--queued", action="store_true",
                    help="CUDA: time the kernels alone (each call queued behind a GPU sleep, inputs rotated "
                         "through four copies); default: wall time of calls queued back to back")
    ap.add_argument("--mode", default=None, help="compile mode for both compilers (e.g. max-autotune-no-cudagraphs)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    import ember
    dtype = getattr(torch, a.dtype)
    dev = torch.device(a.device)
    bw = copy_bandwidth(a.device)
    tol = 1e-3 if dtype == torch.float32 else 3e-2
    results = []
    print(f"device {a.device} ({torch.cuda.get_device_name() if a.device == 'cuda' else 'cpu'}), {a.dtype}, "
          f"mode {a.mode or 'default'}, {'kernels alone (--queued)' if a.queued else 'calls back to back'}, "
          f"torch {torch.__version__}, copy bandwidth {bw / 1e9:.0f} GB/s")
    print(f"{'case':<20}{'eager ms':>10}{'torch ms':>10}{'ember ms':>10}{'ember/torch':>13}{'ember %bw':>11}"
          f"{'compile s torch/ember':>24}")
    for name, fn, args, nbytes in cases(a.device, dtype, a.small):
        if a.only and name not in a.only.split(","):
            continue
        torch._dynamo.reset()
        ember.reset()
        engines = {"eager": fn, "torch": torch.compile(fn, mode=a.mode), "ember": ember.compile(fn, mode=a.mode)}
        row: dict[str, Any] = {"case": name, "bytes": nbytes}
        expected = fn(*_clone(args))
        for k, f in engines.items():
            t0 = time.perf_counter()
            try:
                got = f(*_clone(args))
                synchronize(dev)
                row[f"compile_s_{k}"] = time.perf_counter() - t0
                row[f"correct_{k}"] = bool(_close(got, expected, tol)) if got is not None else \
                    _inplace_ok(fn, f, args, tol)
            except Exception as e:      # noqa: BLE001
                row[f"error_{k}"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        if a.queued and dev.type == "cuda":
            ok = {k: f for k, f in engines.items() if f"error_{k}" not in row}
            sets = [args] + [_clone(args) for _ in range(3)]
            for s in sets:
                for f in ok.values():
                    f(*s)
            row.update({f"ms_{k}": t for k, t in time_queued(ok, sets, a.reps).items()})
            row.update({f"host_ms_{k}": t for k, t in host_ms(ok, sets).items()})
        else:
            runnable = {k: (lambda f=f: f(*args)) for k, f in engines.items() if f"error_{k}" not in row}
            for f in runnable.values():
                f()
            times, errors = time_interleaved(runnable, dev, a.reps)
            for k, t in times.items():
                row[f"ms_{k}"] = t.median_ms
            row.update({f"error_{k}": v for k, v in errors.items()})
        if "ms_ember" in row and "ms_torch" in row:
            row["ratio"] = row["ms_ember"] / row["ms_torch"]
            row["bw_frac"] = nbytes / (row["ms_ember"] * 1e-3) / bw
        results.append(row)
        print(f"{name:<20}{row.get('ms_eager', float('nan')):>10.3f}{row.get('ms_torch', float('nan')):>10.3f}"
              f"{row.get('ms_ember', float('nan')):>10.3f}{row.get('ratio', float('nan')):>13.2f}"
              f"{100 * row.get('bw_frac', float('nan')):>10.0f}%"
              f"{row.get('compile_s_torch', float('nan')):>12.2f}/{row.get('compile_s_ember', float('nan')):.2f}"
              + (f"  host ms torch/ember {row['host_ms_torch']:.3f}/{row['host_ms_ember']:.3f}"
                 if "host_ms_torch" in row and "host_ms_ember" in row else "")
              + ("" if row.get("correct_ember", False) else "  EMBER WRONG")
              + "".join(f"  {k}: {v}" for k, v in row.items() if k.startswith("error_")))
    ratios = [r["ratio"] for r in results if "ratio" in r and r.get("correct_ember")]
    if ratios:
        print(f"geomean ember/torch.compile over {len(ratios)} correct cases: "
              f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")
    if a.out:
        Path(a.out).write_text(json.dumps({"device": a.device, "dtype": a.dtype, "copy_bw": bw,
                                           "results": results}, indent=1))


def _inplace_ok(ref_fn: Callable, fn: Callable, args: tuple, tol: float) -> bool:
    a1, a2 = _clone(args), _clone(args)
    ref_fn(*a1)
    fn(*a2)
    return _close(a1, a2, tol)


if __name__ == "__main__":
    main()
