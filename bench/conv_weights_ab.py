"""A/B of convolution weights on the CPU: the quick ResNet compiled by ember with NCHW weights (ATen converts them
for each call) and with NHWC weights (ember's copy kernel), and torch.compile, timed interleaved in one process.

    python bench/conv_weights_ab.py infer|train
"""
import statistics
import sys
import time

import torch

from ember.bench.engines import parse_engine
from ember.bench.runner import make_step, zoo_case
from ember.loopir import conv_layout

torch.set_num_threads(2)
task = sys.argv[1]
dev = torch.device("cpu")
steps = {}
for label, ws in (("nchw_w", {"cuda"}), ("nhwc_w", {"cuda", "cpu"})):
    conv_layout.NHWC_WEIGHTS.clear(); conv_layout.NHWC_WEIGHTS.update(ws)
    w, model, inputs = zoo_case("resnet", "quick", dev, task)
    st = make_step(parse_engine("ember"), model, w, inputs, task, "float32", dev)
    for _ in range(3): st()
    steps[label] = st
ind_w, ind_m, ind_i = zoo_case("resnet", "quick", dev, task)
steps["inductor"] = make_step(parse_engine("inductor"), ind_m, ind_w, ind_i, task, "float32", dev)
for _ in range(3): steps["inductor"]()
res = {k: [] for k in steps}
for r in range(300 if task == "infer" else 100):
    for k, st in steps.items():
        t = time.perf_counter(); st(); res[k].append(time.perf_counter() - t)
print(task, {k: f"{statistics.median(v)*1e3:.3f} ms" for k, v in res.items()})
