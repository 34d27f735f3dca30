"""What an engine keeps on the device between calls, block by block: after compile and warm-up, the caching
allocator's segments still reserved once unused blocks are returned, and the live blocks in them with the
Python frames that allocated them (torch.cuda.memory._record_memory_history).

    python benchmarks/held_memory.py --model vit_small --engine ember [--batch 1] [--task infer]

A diagnosis tool for the bench's "held MB" column."""
from __future__ import annotations

import argparse
import gc
from collections import Counter

import torch

from ember.bench.engines import parse_engine
from ember.bench.runner import make_step, zoo_case


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--engine", default="ember")
    p.add_argument("--suite", default="full")
    p.add_argument("--task", default="infer", choices=("infer", "train"))
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--batch", type=int)
    p.add_argument("--top", type=int, default=12)
    a = p.parse_args()
    dev = torch.device("cuda")
    w, model, inputs = zoo_case(a.model, a.suite, dev, a.task, a.batch)
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = {s["address"] for s in torch.cuda.memory_snapshot()}
    torch.cuda.memory._record_memory_history(max_entries=200000)
    step = make_step(parse_engine(a.engine), model, w, inputs, a.task, a.dtype, dev)
    for _ in range(4):
        out = step()
    del out
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    snap = torch.cuda.memory._snapshot()
    segs = [s for s in snap["segments"] if s["address"] not in base]
    total = sum(s["total_size"] for s in segs) / 2**20
    print(f"{a.model} {a.task} {a.engine}: {len(segs)} new segments, {total:.1f} MB reserved")
    by_site: Counter = Counter()
    for s in segs:
        live = [b for b in s["blocks"] if b["state"] == "active_allocated"]
        pool = s.get("segment_pool_id")
        print(f"  segment {s['total_size'] / 2**20:8.1f} MB  pool {pool}  live blocks {len(live)} "
              f"({sum(b['size'] for b in live) / 2**20:.2f} MB)")
        for b in live:
            frames = [f for f in b.get("frames", []) if f.get("filename", "").endswith(".py")
                      and "torch/" not in f["filename"]]
            site = " <- ".join(f"{f['filename'].split('/')[-1]}:{f['line']}" for f in frames[:3]) or "?"
            by_site[site] += b["size"]
    print("  live bytes by allocating site (MB):")
    for site, n in by_site.most_common(a.top):
        print(f"    {n / 2**20:8.2f}  {site}")


if __name__ == "__main__":
    main()
