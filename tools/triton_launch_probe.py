"""Probe Triton's launch path on a CUDA machine: why ember's direct launcher is (un)available, and the
per-launch CPU cost of each way to launch a tiny kernel. ``python tools/triton_launch_probe.py``"""
from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))


def main() -> None:
    from test_ember_triton import _kernel  # the GPU test's helper: one KernelBody -> TritonKernel

    from ember.codegen import triton as tb
    _, k = _kernel(lambda x: x * 2 + 1, [torch.randn(4096, device="cuda")])
    x, out = torch.randn(4096, device="cuda"), torch.empty(4096, device="cuda")
    compiled = k.launch(x, out, num_warps=k.cfg.num_warps)
    print("launch returned", type(compiled), [a for a in dir(compiled) if not a.startswith("__")][:40])
    try:
        from triton import knobs
        from triton.runtime.driver import driver
        print("hooks", knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
        if hasattr(compiled, "result"):
            compiled = compiled.result()
        run, function, meta = compiled.run, compiled.function, compiled.packed_metadata
        print("run", run, "function", function, "meta", type(meta))
        stream = driver.active.get_current_stream
        run(*k.grid, stream(0), function, meta, None, None, None, x, out)
        torch.cuda.synchronize()
        print("direct launch ok:", torch.allclose(out, x * 2 + 1))
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    fast = tb._direct_launcher(compiled, k.grid, (x, out))
    print("ember _direct_launcher ->", fast)
    ways = {"ember kernel(*args)": lambda: k(x, out), "JITFunction[grid](...)": lambda: k.launch(x, out),
            "torch x*2+1": lambda: torch.add(x, 1)}
    if fast is not None:
        ways["direct"] = lambda: fast(x, out)
    for name, f in ways.items():
        for _ in range(100):
            f()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(2000):
            f()
        dt = (time.perf_counter() - t0) / 2000
        torch.cuda.synchronize()
        print(f"{name:<28} {dt * 1e6:7.1f} us per launch (CPU side)")


if __name__ == "__main__":
    main()
