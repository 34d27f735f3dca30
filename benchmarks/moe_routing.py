"""A mixture-of-experts layer (top-2 routing over 8 experts with ``torch.where`` (nonzero) and ``index_add``),
forward and backward (issue 34 part 3 acceptance): eager, ember and torch.compile (both with
capture_scalar_outputs / capture_dynamic_output_shape_ops), in one run. Reports the graph count of each
compiler, whether ember's graph ran on compiled kernels (not as captured), the max difference of the
outputs and gradients against eager, and the median step time (forward + backward).

    python benchmarks/moe_routing.py [--tokens 512] [--dim 256] [--experts 8] [--device cpu|cuda] [--reps 20]
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ember  # noqa: E402


class MoE(torch.nn.Module):
    def __init__(self, dim: int, experts: int, hidden: int) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(dim, experts, bias=False)
        self.w1 = torch.nn.Parameter(torch.randn(experts, dim, hidden) * dim ** -0.5)
        self.w2 = torch.nn.Parameter(torch.randn(experts, hidden, dim) * hidden ** -0.5)

    def forward(self, x):
        scores = torch.softmax(self.gate(x), dim=-1)
        top_w, top_i = scores.topk(2, dim=-1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(self.w1.shape[0]):
            tok, slot = torch.where(top_i == e)          # the tokens routed to expert e: a data-dependent count
            h = torch.nn.functional.gelu(x[tok] @ self.w1[e]) @ self.w2[e]
            out = out.index_add(0, tok, h * top_w[tok, slot].unsqueeze(-1))
        return out


def step(model, x):
    for p in model.parameters():
        p.grad = None
    x = x.detach().requires_grad_(True)
    out = model(x)
    out.square().mean().backward()
    return out.detach(), [x.grad] + [p.grad for p in model.parameters()]


def timed(model, x, reps: int, sync) -> float:
    for _ in range(3):
        step(model, x)
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        step(model, x)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def max_diff(a, b) -> float:
    out_a, grads_a = a
    out_b, grads_b = b
    return max([(out_a - out_b).abs().max().item()] + [(g - h).abs().max().item() for g, h in zip(grads_a, grads_b)])


class _Hints(logging.Handler):
    def __init__(self):
        super().__init__()
        self.msgs = []

    def emit(self, record):
        self.msgs.append(record.getMessage())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = MoE(a.dim, a.experts, 2 * a.dim).to(dev)
    x = torch.randn(a.tokens, a.dim, device=dev)
    want = step(model, x)

    hints = _Hints()
    logging.getLogger("ember").addHandler(hints)
    ember.set_logs(perf_hints=True)
    ember.reset()
    opts = {"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": True}
    em = ember.compile(model, options=opts)
    got = step(em, x)
    ember.set_logs(perf_hints=False)
    st = ember.stats()
    as_captured = [m for m in hints.msgs if "runs as captured" in m or "runs with eager autograd" in m]

    from torch import _dynamo
    n = [0]
    _dynamo.reset()
    _dynamo.config.capture_scalar_outputs = True
    _dynamo.config.capture_dynamic_output_shape_ops = True

    def counting(gm, ex):
        n[0] += 1
        from torch._inductor.compile_fx import compile_fx
        return compile_fx(gm, ex)
    tc = torch.compile(model, backend=counting)
    got_tc = step(tc, x)

    print(f"MoE top-2 over {a.experts} experts, {a.tokens} tokens x {a.dim} ({dev}, torch {torch.__version__})")
    print(f"ember: {st['graphs_compiled']} graph(s), {st['graph_breaks']} break(s), "
          f"{'compiled kernels' if not as_captured else 'ran as captured: ' + as_captured[0][:160]}; "
          f"max |diff| vs eager {max_diff(got, want):.2e}")
    print(f"torch.compile (inductor): {n[0]} graph(s); max |diff| vs eager {max_diff(got_tc, want):.2e}")
    t_eager = timed(model, x, a.reps, sync)
    t_ember = timed(em, x, a.reps, sync)
    t_tc = timed(tc, x, a.reps, sync)
    print(f"step time (forward + backward, median of {a.reps}): eager {t_eager:.2f} ms, ember {t_ember:.2f} ms, "
          f"torch.compile {t_tc:.2f} ms")


if __name__ == "__main__":
    main()
