"""Peak memory of one training step on the CPU, per engine, each in a fresh process: the step's peak resident
memory above what the process held before it (``VmHWM`` after resetting it through ``/proc/self/clear_refs``),
with glibc made to return every allocation of 64 KiB or more to the system when freed
(``MALLOC_MMAP_THRESHOLD_=65536``), so the resident size follows the live tensors. Linux only.

    python benchmarks/cpu_peak_memory.py [--model nanogpt] [--suite full] [--batch 2] [--dtype bf16]
                                    [--engines eager,inductor,ember]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, sys, torch
from ember.bench.engines import parse_engine
from ember.bench.runner import make_step, zoo_case

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024

model, suite, batch, dtype, engine = sys.argv[1:6]
torch.manual_seed(0)
w, m, inputs = zoo_case(model, suite, torch.device("cpu"), "train", int(batch))
step = make_step(parse_engine(engine), m, w, inputs, "train", dtype, torch.device("cpu"))
out = step(); out = step(); del out; gc.collect()
peaks = []
for _ in range(3):
    base = status("VmRSS:")
    open("/proc/self/clear_refs", "w").write("5")
    out = step()
    peaks.append(status("VmHWM:") - base)
    del out; gc.collect()
print(f"{min(peaks):.1f}")
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="nanogpt")
    p.add_argument("--suite", default="full")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--engines", default="eager,inductor,ember")
    a = p.parse_args()
    path = [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONPATH=os.pathsep.join(path))
    print(f"{a.model} ({a.suite} config) training step, batch {a.batch}, {a.dtype}, CPU: peak resident memory "
          "above the step's start", flush=True)
    for e in a.engines.split(","):
        r = subprocess.run([sys.executable, "-c", CHILD, a.model, a.suite, str(a.batch), a.dtype, e], env=env,
                           capture_output=True, text=True)
        val = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else \
            f"failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}"
        print(f"  {e:10s} {val} MB", flush=True)


if __name__ == "__main__":
    main()
