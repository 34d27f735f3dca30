"""The bytes ember's generated kernels move per step of a zoo model, read off the schedule (each kernel's loads
of buffers it does not compute, and its stores, at their full size): a machine-independent measure of fusion
and of what is stored or recomputed, for comparing scheduler and lowering changes where timings are noisy.
Broadcast reads (a norm's per-channel vectors) count at their own small size; cache reuse is not modelled.

    python bench/kernel_traffic.py --model resnet --config res=64 --config width=16 [--task train] [-v]
"""
from __future__ import annotations

import argparse
import math

import torch

from ember.bench.runner import make_step
from ember.bench.zoo import configured_workload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--suite", default="quick")
    p.add_argument("--task", default="train", choices=("infer", "train"))
    p.add_argument("--dtype", default="float32")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key of the model's suite config (an int), e.g. res=64")
    p.add_argument("-v", action="store_true", help="each kernel's bytes and what it fuses")
    a = p.parse_args()
    import ember.loopir.schedule as S
    from ember.bench.engines import parse_engine

    seen: list = []
    real = S._finish

    def spy(graph, steps):
        out = real(graph, steps)
        seen.append(out)
        return out
    S._finish = spy
    w = configured_workload(a.suite, a.model, a.config, torch.device("cpu"))
    w.model.train(a.task == "train")
    inputs = w.make_inputs(0, torch.device("cpu"))
    make_step(parse_engine("ember"), w.model, w, inputs, a.task, a.dtype, torch.device("cpu"))()
    total = 0
    for sch in seen:
        size = {}
        for n in sch.graph.nodes:
            lay = getattr(n, "layout", None)
            if lay is not None and all(isinstance(s, int) for s in lay.shape):
                size[n.name] = math.prod(lay.shape) * lay.dtype.itemsize
        kernels = [k for k in sch.steps if isinstance(k, S.Kernel)]
        rows = []
        graph_bytes = 0
        for k in kernels:
            r = sum(size.get(b, 0) for b in k.reads)
            wr = sum(size.get(b, 0) for b in k.stores)
            graph_bytes += r + wr
            rows.append(f"    {k.name:9s} read {r / 1e6:8.2f} MB  write {wr / 1e6:8.2f} MB  {k.fused()[:110]}")
        total += graph_bytes
        print(f"  graph of {len(kernels)} kernels: {graph_bytes / 1e6:.1f} MB")
        if a.v:
            print("\n".join(rows))
    print(f"{a.model} {a.task} {a.dtype}: generated kernels move {total / 1e6:.1f} MB per step")


if __name__ == "__main__":
    main()
