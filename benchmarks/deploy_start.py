"""Time to the first output in a fresh process, for inference: an ember package (``ember.load_package``) against
``ember.compile`` cold, ``torch.compile`` cold, and AOTInductor (``aoti_load_package``) where it works.

    python benchmarks/deploy_start.py [--models nanogpt,resnet] [--suite quick] [--runs 3] [--batch 4]
    python benchmarks/deploy_start.py --steady [--models ...]    # per-call time: package vs ember.compile

The parent exports each zoo model with a dynamic batch and builds the packages (ember's and AOTInductor's, not
timed); each measurement is one fresh process. ``import torch`` is timed apart (every engine pays it); the
figure is what follows it: importing ember or torch's compiler, building the model (compile engines: a package
carries its weights), loading or compiling, and the first call. Cold = an empty cache folder per process
(``EMBER_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``). CPU only for now (the machine's cores
are shared: compare within one run).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))       # this checkout's ember, in the parent as in the children (PYTHONPATH)

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
a = json.loads(sys.argv[1])
x = torch.load(a["inputs"])
with torch.no_grad():
    if a["engine"] == "package":
        import ember
        y = ember.load_package(a["path"])(*x)
    elif a["engine"] == "aoti":
        import torch._inductor
        y = torch._inductor.aoti_load_package(a["path"])(*x)
    else:
        from ember.bench.zoo import HANDWRITTEN
        entry = next(e for e in HANDWRITTEN if e.name == a["model"])
        model = entry.build(a["suite"], torch.device("cpu")).model.eval()
        if a["engine"] == "ember":
            import ember
            y = ember.compile(model, dynamic=True)(*x)
        else:
            y = torch.compile(model, dynamic=True)(*x)
t2 = time.perf_counter()
out = {"import_torch_s": t1 - t0, "first_output_s": t2 - t1}
if a["engine"] in ("package", "ember"):
    out["stats"] = {k: v for k, v in ember.stats().items() if v}
print(json.dumps(out))
"""


def build(model: str, suite: str, batch: int, d: Path) -> dict:
    """Export ``model`` with a dynamic batch; write its inputs, its ember package and its AOTInductor package."""
    import torch

    import ember
    from ember.bench.zoo import HANDWRITTEN
    entry = next(e for e in HANDWRITTEN if e.name == model)
    w = entry.build(suite, torch.device("cpu"))
    w.model.eval()
    args = w.make_inputs(0, torch.device("cpu")).args
    args = tuple(t.repeat(-(-batch // t.shape[0]), *([1] * (t.dim() - 1)))[:batch] for t in args)
    torch.save(args, d / f"{model}.inputs.pt")
    dyn = tuple({0: ember.Dim("batch", max=1024)} for _ in args)
    ember.aot_compile(ember.export(w.model, args, dynamic_shapes=dyn), d / f"{model}.ember-pkg")
    out = {"inputs": str(d / f"{model}.inputs.pt"), "package": str(d / f"{model}.ember-pkg")}
    try:
        from torch.export import Dim, export
        tdyn = tuple({0: Dim("batch", min=2, max=1024)} for _ in args)
        ep = export(w.model, args, dynamic_shapes=tdyn)
        import torch._inductor
        out["aoti"] = torch._inductor.aoti_compile_and_package(ep, package_path=str(d / f"{model}.pt2"))
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        out["aoti_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


def measure(engine: str, model: str, suite: str, built: dict, d: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cold = Path(tempfile.mkdtemp(dir=d))
    env.update(EMBER_CACHE_DIR=str(cold / "ember"), TORCHINDUCTOR_CACHE_DIR=str(cold / "inductor"),
               TRITON_CACHE_DIR=str(cold / "triton"))
    path = built["package"] if engine == "package" else built.get("aoti", "")
    arg = json.dumps({"engine": engine, "model": model, "suite": suite, "inputs": built["inputs"], "path": path})
    out = subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"rc {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def steady(model: str, suite: str, batch: int, d: Path, calls: int = 50) -> dict:
    """Per-call time of the package and of ``ember.compile`` on the same inputs, in this process, interleaved
    (median of ``calls`` rounds after warm-up)."""
    import time

    import torch

    import ember
    from ember.bench.zoo import HANDWRITTEN
    built = build(model, suite, batch, d) if not (d / f"{model}.ember-pkg").exists() else \
        {"inputs": str(d / f"{model}.inputs.pt"), "package": str(d / f"{model}.ember-pkg")}
    x = torch.load(built["inputs"])
    entry = next(e for e in HANDWRITTEN if e.name == model)
    runs = {"package": ember.load_package(built["package"]),
            "ember": ember.compile(entry.build(suite, torch.device("cpu")).model.eval(), dynamic=True)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    with torch.no_grad():
        for fn in runs.values():
            for _ in range(3):
                fn(*x)
        for _ in range(calls):
            for k, fn in runs.items():
                t = time.perf_counter()
                fn(*x)
                times[k].append(time.perf_counter() - t)
    return {"model": model, "threads": torch.get_num_threads(),
            **{f"{k}_ms_median": round(1e3 * statistics.median(v), 3) for k, v in times.items()},
            **{f"{k}_ms_min": round(1e3 * min(v), 3) for k, v in times.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="nanogpt,resnet")
    p.add_argument("--suite", default="quick")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--engines", default="package,ember,torch,aoti")
    p.add_argument("--steady", action="store_true", help="per-call time, package vs ember.compile, one process")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads for --steady (0: torch's default)")
    a = p.parse_args()
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for model in a.models.split(","):
            if a.steady:
                print(json.dumps(steady(model, a.suite, a.batch, d)), flush=True)
                continue
            built = build(model, a.suite, a.batch, d)
            for engine in a.engines.split(","):
                if engine == "aoti" and "aoti" not in built:
                    print(json.dumps({"model": model, "engine": engine, "error": built.get("aoti_error")}))
                    continue
                runs = [measure(engine, model, a.suite, built, d) for _ in range(a.runs)]
                ok = [r for r in runs if "error" not in r]
                row = {"model": model, "engine": engine, "runs": len(ok)}
                if ok:
                    row["first_output_s_median"] = round(statistics.median(r["first_output_s"] for r in ok), 3)
                    row["first_output_s_min"] = round(min(r["first_output_s"] for r in ok), 3)
                    row["import_torch_s_median"] = round(statistics.median(r["import_torch_s"] for r in ok), 3)
                    row["stats"] = ok[-1].get("stats")
                if len(ok) < len(runs):
                    row["error"] = next(r["error"] for r in runs if "error" in r)
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
