"""ember's Triton matmul templates on BERT-base's linear layers (batch 8 x 512 tokens, bf16), one shape at a
time: every candidate max-autotune timed (``EMBER_LOGS=autotune``: each block configuration, and the cuBLAS call
followed by the epilogue kernel), then the compiled call and cuBLAS alone, back to back and with the L2 cache
flushed before each call (what a layer sees inside a model).

    python bench/mm_templates.py [--extra-configs] [--only ffn_up,head]

``--extra-configs`` adds the block configurations torch.compile's max-autotune chose for these shapes on the
H100 (128x128x64 and 64x128x64 with 4 warps, 3 stages) to ember's table first. A diagnosis tool."""
from __future__ import annotations

import argparse
import os
import statistics

import torch
import torch.nn.functional as F

M = 4096
SHAPES = {      # name: (K, N, epilogue)
    "qkv": (768, 768, None),
    "ffn_up": (768, 3072, "gelu"),
    "ffn_down": (3072, 768, None),
    "head": (768, 30522, None),
}


def _time(fn, flush: torch.Tensor | None, reps: int = 30) -> float:
    """Median microseconds of one call (CUDA events), after warm-up; ``flush`` is zeroed before each call."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        if flush is not None:
            flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1e3)
    return statistics.median(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--extra-configs", action="store_true")
    p.add_argument("--only", default=",".join(SHAPES))
    a = p.parse_args()
    os.environ.setdefault("EMBER_LOGS", "autotune")
    import ember
    from ember.codegen import triton_mm
    if a.extra_configs:
        triton_mm.CONFIGS_16BIT = ((128, 128, 64, 4, 3), (64, 128, 64, 4, 3)) + triton_mm.CONFIGS_16BIT
    flush = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
    dev = torch.device("cuda")
    for name in a.only.split(","):
        k, n, epi = SHAPES[name]
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(M, k, device=dev, dtype=torch.bfloat16, generator=g)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=g) * k ** -0.5
        b = torch.randn(n, device=dev, dtype=torch.bfloat16, generator=g)

        def layer(x, w=w, b=b, epi=epi):
            y = F.linear(x, w, b)
            return F.gelu(y) if epi == "gelu" else y
        print(f"== {name}: {M}x{k} @ {k}x{n} bf16" + (f" + {epi}" if epi else ""), flush=True)
        ember.reset()
        compiled = ember.compile(layer, mode="max-autotune-no-cudagraphs")
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), layer(x), rtol=2e-2, atol=2e-2)
            for label, fn in (("ember max-autotune", lambda: compiled(x)), ("eager (cuBLAS + epilogue)", lambda: layer(x)),
                              ("cuBLAS linear alone", lambda: F.linear(x, w, b))):
                hot, cold = _time(fn, None), _time(fn, flush)
                tflops = 2 * M * k * n / (cold * 1e-6) / 1e12
                print(f"   {label:28s} back to back {hot:8.1f} us   L2 flushed {cold:8.1f} us  ({tflops:.0f} TFLOPS)",
                      flush=True)


if __name__ == "__main__":
    main()
