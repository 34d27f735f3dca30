"""cuBLAS on a GPT-2 LM head (4096 x 768 @ 768 x 50257, bf16): misaligned rows vs the ways to align them.
    python bench/mm_alignment.py
Prints ms per call of each variant and its max difference from the plain call, and which kernels ran."""
import torch, time
from torch.profiler import profile, ProfilerActivity
a = torch.randn(4096, 768, device="cuda", dtype=torch.bfloat16)
w = torch.randn(50257, 768, device="cuda", dtype=torch.bfloat16)
def bench(f, n=20):
    for _ in range(3): f()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): f()
    torch.cuda.synchronize(); return (time.perf_counter() - t) / n * 1e3
def plain(): return torch.mm(a, w.t())
def out_view():
    o = torch.empty(4096, 50264, device="cuda", dtype=torch.bfloat16)[:, :50257]
    return torch.mm(a, w.t(), out=o)
wp = torch.zeros(50264, 768, device="cuda", dtype=torch.bfloat16); wp[:50257] = w
def padded(): return torch.mm(a, wp.t())[:, :50257]
def padded_T():   # C^T = W a^T: (50257 x 768) @ (768 x 4096), output ld 4096
    return torch.mm(w, a.t()).t()
for f in (plain, out_view, padded, padded_T):
    r = f()
    print(f.__name__, f"{bench(f):.3f} ms", r.stride(), (r.float() - plain().float()).abs().max().item())
with profile(activities=[ProfilerActivity.CUDA]) as p:
    out_view(); torch.cuda.synchronize()
print(p.key_averages().table(sort_by="cuda_time_total", row_limit=6))
g = torch.randn(4096, 50257, device="cuda", dtype=torch.bfloat16)
gp = torch.zeros(4096, 50264, device="cuda", dtype=torch.bfloat16)[:, :50257]; gp.copy_(g)
print("dA plain", bench(lambda: torch.mm(g, w)), "dA padded-ld", bench(lambda: torch.mm(gp, w)))
print("dW plain", bench(lambda: torch.mm(g.t(), a)), "dW padded-ld", bench(lambda: torch.mm(gp.t(), a)))
