"""A/B of this session's scheduling changes on zoo models: one step compiled with them, one without (each
switched off by patching it out while that step compiles), timed interleaved in one process.

    python bench/schedule_ab.py [--models encoder,nanogpt] [--tasks train] [--off hoist,sink,order] [--reps 200]

``hoist``: matmuls moved up to their inputs (schedule._hoisted); ``sink``: kernels moved down past matmuls they
do not feed (schedule._sunk); ``order``: the backward in autograd's order (partition._autograd_order).
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

import ember
from ember.autograd import partition
from ember.bench.engines import parse_engine
from ember.bench.runner import make_step, zoo_case
from ember.loopir import schedule

PATCHES = {
    "hoist": (schedule, "_hoisted", lambda nodes: list(nodes)),
    "sink": (schedule, "_sunk", lambda *a: None),
    "order": (partition, "_autograd_order", lambda body, dep: list(body)),
}


@contextlib.contextmanager
def switched_off(names: list[str]):
    saved = [(mod, attr, getattr(mod, attr)) for mod, attr, _ in (PATCHES[n] for n in names)]
    try:
        for n in names:
            mod, attr, fn = PATCHES[n]
            setattr(mod, attr, fn)
        yield
    finally:
        for mod, attr, fn in saved:
            setattr(mod, attr, fn)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="encoder,nanogpt")
    p.add_argument("--tasks", default="train")
    p.add_argument("--off", default="hoist,sink,order")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device("cpu")
    off = [n for n in a.off.split(",") if n]
    for m in a.models.split(","):
        for task in a.tasks.split(","):
            steps = {}
            for variant in ("without", "with"):
                ember.reset()
                w, model, inputs = zoo_case(m, "quick", dev, task)
                with switched_off(off) if variant == "without" else contextlib.nullcontext():
                    steps[variant] = make_step(parse_engine("ember"), model, w, inputs, task, "float32", dev)
                    for _ in range(5):
                        steps[variant]()
            times: dict[str, list[float]] = {"without": [], "with": []}
            for _ in range(a.reps):
                for variant in ("without", "with"):
                    t0 = time.perf_counter()
                    steps[variant]()
                    times[variant].append(time.perf_counter() - t0)
            wo, wi = (statistics.median(times[v]) * 1e3 for v in ("without", "with"))
            print(f"{m:8s} {task:5s} without {'+'.join(off)} {wo:7.3f} ms   with {wi:7.3f} ms   ratio {wi / wo:.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
