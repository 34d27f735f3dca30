"""Activation memory of a training step (issue 4 acceptance): a 12-layer MLP, bytes saved for the backward by
ember's min-cut partitioner, by saving every activation (ember with recompute=False), by
torch.compile(backend="aot_eager") and by eager, in one run. Saved tensors are counted with
torch.autograd.graph.saved_tensors_hooks (unique storages), which is what stays alive between forward and
backward; gradients are checked against eager.

    python benchmarks/aot_memory.py [--width 512] [--batch 256] [--layers 12]
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def mlp(width: int, layers: int) -> nn.Module:
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width)]
    return nn.Sequential(*mods)


def saved_bytes(model, x) -> tuple[int, list]:
    seen: dict[int, int] = {}

    def pack(t):
        try:
            key = t.untyped_storage().data_ptr()
            seen[key] = max(seen.get(key, 0), t.untyped_storage().nbytes())
        except Exception:       # noqa: BLE001
            pass
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    out.float().pow(2).mean().backward()
    return sum(seen.values()), [p.grad for p in model.parameters()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--layers", type=int, default=12)
    a = ap.parse_args()
    import ember
    from ember.autograd.aot import aot_compile
    torch.manual_seed(0)
    base = mlp(a.width, a.layers)
    x = torch.randn(a.batch, a.width)
    engines = {
        "eager": lambda m: m,
        "ember min-cut": lambda m: ember.compile(m, backend="aot_eager"),
        "ember save-all": lambda m: ember.compile(
            m, backend=lambda gm, ex: aot_compile(gm, ex, recompute=False)),
        "torch.compile aot_eager": lambda m: torch.compile(m, backend="aot_eager"),
    }
    ref_grads = None
    print(f"{a.layers}-layer MLP (Linear+GELU+LayerNorm), width {a.width}, batch {a.batch}, float32 CPU")
    print(f"{'engine':<26} {'saved MB':>9}  grads == eager")
    for name, make in engines.items():
        m = copy.deepcopy(base)
        c = make(m)
        saved_bytes(c, x)                   # compile and warm up
        m.zero_grad()
        b, grads = saved_bytes(c, x)
        if ref_grads is None:
            ref_grads = grads
        ok = all(torch.allclose(g, r, atol=1e-4, rtol=1e-4) for g, r in zip(grads, ref_grads))
        print(f"{name:<26} {b / 2**20:9.1f}  {ok}")


if __name__ == "__main__":
    main()
