"""Time to the first output in a fresh process, for inference: an ember package (``ember.load_package``) against
``ember.compile`` and ``torch.compile``, each cold and warm, and AOTInductor (``aoti_load_package``) where it
works; on the CPU or on a CUDA GPU.

    python benchmarks/deploy_start.py [--device cpu] [--models nanogpt,resnet] [--suite quick] [--runs 3]
    python benchmarks/deploy_start.py --device cuda [--models gpt2,resnet50] [--suite full] [--batch 8]
    python benchmarks/deploy_start.py --steady [--models ...]    # per-call time: package vs ember.compile

Engines (``--engines``, a comma list): ``package`` (``ember.aot_compile(..., device=D)``: C++ kernels on the CPU,
Triton kernels as compiled binaries on CUDA), ``ember`` / ``torch`` (cold: an empty cache folder per process:
``EMBER_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``), ``ember-warm`` / ``torch-warm`` (one
cache folder per model and engine, filled by an untimed fresh process first: ember's whole-graph cache,
Inductor's FX-graph and kernel caches, Triton's cache), ``aoti``.

The parent exports each zoo model with a dynamic batch and builds the packages (ember's and AOTInductor's, not
timed); each measurement is one fresh process. ``import torch`` is timed apart (every engine pays it); the
figure is what follows it: importing ember or torch's compiler, building the model on the device (compile
engines: a package carries its weights), loading or compiling, and the first call, synchronized on CUDA (CUDA's
context is made within it, for every engine). The machine's cores may be shared: compare within one run.
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

ENGINES = ("package", "ember", "ember-warm", "torch", "torch-warm", "aoti")
DEFAULT_MODELS = {"cpu": "nanogpt,resnet", "cuda": "gpt2,resnet50"}

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
a = json.loads(sys.argv[1])
dev = torch.device(a["device"])
args, kwargs = torch.load(a["inputs"], map_location=dev)
with torch.no_grad():
    if a["engine"] == "package":
        import importlib
        for name in a["modules"]:     # the output container's module (a transformers ModelOutput): the server's
            importlib.import_module(name)   # own import, timed; ember imports nothing a package names
        import ember
        y = ember.load_package(a["path"])(*args, **kwargs)
    elif a["engine"] == "aoti":
        import torch._inductor
        y = torch._inductor.aoti_load_package(a["path"])(*args, **kwargs)
    else:
        from ember.bench.runner import zoo_case
        _, model, _ = zoo_case(a["model"], a["suite"], dev, "infer")
        if a["engine"].startswith("ember"):
            import ember
            y = ember.compile(model, dynamic=True)(*args, **kwargs)
        else:
            y = torch.compile(model, dynamic=True)(*args, **kwargs)
    if dev.type == "cuda":
        torch.cuda.synchronize()
t2 = time.perf_counter()
out = {"import_torch_s": t1 - t0, "first_output_s": t2 - t1}
if a["engine"].startswith(("package", "ember")):
    out["stats"] = {k: v for k, v in ember.stats().items() if v}
print(json.dumps(out))
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--models", default=None, help="comma list of zoo models (default: "
                   + "; ".join(f"{d}: {m}" for d, m in DEFAULT_MODELS.items()) + ")")
    p.add_argument("--suite", default="quick")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--steady", action="store_true", help="per-call time, package vs ember.compile, one process")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads for --steady (0: torch's default)")
    a = p.parse_args(argv)
    a.models = (a.models or DEFAULT_MODELS[a.device]).split(",")
    a.engines = a.engines.split(",")
    bad = [e for e in a.engines if e not in ENGINES]
    if bad:
        p.error(f"unknown engine(s) {', '.join(bad)}; choose from {', '.join(ENGINES)}")
    return a


def check_device(device: str) -> None:
    """A clear stop before anything is built: a CUDA run needs a CUDA device (and Triton) in this process."""
    if device != "cuda":
        return
    import torch
    if not torch.cuda.is_available():
        sys.exit("deploy_start: --device cuda needs a CUDA device (torch.cuda.is_available() is False here); "
                 "run it on the GPU machine, or use --device cpu")


def _with_batch(args: tuple, batch: int) -> tuple:
    import torch
    return tuple(t.repeat(-(-batch // t.shape[0]), *([1] * (t.dim() - 1)))[:batch]
                 if isinstance(t, torch.Tensor) and t.dim() else t for t in args)


def build(model: str, suite: str, batch: int, device: str, d: Path, aoti: bool = True) -> dict:
    """Export ``model`` with a dynamic batch; write its inputs, its ember package (for ``device``) and, with
    ``aoti``, its AOTInductor package."""
    import torch

    import ember
    from ember.bench.runner import zoo_case
    dev = torch.device(device)
    _, m, inputs = zoo_case(model, suite, dev, "infer")
    args, kwargs = _with_batch(inputs.args, batch), dict(inputs.kwargs)
    torch.save((args, kwargs), d / f"{model}.inputs.pt")
    dyn = tuple({0: ember.Dim("batch", max=1024)} if isinstance(t, torch.Tensor) and t.dim() else None
                for t in args)
    ep = ember.export(m, args, kwargs or None, dynamic_shapes=dyn if not kwargs else None)
    ember.aot_compile(ep, d / f"{model}.ember-pkg", device=device)
    from ember.deploy.serialize import spec_modules
    out = {"inputs": str(d / f"{model}.inputs.pt"), "package": str(d / f"{model}.ember-pkg"),
           "modules": spec_modules(ep.out_spec)}
    if not aoti:
        return out
    try:
        from torch.export import Dim, export
        tdyn = tuple({0: Dim("batch", min=2, max=1024)} if isinstance(t, torch.Tensor) and t.dim() else None
                     for t in args)
        tep = export(m, args, kwargs or None, dynamic_shapes=tdyn if not kwargs else None)
        import torch._inductor
        out["aoti"] = torch._inductor.aoti_compile_and_package(tep, package_path=str(d / f"{model}.pt2"))
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        out["aoti_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


def cache_env(engine: str, model: str, d: Path) -> dict[str, str]:
    """The cache folders of one measurement: new ones for a cold engine, the model's and engine's own (shared
    by its runs, filled by ``prefill``) for a warm one."""
    if engine.endswith("-warm"):
        root = d / "warm" / f"{model}.{engine}"
        root.mkdir(parents=True, exist_ok=True)
    else:
        root = Path(tempfile.mkdtemp(dir=d))
    return {"EMBER_CACHE_DIR": str(root / "ember"), "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
            "TRITON_CACHE_DIR": str(root / "triton")}


def measure(engine: str, model: str, a: argparse.Namespace, built: dict, d: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(cache_env(engine, model, d))
    path = built["package"] if engine == "package" else built.get("aoti", "")
    arg = json.dumps({"engine": engine, "model": model, "suite": a.suite, "device": a.device,
                      "inputs": built["inputs"], "path": path, "modules": built.get("modules", [])})
    out = subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"rc {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(engine: str, model: str, a: argparse.Namespace, built: dict, d: Path) -> dict:
    """One engine's line: median and minimum of ``--runs`` fresh processes (a warm engine's cache filled by
    one more, untimed, first)."""
    if engine.endswith("-warm"):
        first = measure(engine, model, a, built, d)
        if "error" in first:
            return {"model": model, "engine": engine, "device": a.device, "runs": 0, "error": first["error"]}
    runs = [measure(engine, model, a, built, d) for _ in range(a.runs)]
    ok = [r for r in runs if "error" not in r]
    out = {"model": model, "engine": engine, "device": a.device, "runs": len(ok)}
    if ok:
        out["first_output_s_median"] = round(statistics.median(r["first_output_s"] for r in ok), 3)
        out["first_output_s_min"] = round(min(r["first_output_s"] for r in ok), 3)
        out["import_torch_s_median"] = round(statistics.median(r["import_torch_s"] for r in ok), 3)
        out["stats"] = ok[-1].get("stats")
    if len(ok) < len(runs):
        out["error"] = next(r["error"] for r in runs if "error" in r)
    return out


def steady(model: str, a: argparse.Namespace, d: Path, calls: int = 50) -> dict:
    """Per-call time of the package and of ``ember.compile`` on the same inputs, in this process, interleaved
    (median of ``calls`` rounds after warm-up)."""
    import time

    import torch

    import ember
    from ember.bench.runner import zoo_case
    built = build(model, a.suite, a.batch, a.device, d, aoti=False) if not (d / f"{model}.ember-pkg").exists() else \
        {"inputs": str(d / f"{model}.inputs.pt"), "package": str(d / f"{model}.ember-pkg")}
    args, kwargs = torch.load(built["inputs"], map_location=a.device)
    _, m, _ = zoo_case(model, a.suite, torch.device(a.device), "infer")
    runs = {"package": ember.load_package(built["package"]), "ember": ember.compile(m, dynamic=True)}
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {k: [] for k in runs}
    with torch.no_grad():
        for fn in runs.values():
            for _ in range(3):
                fn(*args, **kwargs)
        for _ in range(calls):
            for k, fn in runs.items():
                sync()
                t = time.perf_counter()
                fn(*args, **kwargs)
                sync()
                times[k].append(time.perf_counter() - t)
    return {"model": model, "device": a.device, "threads": torch.get_num_threads(),
            **{f"{k}_ms_median": round(1e3 * statistics.median(v), 3) for k, v in times.items()},
            **{f"{k}_ms_min": round(1e3 * min(v), 3) for k, v in times.items()}}


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    check_device(a.device)
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for model in a.models:
            if a.steady:
                print(json.dumps(steady(model, a, d)), flush=True)
                continue
            built = build(model, a.suite, a.batch, a.device, d, aoti="aoti" in a.engines)
            for engine in a.engines:
                if engine == "aoti" and "aoti" not in built:
                    print(json.dumps({"model": model, "engine": engine, "device": a.device,
                                      "error": built.get("aoti_error")}), flush=True)
                    continue
                print(json.dumps(row(engine, model, a, built, d)), flush=True)


if __name__ == "__main__":
    main()
