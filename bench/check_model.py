"""Which tensors of a zoo model's step an engine gets wrong: each output and parameter gradient's RMSE against
the fp64 eager reference, for eager and the engines, the worst first (a diagnosis tool for a bench WRONG).

    python bench/check_model.py --model bert --task train --dtype bf16 --engines ember [--repeat 3]
        [--no-direct-load]

``--repeat`` runs each compiled step that many times (a result that changes between runs of the same compiled
step is a nondeterministic kernel); ``--no-direct-load`` makes ember load its worker-compiled Triton kernels
through Triton's JIT path instead of by the worker's hash.
"""
from __future__ import annotations

import argparse
import copy

import torch

from ember.bench.engines import parse_engine
from ember.bench.measure import flatten
from ember.bench.runner import fp64_reference, make_step, zoo_case


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    d = (a.double() - b.double()).nan_to_num(0.0)
    return d.pow(2).mean().sqrt().item() if d.numel() else 0.0


def _compare_loads(tb) -> None:
    direct = tb.load_compiled
    seen = [0]

    def both(kernel, info):
        got = direct(kernel, info)
        seen[0] += 1
        if got is None:
            print(f"compare: {kernel.name}: not loaded by hash")
            return None
        jit = kernel.fn.run(*[torch.empty(1, dtype=d, device="cuda") for d in kernel.worker_dtypes],
                            grid=kernel.grid, warmup=True, **kernel.meta)
        diffs = []
        for attr in ("hash", "name"):
            if getattr(jit, attr) != getattr(got, attr):
                diffs.append(f"{attr}: jit {getattr(jit, attr)} direct {getattr(got, attr)}")
        for attr in ("signature", "constants", "attrs"):
            x, y = getattr(jit.src, attr), getattr(got.src, attr)
            if x != y:
                diffs.append(f"src.{attr}: jit {x} direct {y}")
        if jit.metadata != got.metadata:
            diffs.append(f"metadata: jit {jit.metadata} direct {got.metadata}")
        if diffs or seen[0] <= 2:
            print(f"compare: {kernel.name} dtypes {kernel.worker_dtypes}: " + ("; ".join(diffs) or "same"))
        return got
    tb.load_compiled = both


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--suite", default="full")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--task", default="train", choices=("infer", "train"))
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--engines", default="ember")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--top", type=int, default=6)
    p.add_argument("--no-direct-load", action="store_true")
    p.add_argument("--compare-loads", action="store_true",
                   help="for each kernel loaded by its worker's hash, also load it through Triton's JIT and print "
                        "where the two differ")
    a = p.parse_args()
    import ember.codegen.triton as tb
    if a.no_direct_load:
        tb.load_compiled = lambda kernel, info: None
    if a.compare_loads:
        _compare_loads(tb)
    device = torch.device(a.device)
    w, model, inputs = zoo_case(a.model, a.suite, device, a.task)
    names = ["output"] + ([n for n, q in model.named_parameters() if q.requires_grad] if a.task == "train" else [])
    ref64 = flatten(fp64_reference(model, w, inputs, a.task, device)())
    eager = [t.detach().clone() for t in flatten(make_step(parse_engine("eager"), copy.deepcopy(model), w, inputs,
                                                           a.task, a.dtype, device)())]
    e_err = [_rmse(x, r) for x, r in zip(eager, ref64)]
    for name in a.engines.split(","):
        step = make_step(parse_engine(name), copy.deepcopy(model), w, inputs, a.task, a.dtype, device)
        runs = [[t.detach().clone() for t in flatten(step())] for _ in range(a.repeat)]
        for k, res in enumerate(runs):
            errs = [_rmse(x, r) for x, r in zip(res, ref64)]
            ratio = [(err / (ee + 1e-30), i) for i, (err, ee) in enumerate(zip(errs, e_err))]
            bad = [i for i, (err, ee) in enumerate(zip(errs, e_err)) if err > 2 * ee + 1e-3]
            print(f"{name} run {k}: {len(bad)} of {len(res)} tensors further from fp64 than eager "
                  f"(bench rule: rmse > 2 x eager's + 1e-3)")
            for rt, i in sorted(ratio, reverse=True)[:a.top]:
                nm = names[i] if i < len(names) else f"#{i}"
                print(f"   {nm:60s} {tuple(res[i].shape)!s:18s} rmse {errs[i]:.3e}  eager {e_err[i]:.3e}  "
                      f"x{rt:.1f}  |ref| {ref64[i].abs().max().item():.3e}")
        for k in range(1, len(runs)):
            diff = [i for i, (x, y) in enumerate(zip(runs[0], runs[k])) if not torch.equal(x, y)]
            print(f"{name}: run {k} differs from run 0 in {len(diff)} tensors "
                  f"{[names[i] if i < len(names) else i for i in diff[:5]]}")


if __name__ == "__main__":
    main()
