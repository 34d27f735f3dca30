"""Measuring: wall time of one call, interleaved median timing, peak memory, and correctness checks.

Timing: every engine's step is called once per round, the order rotating from round to round so drift
(clock boost, other processes) hits all engines alike; the median per engine is reported. On CUDA each call is
timed with CUDA events; on CPU with ``time.perf_counter``.

Memory: the peak during one step above what was allocated before it: ``torch.cuda.max_memory_allocated`` on
CUDA; on CPU the peak resident set (VmHWM, reset through /proc/self/clear_refs) above the resident set before.

Correctness (as PyTorch's own benchmarks do it): every output tensor and gradient must be close to eager's
(``rtol = atol = tol``). Where that fails, an fp64 run of the model decides: the engine passes when its error
against fp64 is at most ``2x`` eager's own error against fp64 (``3x`` for tensors under 10 elements) plus
tol/10.
"""
from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


# ------------------------------------------------------------------------------------------------ timing
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def sleep_cycles_per_ms() -> float:
    """GPU clock cycles per millisecond of ``torch.cuda._sleep``: benchmarks queue a sleep before the work they
    time so the host's part of a call is done before its kernels may start (or, timing the host, so no
    launch waits for the device)."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    e0.record()
    torch.cuda._sleep(10 ** 7)
    e1.record()
    torch.cuda.synchronize()
    return 10 ** 7 / e0.elapsed_time(e1)


def wall_time(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    """Seconds for one call of ``fn`` (device work included), and its result."""
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    return time.perf_counter() - t0, out


def _time_cpu(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


@dataclasses.dataclass
class Timing:
    median_ms: float
    spread: float           # interquartile range / median: how noisy the samples were
    samples: int


def summarize(samples: list[float]) -> Timing:
    med = statistics.median(samples)
    if len(samples) >= 4:
        q = statistics.quantiles(samples, n=4)
        spread = (q[2] - q[0]) / med if med else 0.0
    else:
        spread = 0.0
    return Timing(med, spread, len(samples))


def time_interleaved(fns: dict[str, Callable[[], Any]], device: torch.device, reps: int, idle_start: bool = False
                     ) -> tuple[dict[str, Timing], dict[str, str]]:
    """Timing of each thunk over ``reps`` interleaved rounds; and the error of every thunk that raised (it
    leaves the rotation).

    On CUDA each call is timed with device events. ``idle_start``: the device is synchronized before each call,
    so a call's host work (guards, launches) is never hidden behind the previous thunk's queued kernels (what
    torch's benchmark harness measures: wall time of one call from an idle device); without it, calls of one
    round queue back to back, which suits timing single kernels but favours a host-bound engine that follows a
    device-bound one."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    errors: dict[str, str] = {}
    names = list(fns)
    for r in range(reps):
        order = names[r % len(names):] + names[:r % len(names)]
        events = []
        for name in order:
            if name in errors:
                continue
            try:
                if device.type == "cuda":
                    if idle_start:
                        torch.cuda.synchronize(device)
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    fns[name]()
                    end.record()
                    events.append((name, start, end))
                else:
                    samples[name].append(_time_cpu(fns[name]))
            except Exception as e:  # noqa: BLE001 - an engine that breaks while being timed is reported, not fatal
                errors[name] = first_line(e)
        if events:
            torch.cuda.synchronize(device)
            for name, start, end in events:
                samples[name].append(start.elapsed_time(end))
    timings = {k: summarize(v) for k, v in samples.items() if v and k not in errors}
    return timings, errors


def choose_reps(per_call_s: float, budget_s: float, lo: int, hi: int) -> int:
    """Timed rounds: as many as fit in ``budget_s`` when one round takes ``per_call_s``, within [lo, hi]."""
    return max(lo, min(hi, int(budget_s / max(per_call_s, 1e-6))))


# ------------------------------------------------------------------------------------------------ memory
def _proc_status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def peak_memory_mb(fn: Callable[[], Any], device: torch.device) -> float | None:
    """Peak memory (MB) of one call above what was in use before it; None where it cannot be read."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 2**20
    if not _reset_peak_rss():
        return None
    base = _proc_status_kb("VmRSS")
    fn()
    peak = _proc_status_kb("VmHWM")
    if base is None or peak is None:
        return None
    return max(0, peak - base) / 1024


def held_memory_mb(device: torch.device) -> float | None:
    """Device memory (MB) the caching allocator holds for live tensors and CUDA graph pools, after returning
    its unused cached blocks; the difference across an engine's compile and warm-up is what the engine keeps
    (its model copy, static buffers, graph pools). None off CUDA.

    cuBLAS's cached workspaces (32 MB per handle and stream on Hopper) are returned first: they are the
    process's, made by whichever engine ran a matmul first, and freed by any engine that records a CUDA graph
    (torch's CUDA graph trees and ember clear them around a capture). Left in, the first engine to record after
    an eager one got credit for freeing the eager engine's workspace (ResNet-50, batch 1, after eager in one
    process: torch.compile's reduce-overhead held 136 MB, its 100 MB model copy included, so 36 MB for pools
    that take 76 MB in a process of their own, bench/held_memory.py)."""
    if device.type != "cuda":
        return None
    gc.collect()
    torch.cuda.synchronize(device)
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved(device) / 2**20


# ------------------------------------------------------------------------------------------- correctness
def flatten(x: Any) -> list[torch.Tensor]:
    """Every tensor in an output: tuples, lists, dicts (ModelOutput included), dataclasses; others dropped."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in flatten(v)]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in flatten(v)]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return [t for f in dataclasses.fields(x) for t in flatten(getattr(x, f.name))]
    return []


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:300]


@dataclasses.dataclass
class Verdict:
    correct: bool
    max_err: float          # largest |compiled - eager| over all compared tensors
    against: str            # "eager" or "fp64"
    detail: str = ""


def _as64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float64) if t.is_floating_point() else t.detach()


def _max_err(res: list[torch.Tensor], ref: list[torch.Tensor]) -> float:
    errs = [(_as64(a) - _as64(b)).abs().nan_to_num(0.0).max().item()
            for a, b in zip(res, ref) if a.is_floating_point() and a.numel()]
    return max(errs, default=0.0)


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    if a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return bool(torch.equal(a.detach().cpu(), b.detach().cpu()))
    return bool(torch.allclose(_as64(a), _as64(b), rtol=tol, atol=tol, equal_nan=True))


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    d = (_as64(a) - _as64(b)).nan_to_num(0.0)
    return d.pow(2).mean().sqrt().item() if d.numel() else 0.0


def _fp64_ok(res: torch.Tensor, ref: torch.Tensor, ref64: torch.Tensor, tol: float) -> bool:
    if not res.is_floating_point():
        return bool(torch.equal(res.detach().cpu(), ref.detach().cpu()))
    multiplier = 3.0 if res.numel() < 10 else 2.0
    return _rmse(res, ref64) <= multiplier * _rmse(ref, ref64) + tol / 10


def compare(res: Any, ref: Any, tol: float, fp64: Callable[[], Any] | None = None) -> Verdict:
    """Is ``res`` (an engine's output) correct given eager's ``ref``? ``fp64()`` gives the fp64 reference."""
    res_t, ref_t = flatten(res), flatten(ref)
    if len(res_t) != len(ref_t):
        return Verdict(False, float("nan"), "eager", f"{len(res_t)} tensors vs eager's {len(ref_t)}")
    if any(a.shape != b.shape for a, b in zip(res_t, ref_t)):
        return Verdict(False, float("nan"), "eager", "shapes differ from eager's")
    err = _max_err(res_t, ref_t)
    if all(_close(a, b, tol) for a, b in zip(res_t, ref_t)):
        return Verdict(True, err, "eager")
    if fp64 is None:
        return Verdict(False, err, "eager", f"max |diff| {err:.3g} > tol {tol:g}")
    ref64 = flatten(fp64())
    if len(ref64) != len(ref_t):
        return Verdict(False, err, "fp64", "fp64 reference has a different structure")
    bad = [i for i, (a, b, c) in enumerate(zip(res_t, ref_t, ref64)) if not _fp64_ok(a, b, c, tol)]
    detail = f"{len(bad)} of {len(res_t)} tensors further from fp64 than eager" if bad else ""
    return Verdict(not bad, err, "fp64", detail)
