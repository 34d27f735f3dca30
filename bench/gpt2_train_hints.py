"""Why a transformers GPT-2 training step runs (or not) as CUDA graphs under reduce-overhead: the perf hints and
the number of recordings and replays over a few AdamW steps.

    python bench/gpt2_train_hints.py [--mode reduce-overhead]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ember  # noqa: E402
from ember.runtime import cudagraphs as cg  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="reduce-overhead")
    a = ap.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel
    n = {"record": 0, "replay": 0}
    rec, rep = cg.CudaOps.record, cg.CudaOps.replay
    cg.CudaOps.record = lambda self, *x, **k: (n.__setitem__("record", n["record"] + 1), rec(self, *x, **k))[1]
    cg.CudaOps.replay = lambda self, g: (n.__setitem__("replay", n["replay"] + 1), rep(self, g))[1]
    ember.set_logs(perf_hints=True, graph_breaks=True)
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).cuda()
    compiled = ember.compile(model, mode=a.mode)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for s in range(4):
        idx = torch.randint(0, 1000, (4, 64), device="cuda")
        opt.zero_grad()
        loss = compiled(input_ids=idx, labels=idx).loss
        loss.backward()
        opt.step()
        print(f"step {s}: loss {loss.item():.4f}, recordings {n['record']}, replays {n['replay']}", flush=True)


if __name__ == "__main__":
    main()
