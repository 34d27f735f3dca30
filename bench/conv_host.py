"""Host time of ResNet-50's convolutions by call path: the time to enqueue all 53 bf16 channels-last
convolutions of one forward (batch BATCH) while the GPU sleeps, per ATen entry point, with and without autocast.

    python bench/conv_host.py [--batch 64] [--reps 30]

Tells what one extern convolution call costs the host, and whether another entry point costs less."""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def _shapes(batch: int) -> list[tuple]:
    import torchvision
    m = torchvision.models.resnet50()
    out = []

    def hook(mod, inp, _):
        out.append((tuple(inp[0].shape), mod.weight.shape, mod.stride, mod.padding, mod.dilation, mod.groups))
    for mod in m.modules():
        if isinstance(mod, torch.nn.Conv2d):
            mod.register_forward_hook(hook)
    with torch.no_grad():
        m(torch.randn(1, 3, 224, 224))
    return [((batch, *x[1:]), w, s, p, d, g) for x, w, s, p, d, g in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    dev = torch.device("cuda")
    cl = torch.channels_last
    cases = []
    for xs, ws, s, p, d, g in _shapes(a.batch):
        x = torch.randn(xs, device=dev, dtype=torch.bfloat16).to(memory_format=cl)
        w = torch.randn(ws, device=dev, dtype=torch.bfloat16).to(memory_format=cl)
        cases.append((x, w, list(s), list(p), list(d), g))
    b = torch.backends.cudnn
    paths = {
        "torch.ops.aten.convolution.default": lambda x, w, s, p, d, g: torch.ops.aten.convolution.default(
            x, w, None, s, p, d, False, [0, 0], g),
        "torch.convolution": lambda x, w, s, p, d, g: torch.convolution(x, w, None, s, p, d, False, [0, 0], g),
        "F.conv2d": lambda x, w, s, p, d, g: torch.nn.functional.conv2d(x, w, None, s, p, d, g),
        "torch.ops.aten.cudnn_convolution.default": lambda x, w, s, p, d, g: torch.ops.aten.cudnn_convolution.default(
            x, w, p, s, d, g, b.benchmark, b.deterministic, b.allow_tf32),
        "torch.cudnn_convolution": lambda x, w, s, p, d, g: torch.cudnn_convolution(
            x, w, p, s, d, g, b.benchmark, b.deterministic, b.allow_tf32),
    }
    from ember.bench.measure import sleep_cycles_per_ms
    cyc = int(sleep_cycles_per_ms() * 50)      # 50 ms of sleep: longer than any enqueue here
    ref = [paths["F.conv2d"](*c) for c in cases]
    results = {}
    for autocast in (False, True):
        for name, f in paths.items():
            outs = [f(*c) for c in cases]
            ok = all(torch.equal(o, r) for o, r in zip(outs, ref))
            del outs
            times = []
            with torch.no_grad(), torch.autocast("cuda", torch.bfloat16, enabled=autocast):
                for _ in range(a.reps):
                    torch.cuda._sleep(cyc)
                    t = time.perf_counter()
                    for c in cases:
                        f(*c)
                    times.append(time.perf_counter() - t)
                    torch.cuda.synchronize()
            results[(name, autocast)] = statistics.median(times) / len(cases) * 1e6
            print(f"{name:42s} autocast={autocast!s:5s} {results[(name, autocast)]:7.1f} us per conv"
                  f"  {'same output' if ok else 'OUTPUT DIFFERS'}", flush=True)


if __name__ == "__main__":
    main()
