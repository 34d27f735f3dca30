"""``python -m ember.bench``: ember against eager and torch.compile on a model zoo, side by side in one
process.

    python -m ember.bench --suite quick                 # tiny models on the CPU, under 3 minutes on 2 cores
    python -m ember.bench --suite full --device cuda    # realistic sizes on a GPU
    python -m ember.bench --models nanogpt,gpt2 --engines eager,inductor,ember:eager --mode max-autotune
    python -m ember.bench --list                        # the zoo and which models can run here
    python -m ember.bench --merge DIR1 DIR2 --out DIR   # one report from several runs (GPU shards)

Writes results.csv, results.json, results.jsonl and speedup.png (speedup.txt without matplotlib) under --out
(default bench-out/<timestamp>/).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

SUITE_DEFAULTS = {
    # quick: tiny models, fp32, sized so that a 2-core CPU finishes in under 3 minutes with cold compiles
    "quick": {"dtypes": "float32", "tasks": "infer,train", "warmup": 2, "min_reps": 5, "max_reps": 30,
              "timing_budget_s": 0.6, "budget_s": 170.0},
    # full: realistic sizes for a GPU; every case is dominated by torch.compile's cold compile
    "full": {"dtypes": "float32,bf16", "tasks": "infer,train", "warmup": 3, "min_reps": 10, "max_reps": 100,
             "timing_budget_s": 2.5, "budget_s": 0.0},
}
DTYPE_ALIASES = {"float32": "float32", "fp32": "float32", "bf16": "bf16", "bfloat16": "bf16"}
TASK_ALIASES = {"infer": "infer", "inference": "infer", "train": "train", "training": "train"}


def _csv(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ember.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", choices=tuple(SUITE_DEFAULTS), default="quick")
    p.add_argument("--models", help="comma list of models, families (handwritten, transformers, vision) "
                   "or all")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda for --suite full "
                   "when available, else cpu")
    p.add_argument("--engines", default="eager,inductor,ember",
                   help="comma list of FRONTEND[:BACKEND][@MODE]; eager always runs (the reference)")
    p.add_argument("--mode", default="", help="comma list of modes: each adds every compiling engine in "
                   "that mode")
    p.add_argument("--dtypes", help="comma list of float32, bf16 (bf16 = bfloat16 autocast)")
    p.add_argument("--tasks", help="comma list of infer, train (train = forward + loss + backward, "
                   "grads only)")
    p.add_argument("--out", type=Path, help="results directory (default bench-out/<timestamp>)")
    p.add_argument("--threads", type=int, default=2, help="torch threads on the CPU (default 2)")
    p.add_argument("--budget-s", type=float, help="skip the cases that would end past this many seconds "
                   "(quick: 170, full: none; 0 = none)")
    p.add_argument("--warmup", type=int, help="warm-up calls after the compiling one")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, help="batch size for every model (default: each model's own)")
    p.add_argument("--keep-cache", action="store_true", help="use the compilers' usual disk caches (faster "
                   "reruns, but cold compile times are then not cold); default: fresh empty caches for this run")
    p.add_argument("--list", action="store_true", help="list the zoo and the engines, then exit")
    p.add_argument("--merge", nargs="+", type=Path, metavar="DIR", help="merge the results of earlier runs")
    return p


def _names(text: str | None, aliases: dict[str, str], what: str, parser) -> list[str]:
    out = []
    for t in _csv(text):
        if t not in aliases:
            parser.error(f"unknown {what} {t!r}; valid: {', '.join(sorted(set(aliases.values())))}")
        out.append(aliases[t])
    return list(dict.fromkeys(out))


def validate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Fill suite defaults and check every list argument; errors exit with a message naming the bad value."""
    from .engines import parse_engines
    from .zoo import expand_names
    d = SUITE_DEFAULTS[args.suite]
    args.dtypes = _names(args.dtypes or d["dtypes"], DTYPE_ALIASES, "dtype", parser)
    args.tasks = _names(args.tasks or d["tasks"], TASK_ALIASES, "task", parser)
    if not args.dtypes or not args.tasks:
        parser.error("--dtypes and --tasks need at least one value")
    try:
        args.model_names = expand_names(_csv(args.models), args.suite)
        args.engine_list = parse_engines(_csv(args.engines), _csv(args.mode))
    except ValueError as e:
        parser.error(str(e))
    if args.threads < 1 or (args.warmup is not None and args.warmup < 1):
        parser.error("--threads and --warmup must be at least 1")
    args.warmup = args.warmup or d["warmup"]
    args.budget_s = d["budget_s"] if args.budget_s is None else args.budget_s
    import torch
    if args.device is None:
        args.device = "cuda" if args.suite == "full" and torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    args.out = args.out or Path("bench-out") / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return args


def list_zoo() -> None:
    from .engines import DEFAULT_ENGINES, MODES
    from .zoo import all_entries, probe
    for e in all_entries():
        missing = [p for p in e.requires if probe(p)]
        state = "needs " + " or ".join(e.requires) if e.requires and len(missing) == len(e.requires) else "ok"
        print(f"{e.name:14s} {e.family:13s} {state}")
    print(f"\nengines: FRONTEND[:BACKEND][@MODE], e.g. {', '.join(DEFAULT_ENGINES)}, torch:eager, "
          f"ember:inductor; "
          f"modes: {', '.join(MODES)}")


def _title(args, env: dict) -> tuple[str, str]:
    where = env.get("gpu") or f"CPU, {env['torch_threads']} threads"
    triton = f"; triton {env['triton']}" if env.get("triton") else ""
    return (f"ember bench ({env.get('suite', args.suite)} suite): speedup over eager",
            f"{where}; torch {env['torch']}{triton}; ember {env.get('ember')}; {env['date']}")


def write_outputs(rows, env: dict, skipped: list[str], out: Path, title: tuple[str, str]) -> Path:
    """CSV, JSON and the chart; returns the chart's file (speedup.png, or speedup.txt without matplotlib)."""
    from .plot import plot_speedups
    from .report import write_csv, write_json
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "results.csv")
    write_json(rows, env, skipped, out / "results.json")
    return plot_speedups(rows, out / "speedup.png", *title)


@contextlib.contextmanager
def fresh_compile_caches(keep: bool):
    """Point Inductor's, Triton's and ember's disk caches at a new empty folder for this run (removed after it), so a
    cold compile is cold and a warm compile hits only what this run wrote."""
    if keep:
        yield "the compilers' usual disk caches (cold compile times may be warm)"
        return
    saved = {k: os.environ.get(k) for k in _CACHE_VARS}
    tmp = tempfile.mkdtemp(prefix="ember-bench-cache-")
    os.environ.update({"TORCHINDUCTOR_CACHE_DIR": tmp, "TRITON_CACHE_DIR": os.path.join(tmp, "triton"),
                       "EMBER_CACHE_DIR": os.path.join(tmp, "ember")})
    try:
        yield f"fresh, empty for this run ({tmp}, removed after it)"
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)


_CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "EMBER_CACHE_DIR")


def run(args: argparse.Namespace) -> int:
    import torch

    from .progress import Progress
    from .report import JsonlSink, environment, print_report, read_jsonl, write_json
    from .runner import RunSettings, plan, run_all
    from .zoo import select_models
    t0 = time.perf_counter()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    entries, skipped = select_models(args.suite, args.model_names)
    if args.batch:
        if args.batch < 1:
            raise SystemExit("--batch must be at least 1")
        for e in entries:
            e.configs[args.suite]["batch"] = args.batch
    for line in skipped:
        print(line, file=sys.stderr)
    d = SUITE_DEFAULTS[args.suite]
    settings = RunSettings(args.suite, torch.device(args.device), args.engine_list, warmup=args.warmup,
                           min_reps=d["min_reps"], max_reps=d["max_reps"],
                           timing_budget_s=d["timing_budget_s"],
                           seed=args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    progress, sink = Progress(), JsonlSink(args.out / "results.jsonl")
    with fresh_compile_caches(args.keep_cache) as caches:
        env = environment(args.device, sys.argv, {"suite": args.suite, "compile_caches": caches,
                                                  "batch": args.batch or "model default"})
        write_json([], env, skipped, args.out / "results.json")  # the environment, for --merge of a killed run
        try:
            cases = plan(entries, args.tasks, args.dtypes)
            rows = run_all(cases, settings, progress, sink, budget_s=args.budget_s)
        except KeyboardInterrupt:
            print("\ninterrupted: reporting the cases that finished", file=sys.stderr)
            rows = read_jsonl(sink.path)
    progress.close()
    env["wall_s"] = round(time.perf_counter() - t0, 1)
    chart = write_outputs(rows, env, skipped, args.out, _title(args, env))
    print_report(rows, skipped, args.out, time.perf_counter() - t0, chart=chart.name)
    return 0


def merge(args: argparse.Namespace) -> int:
    """One report from the results.jsonl of several runs (e.g. one per GPU), written to --out."""
    import json

    from .report import print_report, read_jsonl
    rows, skipped, env = [], [], {}
    for d in args.merge:
        rows += read_jsonl(d / "results.jsonl")
        meta = d / "results.json"
        if meta.exists():
            doc = json.loads(meta.read_text())
            env = env or doc["environment"]
            skipped += [s for s in doc.get("skipped_models", []) if s not in skipped]
    env = dict(env, merged_from=[str(d) for d in args.merge])
    env.setdefault("torch_threads", "?"), env.setdefault("torch", "?"), env.setdefault("date", "?")
    chart = write_outputs(rows, env, skipped, args.out, _title(args, env))
    print_report(rows, skipped, args.out, 0.0, chart=chart.name)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        list_zoo()
        return 0
    args = validate(args, parser)
    return merge(args) if args.merge else run(args)
