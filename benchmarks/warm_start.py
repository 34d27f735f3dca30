"""A warm start as a user meets it: the same compiled step in fresh processes sharing one cache folder (the first
process compiles cold, the next ones should find every kernel on disk), each with its own string hash seed as
Python gives it. Prints each process's first-call time and how many kernel files it added to the cache.
``first_call_s`` is the compiled step's first call (capture, compile or cache hit, run); ``after_import_torch_s``
is everything after ``import torch`` to the first output: importing the compiler (ember's pipeline and
sympy, or torch._dynamo and Inductor), building the model, ``compile()``, the first call. ``..._cpu_s`` is the
process's CPU time (OpenMP's worker threads spinning included), ``..._main_cpu_s`` the main thread's alone
(capture, imports and the compiler run there): the steadier figure on a shared machine.

    python benchmarks/warm_start.py --model nanogpt --task train [--device cpu] [--runs 3] [--engine ember,inductor]

For ember the warm processes find whole compiled graphs on disk too (``ember.graphcache``: capture
and guards run, AOT autograd, lowering and codegen do not); each row shows ``ember.stats()``'s
``graph_cache_hits``, ``traces`` and ``kernel_compiles``. ``--engine`` takes a comma list: each engine gets its
own cache folder (torch.compile's warm runs use Inductor's FX-graph and kernel caches,
``TORCHINDUCTOR_CACHE_DIR``), all in the same run.

Before the nineteenth session a kernel's stored buffers came in a set's order, so its source, and its cache key,
changed with the hash seed: warm processes recompiled every kernel storing two or more buffers. The
``dynamo`` field says whether torch._dynamo got imported (``--dynamo-import``: as before ``ember.dynamo_free``)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import time
t_start = time.perf_counter()
import json, sys, torch
t_torch, c_torch, m_torch = time.perf_counter(), time.process_time(), time.thread_time()
from ember.bench.engines import parse_engine
from ember.bench.runner import make_step, zoo_case
a = json.loads(sys.argv[1])
if a["dynamo_import"]:          # as before ember.dynamo_free: torch's meta kernels import torch._dynamo
    import ember.dynamo_free
    ember.dynamo_free._DONE[0] = True
dev = torch.device(a["device"])
torch.set_num_threads(a["threads"]) if a["threads"] else None
w, model, inputs = zoo_case(a["model"], a["suite"], dev, a["task"])
step = make_step(parse_engine(a["engine"]), model, w, inputs, a["task"], a["dtype"], dev)
t0, c0 = time.perf_counter(), time.process_time()
step()
if dev.type == "cuda":
    torch.cuda.synchronize()
t_end = time.perf_counter()
row = {"first_call_s": round(t_end - t0, 3), "cpu_s": round(time.process_time() - c0, 3),
       "after_import_torch_s": round(t_end - t_torch, 3),
       "after_import_torch_cpu_s": round(time.process_time() - c_torch, 3),
       "after_import_torch_main_cpu_s": round(time.thread_time() - m_torch, 3),
       "import_torch_s": round(t_torch - t_start, 3),
       "dynamo": "torch._dynamo" in sys.modules}
if "ember" in sys.modules and "ember.counters" in sys.modules:
    from ember import counters
    row |= {k: v for k, v in counters.snapshot().items() if k in ("graph_cache_hits", "traces", "kernel_compiles")}
print(json.dumps(row))
"""


def kernel_files(cache: Path) -> int:
    return sum(1 for p in cache.rglob("*") if p.is_file() and p.suffix in (".py", ".cpp", ".so"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="nanogpt")
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--task", default="train", choices=("infer", "train"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bf16"))
    ap.add_argument("--engine", default="ember")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dynamo-import", action="store_true",
                    help="let torch's meta kernels import torch._dynamo (ember.dynamo_free off), as before")
    a = ap.parse_args()
    for engine in a.engine.split(","):
        run_engine(argparse.Namespace(**(vars(a) | {"engine": engine.strip()})))


def run_engine(a: argparse.Namespace) -> None:
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as d:
        cache = Path(d)
        env = dict(os.environ, EMBER_CACHE_DIR=str(cache), TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
                   PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.pop("PYTHONHASHSEED", None)
        # an installed ember has its bytecode cached (__pycache__), as a user's warm start finds it; a caller's
        # PYTHONDONTWRITEBYTECODE made every child compile ember's ~300 modules from source again (~0.5 s more)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        rows = []
        for i in range(a.runs):
            before = kernel_files(cache)
            proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(vars(a))], env=env, cwd=root,
                                  capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"run {i} failed:\n{proc.stderr[-3000:]}")
            out = proc.stdout.strip().splitlines()[-1]
            row = json.loads(out) | {"run": i, "cache": "cold" if i == 0 else "warm",
                                     "new_kernel_files": kernel_files(cache) - before}
            print(json.dumps({"model": a.model, "task": a.task, "engine": a.engine, **row}), flush=True)
            rows.append(row)
        print(json.dumps(summary(a, rows)), flush=True)


def summary(a: argparse.Namespace, rows: list[dict]) -> dict:
    """The cold run's times and the warm runs' medians."""
    out: dict = {"summary": a.engine, "model": a.model, "task": a.task}
    warm = rows[1:]
    for k in ("first_call_s", "cpu_s", "after_import_torch_s", "after_import_torch_cpu_s",
              "after_import_torch_main_cpu_s"):
        out[f"cold_{k}"] = rows[0][k]
        if warm:
            out[f"warm_{k}_median"] = round(statistics.median(r[k] for r in warm), 3)
    return out


if __name__ == "__main__":
    main()
