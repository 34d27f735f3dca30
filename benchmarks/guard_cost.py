"""Host cost of a cached call's guards and glue for a module with as many weights as a ResNet-50: 53 blocks of
a 1x1 convolution and a batch norm (318 parameters and buffers), in eval mode under ``no_grad``, compiled with a
backend whose graph does nothing, so each call is the generated glue alone: its guard clauses, then the graph's
inputs pulled from the module.

    python benchmarks/guard_cost.py [--blocks 53] [--resnet]

Prints microseconds per call (the best and the median of 15 batches: this host's noise only adds) and how many
guard clauses the entry checks (``ember.explain(...).guards``)."""
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


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 block, module for module (conv1/bn1 ... downsample), at small widths."""

    def __init__(self, c: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
        self.conv3, self.bn3 = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet50Like(nn.Module):
    """torchvision's ResNet-50 layout (stem, 3-4-6-3 bottlenecks with downsample branches, pooled head): the
    same modules, attributes and 320 parameters and buffers as the real one, at width 4."""

    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, c, 7, 2, 3, bias=False), nn.BatchNorm2d(c)
        self.relu, self.maxpool = nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        for i, n in enumerate((3, 4, 6, 3)):
            stride = 1 if i == 0 else 2
            down = nn.Sequential(nn.Conv2d(c, c, 1, stride, bias=False), nn.BatchNorm2d(c))
            setattr(self, f"layer{i + 1}", nn.Sequential(Bottleneck(c, stride, down),
                                                         *[Bottleneck(c) for _ in range(n - 1)]))
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=53)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--resnet", action="store_true", help="ResNet-50's module tree instead of the blocks")
    a = ap.parse_args()
    import ember
    m = (ResNet50Like() if a.resnet else nn.Sequential(*[Block(4) for _ in range(a.blocks)])).eval()
    x = torch.randn(1, 3, 32, 32) if a.resnet else torch.randn(1, 4, 2, 2)
    out = (torch.zeros(1),)
    f = ember.compile(m, backend=lambda gm, example_inputs: (lambda *args: out))
    with torch.no_grad():
        f(x)
        f(x)
        times = []
        for _ in range(15):
            t = time.perf_counter()
            for _ in range(a.calls):
                f(x)
            times.append((time.perf_counter() - t) / a.calls * 1e6)
    tensors = sum(1 for _ in m.parameters()) + sum(1 for _ in m.buffers())
    with torch.no_grad():           # the entry's guards, as ember.explain lists them (one per clause)
        clauses = len(ember.explain(m)(x).guards)
    best, med = min(times), statistics.median(times)
    print(f"{tensors} weights, {clauses} guard clauses: {best:.1f} us per call at best, {med:.1f} median "
          f"({best / clauses * 1e3:.0f} ns per clause)")


if __name__ == "__main__":
    main()
