"""Results out: the table printed at the end, CSV, JSON (and JSON lines written as the run goes), and the
environment the numbers came from."""
from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from .runner import Result

FIELDS = [f.name for f in dataclasses.fields(Result)]
STATUS_SHOWN = {"ok": "ok", "incorrect": "WRONG", "failed": "FAILED", "skipped": "skipped"}


def environment(device: str, argv: list[str], extra: dict | None = None) -> dict[str, Any]:
    import torch
    env: dict[str, Any] = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "device": device,
        "argv": argv,
    }
    try:
        import ember
        env["ember"] = ember.__version__
    except Exception:  # noqa: BLE001 - the report still says what it can
        env["ember"] = None
    if device == "cuda" and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
        env["matmul_tf32"] = torch.backends.cuda.matmul.allow_tf32
        env["cudnn_tf32"] = torch.backends.cudnn.allow_tf32
    try:
        import triton
        env["triton"] = triton.__version__
    except Exception:  # noqa: BLE001 - triton may be absent or broken
        env["triton"] = None
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------------------------- files
class JsonlSink:
    """Appends each row as one JSON line as soon as its case finishes, so a killed run keeps its results."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def __call__(self, rows: list[Result]) -> None:
        with self.path.open("a") as f:
            for r in rows:
                f.write(json.dumps(dataclasses.asdict(r)) + "\n")


def read_jsonl(path: Path) -> list[Result]:
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            rows.append(Result(**{k: v for k, v in d.items() if k in FIELDS}))
    return rows


def write_csv(rows: list[Result], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(dataclasses.asdict(r))


def write_json(rows: list[Result], env: dict, skipped: list[str], path: Path) -> None:
    doc = {"environment": env, "skipped_models": skipped, "results": [dataclasses.asdict(r) for r in rows]}
    path.write_text(json.dumps(doc, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------- table
def _num(x: float | None, fmt: str, na: str = "-") -> str:
    return na if x is None else format(x, fmt)


def _cells(r: Result) -> list[str]:
    graphs = "-" if r.graphs is None else f"{r.graphs}/{r.graph_breaks}"
    warm = _num(r.warm_compile_s, ".2f", "N/A" if r.compile_s is not None else "-")
    return [r.model, r.task, r.dtype, r.engine, STATUS_SHOWN.get(r.status, r.status),
            _num(r.time_ms, ".3f"), _pct(r.spread),
            _num(r.speedup, ".2f") + ("x" if r.speedup is not None else ""),
            _num(r.compile_s, ".2f"), warm, _num(r.peak_mem_mb, ".1f"), _num(r.held_mem_mb, ".0f"), graphs,
            _num(r.max_err, ".1e")]


HEADERS = ["model", "task", "dtype", "engine", "status", "ms/call", "iqr", "speedup", "compile s", "warm s",
           "peak MB", "held MB", "graphs/breaks", "max err"]
_RIGHT = set(range(5, len(HEADERS)))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def format_table(rows: list[Result]) -> str:
    cells = [_cells(r) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(HEADERS)]

    def line(vals):
        return "  ".join(v.rjust(w) if i in _RIGHT else v.ljust(w)
                         for i, (v, w) in enumerate(zip(vals, widths)))
    out = [line(HEADERS), line(["-" * w for w in widths])]
    prev = None
    for r, c in zip(rows, cells):
        key = (r.model, r.task, r.dtype)
        if prev is not None and key != prev:
            out.append("")
        prev = key
        out.append(line(c).rstrip())
    return "\n".join(out)


def format_problems(rows: list[Result]) -> str:
    """One line per distinct failure, wrong result or note (graph breaks, eager fallbacks), with its cases."""
    seen: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        what = []
        if r.status in ("failed", "incorrect") and r.error:
            what.append(f"{STATUS_SHOWN[r.status]}: {r.error}")
        if r.notes:
            what.append(r.notes)
        for w in what:
            seen.setdefault((r.engine, w), []).append(f"{r.model}/{r.task}/{r.dtype}")
    return "\n".join(f"  {eng}: {what}  [{', '.join(where)}]" for (eng, what), where in seen.items())


def summary(rows: list[Result]) -> str:
    """Geometric-mean speedup per engine over the cases where it ran correctly."""
    import math
    by_engine: dict[str, list[float]] = {}
    for r in rows:
        if r.engine != "eager" and r.status == "ok" and r.speedup:
            by_engine.setdefault(r.engine, []).append(r.speedup)
    parts = [f"{e}: {math.exp(sum(map(math.log, v)) / len(v)):.2f}x over {len(v)} case(s)"
             for e, v in by_engine.items()]
    return "geomean speedup over eager (correct cases): " + ("; ".join(parts) if parts else "none")


def print_report(rows: list[Result], skipped: list[str], out_dir: Path, wall_s: float,
                 file=None, chart: str = "speedup.png") -> None:
    file = file or sys.stdout       # looked up per call: a default bound at import would miss a redirect
    print(format_table(rows), file=file)
    problems = format_problems(rows)
    if problems:
        print("\nnotes and problems:\n" + problems, file=file)
    for s in skipped:
        print(s, file=file)
    print("\n" + summary(rows), file=file)
    print("status: ok = matches eager within tol (fp64 decides when in doubt); WRONG = ran, did not match\n"
          "iqr: interquartile range of the timed calls / median (large: a noisy machine, compare with care)\n"
          "compile s: first call (capture + compile + one run); warm s: the same after a reset, with "
          "the disk cache (N/A: the engine has none)\n"
          "peak MB: device memory one call allocates above what was in use before it; held MB (CUDA): memory "
          "the engine keeps between calls (its model copy, static buffers, CUDA graph pools)", file=file)
    print(f"wrote {out_dir}/results.csv, results.json, {chart}  ({wall_s:.0f} s)", file=file)
