"""A/B of ember.loopir.lower.REUSE_STORED (a value stored for an ATen call is loaded by its other users instead
of recomputed) on zoo models: both variants compiled in one process, timed interleaved (CUDA: synchronized
after each step).

    python bench/reuse_stored_ab.py [--models encoder,nanogpt] [--tasks infer,train] [--reps 200]
    python bench/reuse_stored_ab.py --device cuda --suite full --dtype bf16 --models bert --tasks train
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import ember
from ember.bench.engines import parse_engine
from ember.bench.runner import make_step, zoo_case
from ember.loopir import lower


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="encoder,nanogpt")
    p.add_argument("--tasks", default="infer,train")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--suite", default="quick")
    p.add_argument("--dtype", default="float32")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()
    for m in a.models.split(","):
        for task in a.tasks.split(","):
            steps = {}
            for flag in (False, True):
                lower.REUSE_STORED = flag
                ember.reset()
                w, model, inputs = zoo_case(m, a.suite, dev, task)
                steps[flag] = make_step(parse_engine("ember"), model, w, inputs, task, a.dtype, dev)
                for _ in range(5):
                    steps[flag]()
                sync()
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(a.reps):
                for flag in (False, True):
                    t0 = time.perf_counter()
                    steps[flag]()
                    sync()
                    times[flag].append(time.perf_counter() - t0)
            off, on = (statistics.median(times[f]) * 1e3 for f in (False, True))
            print(f"{m:8s} {task:5s} recompute {off:7.3f} ms   load stored {on:7.3f} ms   ratio {on / off:.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
