"""Where a zoo model's time goes: the top kernels by device time (torch.profiler), per engine, side by side.

    python bench/profile_model.py --model gpt2 --task infer --dtype bf16 --engines ember,inductor
    python bench/profile_model.py --model nanogpt --suite quick --device cpu --task train

For each engine: the median step time, then the kernels taking most of the profiled steps' device time (name,
calls per step, microseconds per step), and for ember the generated kernels' names as in EMBER_LOGS=output_code.
A diagnosis tool, not a benchmark: numbers under the profiler are not the ones to report.
"""
from __future__ import annotations

import argparse
import re
import statistics
import time

import torch

from ember.bench.runner import make_step
from ember.bench.zoo import select_models


def _engine(name: str):
    from ember.bench.engines import parse_engine
    return parse_engine(name)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--suite", default="full")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--task", default="infer", choices=("infer", "train"))
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--engines", default="ember,inductor")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--batch", type=int, help="batch size (default: the model's own)")
    p.add_argument("--unique-names", action="store_true",
                   help="suffix each generated Triton kernel's name with its source's hash, so that a forward's and "
                        "a backward's kernel27 are apart in the profile (with EMBER_LOGS=output_code in the same "
                        "run, the printed sources carry the same names)")
    a = p.parse_args()
    if a.unique_names:
        _unique_kernel_names()
    device = torch.device(a.device)
    (entry,), _ = select_models(a.suite, [a.model])
    if a.batch:
        entry.configs[a.suite]["batch"] = a.batch
    for name in ["eager"] + a.engines.split(","):
        torch.manual_seed(0)
        w = entry.build(a.suite, device)
        model = w.model.to(device)
        model.train(a.task == "train")
        inputs = w.make_inputs(0, device)
        step = make_step(_engine(name), model, w, inputs, a.task, a.dtype, device)
        for _ in range(3):
            step()
        _sync(device)
        times = []
        for _ in range(10):
            t = time.perf_counter()
            step()
            _sync(device)
            times.append(time.perf_counter() - t)
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA]
                                                         if device.type == "cuda" else [])
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(a.steps):
                step()
            _sync(device)
        print(f"\n== {a.model} {a.task} {a.dtype} {name}: {statistics.median(times) * 1e3:.3f} ms/step")
        key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
        rows = sorted(prof.key_averages(), key=lambda e: -getattr(e, key))
        total = sum(getattr(e, key) for e in rows)
        print(f"   total {total / a.steps / 1e3:.3f} ms/step of {'device' if device.type == 'cuda' else 'cpu'} time")
        if device.type == "cuda":
            print("   by kind (device kernels only): " + _kinds(rows, a.steps))
        for e in rows[:a.top]:
            t = getattr(e, key) / a.steps
            if t <= 0:
                break
            print(f"   {t:9.1f} us  x{e.count // a.steps:<4d} {e.key[:110]}")


def _unique_kernel_names() -> None:
    import hashlib

    from ember.codegen import triton as tb
    gen = tb.generate

    def generate(body, persistent, name="", cfg=None):
        src, fname, cfg = gen(body, persistent, name=name, cfg=cfg)
        new = f"{fname}_{hashlib.sha1(src.encode()).hexdigest()[:5]}"
        return re.sub(rf"\b{fname}\b", new, src), new, cfg
    tb.generate = generate


_LIBRARY = re.compile(r"gemm|conv|xmma|cutlass|nvjet|cudnn|wgrad|dgrad|fprop|flash|fmha|attention", re.I)


def _kind(name: str) -> str:
    if name.startswith(("ember_kernel", "triton_")):
        return "generated"
    if _LIBRARY.search(name):
        return "gemm/conv/attn"
    if name.startswith(("Memcpy", "Memset")):
        return "memcpy/set"
    return "other ATen"


def _kinds(rows: list, steps: int) -> str:
    """Per-step device time of the kernels themselves (not the ATen ops around them), by kind."""
    from collections import Counter
    tot, cnt = Counter(), Counter()
    for e in rows:
        if getattr(e, "device_type", None) != torch.autograd.DeviceType.CUDA or e.self_device_time_total <= 0:
            continue
        k = _kind(e.key)
        tot[k] += e.self_device_time_total / steps
        cnt[k] += e.count // steps
    return ", ".join(f"{k} {tot[k] / 1e3:.2f} ms ({cnt[k]} launches)" for k in sorted(tot, key=lambda k: -tot[k]))


if __name__ == "__main__":
    main()
