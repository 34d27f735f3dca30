"""``python -m tools.fuzz --seed S --count N --backends ember,eager [--jobs J] [--out DIR] [--minimize]``

Generates N programs from seeds S..S+N-1, compares each backend with eager, prints a summary table and writes
every failure (minimized with ``--minimize``) as a standalone reproducer into DIR."""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time

from .driver import Campaign, Config


def summarize(done: dict, backends) -> dict:
    """Counts per backend and failure class, with the seeds of each class (smallest reproducer first)."""
    table = {b: collections.Counter() for b in backends}
    classes: dict = collections.defaultdict(list)
    for seed, res in sorted(done.items()):
        failed = {str(f[0]) for f in res["failures"]}
        for b in backends:
            if b not in failed and "?" not in failed and "harness" not in failed:
                table[b]["passed"] += 1
        for backend, f, text, lines in res["failures"]:
            table.setdefault(backend, collections.Counter())[f.kind] += 1
            classes[(backend, f.kind, f.aspect)].append((lines, seed, f.detail, text))
    for v in classes.values():
        v.sort(key=lambda x: (x[0], x[1]))
    return {"table": table, "classes": classes}


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", s).strip("_")[:60]


def write_reproducer(out: str, backend, kind: str, aspect: str, seed: int, text: str) -> str:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{kind}_{_slug(aspect)}_{_slug(str(backend))}_seed{seed}.py")
    with open(path, "w") as f:
        f.write(text)
    return path


def write_reproducers(classes: dict, out: str) -> list[str]:
    return [write_reproducer(out, backend, kind, aspect, seed, text)
            for (backend, kind, aspect), items in sorted(classes.items())
            for _lines, seed, _detail, text in items if text]


def format_summary(n: int, summary: dict, soft: int, elapsed: float, raised: int = 0, ill: int = 0) -> str:
    lines = [f"programs: {n}   raised in eager (compared by exception type): {raised}   "
             f"stride differences (soft, not failures): {soft}   ill-conditioned (soft: eager moves as much "
             f"under a 2-ulp input change): {ill}   time: {elapsed:.0f}s"]
    for b, c in summary["table"].items():
        rest = "  ".join(f"{k}={v}" for k, v in sorted(c.items()) if k != "passed")
        lines.append(f"  {b:>10}: passed={c['passed']}  {rest}")
    if summary["classes"]:
        lines.append("failure classes (backend, kind, aspect): count, smallest seed, detail")
    for (b, kind, aspect), items in sorted(summary["classes"].items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {b} {kind} [{aspect}]: {len(items)}, seed {items[0][1]}: {items[0][2][:120]}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--backends", default="ember,eager")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--minimize", action="store_true")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per backend run of one program")
    ap.add_argument("--minimize-seconds", type=float, default=300.0)
    ap.add_argument("--max-minimized", type=int, default=50)
    ap.add_argument("--minimize-per-class", type=int, default=2)
    ap.add_argument("-v", "--verbose", action="store_true", help="print each failure as it is found")
    a = ap.parse_args(argv)
    backends = tuple(b for b in a.backends.split(",") if b)
    cfg = Config(a.seed, a.count, backends, a.jobs, a.out, a.minimize, a.timeout, a.minimize_seconds,
                 a.max_minimized, a.minimize_per_class)

    t_start = time.monotonic()

    def progress(k, res):       # reproducers are written as they come, so a cut-short campaign keeps them
        if a.verbose and k % 25 == 0:
            print(f"[{k}/{a.count}] {time.monotonic() - t_start:.0f}s", flush=True)
        for b, f, text, _l in res["failures"]:
            if a.out and text:
                write_reproducer(a.out, b, f.kind, f.aspect, res["seed"], text)
            if a.verbose:
                print(f"[{k}/{a.count}] seed {res['seed']} {b}: {f.kind} [{f.aspect}] {f.detail[:150]}",
                      flush=True)
    t0 = time.monotonic()
    done = Campaign(cfg, progress).run()
    summary = summarize(done, backends)
    soft = sum(1 for r in done.values() if r.get("soft"))
    raised = sum(1 for r in done.values() if r.get("eager_raised"))
    ill = sum(1 for r in done.values() if r.get("ill"))
    print(format_summary(len(done), summary, soft, time.monotonic() - t0, raised, ill))
    if a.out:
        paths = [p for v in summary["classes"].values() for p in v if p[3]]
        os.makedirs(a.out, exist_ok=True)           # a clean run wrote no reproducer there
        with open(os.path.join(a.out, "summary.json"), "w") as f:
            json.dump({f"{b}|{k}|{asp}": [[s, d] for _l, s, d, _t in v]
                       for (b, k, asp), v in summary["classes"].items()}, f, indent=1)
        print(f"{len(paths)} reproducers in {a.out}")
    return 1 if summary["classes"] else 0


if __name__ == "__main__":
    sys.exit(main())
