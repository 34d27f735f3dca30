"""Where ember's host time per step goes, without a profiler's per-call overhead: the step is enqueued while
the GPU sleeps (so nothing waits for the device), with timers around the generated wrappers, the kernel
launches and the ATen calls inside them; what is left is the glue, guards and the autograd runtime.

    python bench/host_breakdown.py --model resnet50 --task train
"""
from __future__ import annotations

import argparse
import time

import torch
from host_enqueue import enqueue_ms  # bench/ is the script's directory, first on sys.path

from ember.bench.engines import parse_engine
from ember.bench.runner import make_step, zoo_case


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--task", default="train", choices=("infer", "train"))
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--batch", type=int)
    a = p.parse_args()
    from ember.codegen import triton as tb
    from ember.codegen import wrapper as wr
    dev = torch.device("cuda")
    spent = {"wrappers": 0.0, "externs": 0.0, "launches": 0.0}
    counts = {"wrappers": 0, "externs": 0, "launches": 0}
    on = [False]

    def timed(kind, f):
        def call(*args, **kw):
            if not on[0]:
                return f(*args, **kw)
            t = time.perf_counter()
            try:
                return f(*args, **kw)
            finally:
                spent[kind] += time.perf_counter() - t
                counts[kind] += 1
        return call
    real_make = wr.make_wrapper

    def make(*args, **kw):
        fn = real_make(*args, **kw)
        g = fn.__globals__
        for k in [k for k in g if k.startswith("extern")]:
            g[k] = timed("externs", g[k])
        out = timed("wrappers", fn)
        out.source, out.kernel_sources = fn.source, fn.kernel_sources
        return out
    wr.make_wrapper = make
    real_call = tb.TritonKernel.__call__
    tb.TritonKernel.__call__ = timed("launches", real_call)
    real_aligned = tb.TritonKernel.aligned_launcher     # the launcher a wrapper's name is rebound to

    def aligned_launcher(self, args):
        return timed("launches", real_aligned(self, args))
    tb.TritonKernel.aligned_launcher = aligned_launcher
    w, model, inputs = zoo_case(a.model, "full", dev, a.task, a.batch)
    step = make_step(parse_engine("ember"), model, w, inputs, a.task, a.dtype, dev)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    base = enqueue_ms(step)
    reps = 7
    on[0] = True
    timed_total = enqueue_ms(step, reps)
    on[0] = False
    per = {k: v / reps * 1e3 for k, v in spent.items()}
    n = {k: v // reps for k, v in counts.items()}
    print(f"{a.model} {a.task}: host enqueue {base:.2f} ms/step ({timed_total:.2f} with timers)", flush=True)
    print(f"  outside the wrappers (guards, glue, autograd, runtime): {timed_total - per['wrappers']:.2f} ms", flush=True)
    print(f"  wrappers: {per['wrappers']:.2f} ms in {n['wrappers']} calls; of which kernel launches "
          f"{per['launches']:.2f} ms ({n['launches']}, {per['launches'] / max(n['launches'], 1) * 1e3:.1f} us each), "
          f"ATen calls {per['externs']:.2f} ms ({n['externs']}, {per['externs'] / max(n['externs'], 1) * 1e3:.1f} us each), "
          f"the rest (allocation, views, stride checks) {per['wrappers'] - per['launches'] - per['externs']:.2f} ms",
          flush=True)


if __name__ == "__main__":
    main()
