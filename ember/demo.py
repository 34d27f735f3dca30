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
    _kernel_compiler_demo(model, x, graphs[0])


def _kernel_compiler_demo(model, x, gm) -> None:
    """The default backend on this machine: the graph's prims as fused C++/OpenMP kernels and their wrapper."""
    import ember
    from ember.autograd.aot import aot_compile
    from ember.codegen import compile_graph
    from ember.options import CompileOptions
    built = []

    def keep(g, kind):
        c = compile_graph(g, kind, CompileOptions())
        built.append(c)
        return c
    params = [p for p in model.parameters()]
    aot_compile(gm, [x, *params][:len([n for n in gm.graph.nodes if n.op == "placeholder"])], decompose=True,
                compile_graph=keep)
    print("\n" + "=" * 100)
    print("backend 'ember' (the default): fused kernels, C++/OpenMP on this CPU")
    print("=" * 100)
    for c in built[:1]:
        if hasattr(c, "source"):
            print("--- generated wrapper ---")
            print(c.source)
            print("--- kernels ---")
            print("\n".join(c.kernel_sources[:3]))
    compiled = ember.compile(model)
    with torch.no_grad():
        ok = torch.allclose(compiled(x), model(x), atol=1e-5)
        t_eager, t_ember = _time(model, x), _time(compiled, x)
    print(f"result equals eager: {ok}; µs/call: eager {t_eager:.1f}, ember {t_ember:.1f}")


if __name__ == "__main__":
    main()
