"""Is a step host-bound? The host time to enqueue one step while the GPU is kept busy (``torch.cuda._sleep``
before the step, so no launch waits for the device), next to the step's wall time, per engine.

    python benchmarks/host_enqueue.py --models resnet50,gpt2 --task train --engines eager,inductor,ember

enqueue ~ wall: the host is the bottleneck (launch and wrapper overhead); enqueue << wall: the device is.
A call that waits for the device inside the step (a synchronizing copy, an allocator flush) shows as an
enqueue time near the sleep length (reported as "blocks")."""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from ember.bench.engines import parse_engine
from ember.bench.measure import sleep_cycles_per_ms
from ember.bench.runner import make_step, zoo_case

SLEEP_MS = 300


def measure(step, reps: int = 7) -> tuple[float, float]:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    walls = []
    for _ in range(reps):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t)
    return statistics.median(walls) * 1e3, enqueue_ms(step, reps)


def enqueue_ms(step, reps: int = 7) -> float:
    """Median host time (ms) to enqueue ``step`` while the GPU sleeps ``SLEEP_MS`` before it."""
    cyc = int(sleep_cycles_per_ms() * SLEEP_MS)
    enq = []
    for _ in range(reps):
        torch.cuda._sleep(cyc)
        t = time.perf_counter()
        step()
        enq.append(time.perf_counter() - t)
        torch.cuda.synchronize()
    return statistics.median(enq) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50")
    p.add_argument("--engines", default="eager,inductor,ember")
    p.add_argument("--task", default="train", choices=("infer", "train"))
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--suite", default="full")
    p.add_argument("--batch", type=int)
    a = p.parse_args()
    dev = torch.device("cuda")
    for m in a.models.split(","):
        for e in a.engines.split(","):
            torch.manual_seed(0)
            w, model, inputs = zoo_case(m, a.suite, dev, a.task, a.batch)
            step = make_step(parse_engine(e), model, w, inputs, a.task, a.dtype, dev)
            wall, enq = measure(step)
            note = "blocks on the device" if enq > SLEEP_MS * 0.8 else ""
            print(f"{m:10s} {a.task:5s} {e:9s} wall {wall:8.2f} ms  host enqueue {enq:8.2f} ms  {note}", flush=True)
            del step, model, inputs, w
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
