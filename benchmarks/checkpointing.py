"""Activation checkpointing (issue 34): a 12-layer transformer trained with non-reentrant checkpointing on
every block, eager vs ember vs torch.compile, one process per engine (peak memory is per process):

    python benchmarks/checkpointing.py [--device cuda] [--engines eager,ember,inductor] [--no-checkpoint]

Prints JSON lines: losses of 5 steps (must equal eager's), peak memory of a step (CUDA: max allocated; CPU: the
growth of the process's peak RSS during the steps, a coarse figure) and the median step time."""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

CHILD = r'''
import json, sys, time, statistics, resource, torch
import torch.nn as nn, torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
a = json.loads(sys.argv[1])
dev = torch.device(a["device"])
torch.manual_seed(0)

class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__()
        s.ln1, s.ln2, s.h = nn.LayerNorm(d), nn.LayerNorm(d), h
        s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.fc1, s.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + s.proj(y)
        return x + s.fc2(F.gelu(s.fc1(s.ln2(x))))

class Net(nn.Module):
    def __init__(s, d, h, n, ckpt):
        super().__init__()
        s.blocks, s.ckpt = nn.ModuleList(Block(d, h) for _ in range(n)), ckpt
    def forward(s, x):
        for b in s.blocks:
            x = checkpoint(b, x, use_reentrant=False) if s.ckpt else b(x)
        return x.float().pow(2).mean()

d, h, B, T = a["d"], a["h"], a["batch"], a["seq"]
model = Net(d, h, 12, a["ckpt"]).to(dev)
fn = model
if a["engine"] == "ember":
    import ember; fn = ember.compile(model)
elif a["engine"] == "inductor":
    fn = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
xs = [torch.randn(B, T, d, generator=torch.Generator().manual_seed(i)).to(dev) for i in range(5)]
def step(x):
    loss = fn(x); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); return float(loss)
sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
losses = [step(xs[0])]                       # compile + warm-up
if dev.type == "cuda":
    torch.cuda.reset_peak_memory_stats()
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
times = []
for x in xs[1:]:
    sync(); t0 = time.perf_counter(); losses.append(step(x)); sync(); times.append(time.perf_counter() - t0)
peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else \
    (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
print(json.dumps({"engine": a["engine"], "checkpoint": a["ckpt"], "losses": losses, "peak_mb": round(peak, 1),
                  "step_ms": round(statistics.median(times) * 1e3, 2)}))
'''


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--engines", default="eager,ember,inductor")
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--h", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--no-checkpoint", action="store_true")
    a = p.parse_args()
    ref = None
    for engine in a.engines.split(","):
        args = {"engine": engine, "device": a.device, "d": a.d, "h": a.h, "batch": a.batch, "seq": a.seq,
                "ckpt": not a.no_checkpoint}
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("{")), None)
        if line is None:
            print(json.dumps({"engine": engine, "error": out.stderr.strip().splitlines()[-1:]}))
            continue
        row = json.loads(line)
        ref = ref or row["losses"]
        row["max_rel_loss_diff_vs_first"] = max(abs(x - y) / max(abs(y), 1e-9) for x, y in zip(row["losses"], ref))
        print(json.dumps(row), flush=True)


_ = (resource, statistics, time)

if __name__ == "__main__":
    main()
