"""`make demo`: compile a small model and show what ember captured: the graph, the guards, the glue, and
the call time against eager and torch.compile (all with the eager backend, since kernels come later)."""
from __future__ import annotations

import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Demo(nn.Module):
    def __init__(self, d: int = 32, n: int = 2):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x).softmax(-1)


def _time(fn, x, n=2000):
    for _ in range(50):
        fn(x)
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n // 7):
            fn(x)
        ts.append((time.perf_counter() - t0) / (n // 7))
    return statistics.median(ts) * 1e6


def main() -> None:
    import ember
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = Demo().eval()
    x = torch.randn(4, 32)
    graphs = []

    def show(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = ember.compile(model, backend=show, fullgraph=True)
    with torch.no_grad():
        out = compiled(x)
        ok = torch.allclose(out, model(x), atol=1e-6)
    cache = compiled._ember_cache
    entry = cache.entries[0]
    from ember.capture.torch import readable_graph
    print("=" * 100)
    print(f"ember {ember.__version__}: compiled {type(model).__name__} ({sum(p.numel() for p in model.parameters())} "
          f"parameters) into {len(graphs)} graph(s); result equals eager: {ok}")
    print("=" * 100)
    print("\n--- captured FX graph (each node: shape, device, your file:line) ---")
    print(readable_graph(graphs[0]))
    print(f"\n--- guards ({len(entry.guards)}) checked on every call ---")
    for g in entry.guards:
        print(f"  {g.reason}")
    print("\n--- the glue (generated Python that runs on every call) ---")
    print(entry.glue_source if len(entry.glue_source) < 4000 else entry.glue_source[:4000] + "\n  ...")
    with torch.no_grad():
        t_eager = _time(model, x)
        t_ember = _time(compiled, x)
        ref = torch.compile(model, backend="eager")     # the reference, for comparison only
        ref(x)
        t_torch = _time(ref, x)
    print("--- call time (median, µs/call, CPU, backend eager) ---")
    print(f"  eager                          {t_eager:8.1f}")
    print(f"  ember.compile                  {t_ember:8.1f}   overhead {t_ember - t_eager:+.1f}")
    print(f"  torch.compile(backend=eager)   {t_torch:8.1f}   overhead {t_torch - t_eager:+.1f}")
    print("\nember's stats:", ember.stats())


if __name__ == "__main__":
    main()
