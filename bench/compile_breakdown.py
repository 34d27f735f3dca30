"""Where ember's cold compile time goes: the first call of a zoo model's step, with timers around each stage of
the pipeline (exclusive time: a stage's time excludes the timed stages it calls), in a process with fresh
empty disk caches.

    python bench/compile_breakdown.py --model gpt2 --task train [--warm]

``--warm`` compiles twice (the second time after dropping the in-memory caches), so the second breakdown is
the warm compile (disk caches filled). Reported per stage: wall seconds and calls; for Triton's precompile
also the process CPU seconds spent meanwhile (CPU / wall is how many cores the compile kept busy).
"""
from __future__ import annotations

import argparse
import importlib
import os
import tempfile
import time
from collections import defaultdict

STAGES = [
    ("aot: trace", "ember.autograd.aot", "_trace"),
    ("aot: functionalize", "ember.autograd.aot", "functionalize"),
    ("aot: decompose", "ember.autograd.aot", "decompose_graph"),
    ("aot: partition", "ember.autograd.aot", "partition_joint"),
    ("loopir: lower", "ember.loopir.lower", "lower"),
    ("loopir: schedule", "ember.loopir.schedule", "schedule"),
    ("loopir: kernel bodies", "ember.loopir.kernel", "kernel_body"),
    ("loopir: in-place plan", "ember.loopir.inplace", "inplace_stores"),
    ("triton: generate source", "ember.codegen.triton", "generate"),
    ("triton: import module", "ember.codegen.triton", "load_module"),
    ("triton: precompile", "ember.codegen.triton", "precompile"),
    ("triton: wait for workers", "ember.codegen.triton_pool", "wait"),
    ("triton: C launcher build", "triton.backends.nvidia.driver", "compile_module_from_src"),
    ("triton: compile/load here", "triton.compiler", "compile"),
    ("triton: load by worker hash", "ember.codegen.triton", "load_compiled"),
    ("triton: load binary+launcher", "triton.compiler.compiler", "CompiledKernel._init_handles"),
    ("cpp: compile", "ember.codegen.cpp", "compile_kernels"),
    ("wrapper: generate", "ember.codegen.wrapper", "make_wrapper"),
]


class Timers:
    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.cpu: dict[str, float] = defaultdict(float)
        self.stack: list[list[float]] = []     # [start, child time] per open timer

    def wrap(self, label: str, f):
        def timed(*args, **kw):
            t0, c0 = time.perf_counter(), time.process_time()
            self.stack.append([t0, 0.0])
            try:
                return f(*args, **kw)
            finally:
                _, child = self.stack.pop()
                dt = time.perf_counter() - t0
                self.wall[label] += dt - child
                self.cpu[label] += time.process_time() - c0
                self.calls[label] += 1
                if self.stack:
                    self.stack[-1][1] += dt
        return timed

    def reset(self) -> None:
        self.wall.clear(), self.calls.clear(), self.cpu.clear()


def install(t: Timers) -> None:
    for label, mod, attr in STAGES:
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        *owner, name = attr.split(".")
        for o in owner:
            m = getattr(m, o, None)
        if m is not None and hasattr(m, name):
            setattr(m, name, t.wrap(label, getattr(m, name)))


def report(title: str, total: float, t: Timers) -> None:
    print(f"{title}: first call {total:.2f} s", flush=True)
    accounted = 0.0
    for label, _, _ in STAGES:
        if label in t.wall:
            w = t.wall[label]
            accounted += w
            extra = f"  cpu {t.cpu[label]:7.2f} s ({t.cpu[label] / max(w, 1e-9):.1f} cores)" \
                if label == "triton: precompile" else ""
            print(f"  {label:26s} {w:7.2f} s  {t.calls[label]:5d} calls{extra}", flush=True)
    print(f"  {'rest (capture, glue, run)':26s} {total - accounted:7.2f} s", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2")
    p.add_argument("--task", default="train", choices=("infer", "train"))
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int)
    p.add_argument("--warm", action="store_true", help="also the warm compile (disk caches filled)")
    p.add_argument("--engine", default="ember", help="ember (stage timers) or another bench engine (first call only)")
    p.add_argument("--no-warm-up", action="store_true",
                   help="no throwaway compile first: the first call also starts the compiler (a fresh process's "
                        "first compile, as a user sees it)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="run the last round under cProfile and print its N costliest functions (own time)")
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="ember-breakdown-")
    os.environ.update({"EMBER_CACHE_DIR": os.path.join(tmp, "ember"),
                       "TRITON_CACHE_DIR": os.path.join(tmp, "triton")})
    import torch

    import ember
    from ember.bench.engines import parse_engine
    from ember.bench.runner import make_step, zoo_case
    dev = torch.device(a.device)
    t = Timers()
    install(t)
    w, model, inputs = zoo_case(a.model, "full" if dev.type == "cuda" else "quick", dev, a.task, a.batch)
    engine = parse_engine(a.engine)
    if not a.no_warm_up:
        engine.warm_up(dev)     # imports and toolchain probes are not the model's compile
    eager = make_step(parse_engine("eager"), model, w, inputs, a.task, a.dtype, dev)
    eager()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    rounds = ("cold", "warm") if a.warm else ("cold",)
    for r in rounds:
        t.reset()
        ember.reset()
        step = make_step(engine, model, w, inputs, a.task, a.dtype, dev)
        prof = None
        if a.profile and r == rounds[-1]:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        t0 = time.perf_counter()
        step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if prof is not None:
            prof.disable()
        report(f"{a.model} {a.task} {a.dtype} {r}", time.perf_counter() - t0, t)
        if dev.type == "cuda":
            from ember.codegen import triton as tb
            print(f"  Triton kernel modules imported here: {len(tb._MODULES)}", flush=True)
            from ember.codegen import triton_pool
            if triton_pool._POOL is not None:
                p = triton_pool._POOL
                print(f"  worker pool so far: {p.compiled} compiled, {p.shared} kernels shared another's compile "
                      f"(same function), {p.failed} failed, {p.loaded} loaded by the "
                      f"worker's hash, {p.variants} compiled here for other argument dtypes or alignment, "
                      f"{p.mismatched} compiled again here under another cache key", flush=True)
                boot, busy = sorted(p.boot_s), sorted(p.busy_s)
                if boot and busy:
                    print(f"  workers: {len(boot)} started in {boot[0]:.2f}-{boot[-1]:.2f} s; {len(busy)} compiles, "
                          f"median {busy[len(busy) // 2]:.2f} s, max {busy[-1]:.2f} s, sum {sum(busy):.1f} s; "
                          f"pool started {p.t0 - t0:+.2f} s into the call; first submit at {p.first_submit:.2f} s, last "
                          f"reply at {p.last_reply:.2f} s after the pool started", flush=True)
        if prof is not None:
            import pstats
            pstats.Stats(prof).sort_stats("tottime").print_stats(a.profile)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(a.profile)


if __name__ == "__main__":
    main()
