"""Kernel launches per compiled graph of a zoo model with Triton's GPU scheduling (``cpu_backend="triton"``,
interpreted on the CPU), with combo kernels and the GPU's horizontal-join cap (``--mode new``) or without
either (``--mode old``): what ``ember.loopir.combo`` changes in a model's launch count, without a GPU.

    TRITON_INTERPRET=1 python bench/combo_launches.py --model encoder --task train --mode new
"""
from __future__ import annotations

import argparse
import re

import torch

from ember.bench.runner import make_step
from ember.bench.zoo import configured_workload


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--suite", default="quick")
    p.add_argument("--task", default="train", choices=("infer", "train"))
    p.add_argument("--dtype", default="float32")
    p.add_argument("--mode", default="new", choices=("new", "old"))
    a = p.parse_args()
    import ember.codegen.wrapper as W
    import ember.loopir.combo as C
    import ember.loopir.schedule as S
    from ember.bench.engines import parse_engine
    if a.mode == "old":
        S.SPREAD_MAX_POINTS, S.SPREAD_MAX_STREAMS = S.HORIZONTAL_MAX_POINTS, 1 << 30
        C.COMBO_MAX_PARTS = 1
    counts: list[tuple[str, int, int]] = []
    real = W.make_wrapper

    def spy(schedule, *args, **kwargs):
        fn = real(schedule, *args, **kwargs)
        launches = re.findall(r"^    \(?(\w+?)(?:a if _aligned else \w+\))?\(.*\)  # ", fn.source, re.M)
        counts.append((schedule.graph.name, len(launches), sum(1 for n in launches if n.startswith("combo"))))
        return fn
    W.make_wrapper = spy
    w = configured_workload(a.suite, a.model, {}, torch.device("cpu"))
    w.model.train(a.task == "train")
    inputs = w.make_inputs(0, torch.device("cpu"))
    import ember.codegen as CG
    CG.kernel_backend = lambda device, options: "triton"      # every kernel on Triton's path, as on a GPU
    make_step(parse_engine("ember"), w.model, w, inputs, a.task, a.dtype, torch.device("cpu"))()
    for name, n, c in counts:
        print(f"  {name}: {n} launches ({c} combo)")
    print(f"{a.model} {a.task} {a.mode}: {sum(n for _, n, _ in counts)} launches")


if __name__ == "__main__":
    main()
