"""Where the host time of a cached call goes: cProfile over timed steps of one engine (after warm-up), top
functions by own time. Together with profile_model.py (device time) it says whether a model is host-bound.

    python bench/host_profile.py --model gpt2 --engine ember [--batch 8] [--task infer]"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch

from ember.bench.engines import parse_engine
from ember.bench.runner import make_step, zoo_case


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--engine", default="ember")
    p.add_argument("--suite", default="full")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--task", default="infer", choices=("infer", "train"))
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--batch", type=int)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    dev = torch.device(a.device)
    w, model, inputs = zoo_case(a.model, a.suite, dev, a.task, a.batch)
    step = make_step(parse_engine(a.engine), model, w, inputs, a.task, a.dtype, dev)
    for _ in range(5):
        step()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    for _ in range(a.steps):
        step()
    host = time.perf_counter() - t
    sync()
    wall = time.perf_counter() - t
    print(f"{a.model} {a.task} {a.engine}: host {host / a.steps * 1e3:.3f} ms/step (until the last launch), "
          f"wall {wall / a.steps * 1e3:.3f} ms/step")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(a.steps):
        step()
    prof.disable()
    sync()
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
