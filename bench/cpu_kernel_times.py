"""Where ember's generated C++ kernels spend a zoo model's step on the CPU: each kernel's wall time per step
(measured around its call), with what it fuses, largest first; then the ATen calls' share (the step's time less
the kernels'). A diagnosis tool: the timing wrappers add a few microseconds per kernel.

    python bench/cpu_kernel_times.py --model encoder --task train [--suite quick] [--top 25]
    python bench/cpu_kernel_times.py --model resnet --config res=96 --config width=16   # the suite's config, changed
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch

from ember.bench.runner import make_step
from ember.bench.zoo import configured_workload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--suite", default="quick")
    p.add_argument("--task", default="train", choices=("infer", "train"))
    p.add_argument("--dtype", default="float32")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key of the model's suite config (an int), e.g. res=96")
    p.add_argument("--code", default="", help="comma-separated kernels (graph.kernel) whose C++ source to print")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    from ember.bench.engines import parse_engine
    from ember.codegen import cpp

    times: dict[str, list[float]] = defaultdict(list)
    labels: dict[str, str] = {}
    sources: dict[str, str] = {}
    real_compile = cpp.compile_kernels

    def timed_compile(bodies, options, graph_name, cache=None):
        fns = real_compile(bodies, options, graph_name, cache)
        out = []
        for b, fn in zip(bodies, fns):
            key = f"{graph_name}.{b.name}"
            labels[key] = f"x={b.kernel.xnumel} r={b.kernel.rnumel}: {b.kernel.fused()}"
            sources[key] = cpp.source(b)

            def call(*args, _fn=fn, _key=key):
                t = time.perf_counter()
                _fn(*args)
                times[_key].append(time.perf_counter() - t)
            out.append(call)
        return out
    cpp.compile_kernels = timed_compile

    w = configured_workload(a.suite, a.model, a.config, torch.device("cpu"))
    model = w.model
    model.train(a.task == "train")
    inputs = w.make_inputs(0, torch.device("cpu"))
    step = make_step(parse_engine("ember"), model, w, inputs, a.task, a.dtype, torch.device("cpu"))
    for _ in range(3):
        step()
    times.clear()
    walls = []
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        walls.append(time.perf_counter() - t)
    per_step = {k: sum(v) / a.steps * 1e6 for k, v in times.items()}
    total = sum(per_step.values())
    wall = statistics.median(walls) * 1e6
    print(f"{a.model} {a.task} {a.dtype}: step {wall:.0f} us (median), generated kernels {total:.0f} us "
          f"({len(per_step)} kernels), the rest (ATen calls, wrapper, guards, autograd) {wall - total:.0f} us")
    for k, us in sorted(per_step.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"  {us:8.1f} us  {k}  {labels[k][:150]}")
    for k in filter(None, a.code.split(",")):
        print(f"\n// {k}: {labels.get(k, '?')}\n{sources.get(k, '(no such kernel)')}")


if __name__ == "__main__":
    main()
