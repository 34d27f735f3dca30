"""Host cost of a cached call's guards and glue for a module with as many weights as a ResNet-50: 53 blocks of
a 1x1 convolution and a batch norm (318 parameters and buffers), in eval mode under ``no_grad``, compiled with a
backend whose graph does nothing, so each call is the generated glue alone: its guard clauses, then the graph's
inputs pulled from the module.

    python bench/guard_cost.py [--blocks 53]

Prints microseconds per call (median of 9 batches) and how many guard clauses the entry checks."""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=53)
    ap.add_argument("--calls", type=int, default=3000)
    a = ap.parse_args()
    import ember
    from ember.capture import frontend
    sources: list[str] = []
    real = frontend._exec

    def keep(source, bindings, filename):
        sources.append(source)
        return real(source, bindings, filename)
    frontend._exec = keep
    m = nn.Sequential(*[Block(4) for _ in range(a.blocks)]).eval()
    x = torch.randn(1, 4, 2, 2)
    out = (torch.zeros(1),)
    f = ember.compile(m, backend=lambda gm, example_inputs: (lambda *args: out))
    with torch.no_grad():
        f(x)
        f(x)
        times = []
        for _ in range(9):
            t = time.perf_counter()
            for _ in range(a.calls):
                f(x)
            times.append((time.perf_counter() - t) / a.calls * 1e6)
    tensors = sum(1 for _ in m.parameters()) + sum(1 for _ in m.buffers())
    clauses = sources[-1].split("return __MISS")[0].count("\n            and ") + 1
    print(f"{tensors} weights, {clauses} guard clauses: {statistics.median(times):.1f} us per call "
          f"({statistics.median(times) / clauses * 1e3:.0f} ns per clause)")


if __name__ == "__main__":
    main()
