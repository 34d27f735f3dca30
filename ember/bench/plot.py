"""The speedup chart: one group per case (model, task, dtype), one horizontal bar per compiling engine side by
side (torch.compile and ember next to each other), on a log2 axis from the 1x line (eager) to the engine's
speedup over eager. Wrong results are marked WRONG, engines that did not run say why.

Drawn with matplotlib, an optional dependency (``pip install -e ".[bench]"``). Without it the same chart is
written as plain text (``speedup.txt``), so a bench run never fails for want of a plotting library."""
from __future__ import annotations

import math
from pathlib import Path

from .runner import Result

FIXED = {"inductor": "#1f77b4", "ember": "#d62728"}
PALETTE = ["#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#ff7f0e"]
SHORT_DTYPE = {"float32": "fp32", "bf16": "bf16"}
TEXT_WIDTH = 40           # characters of the longest bar in the text chart


def engine_colors(engines: list[str]) -> dict[str, str]:
    """torch.compile (inductor) blue and ember red wherever they appear; other engines from the palette."""
    colors, free = {}, iter(c for c in PALETTE if c not in FIXED.values())
    for e in engines:
        colors[e] = FIXED.get(e) or next(free, "#3c3c3c")
    return colors


def cases(rows: list[Result]) -> list[tuple[str, list[Result]]]:
    """(label, the compiling engines' rows) per case, in the order the rows came; eager is the 1x line."""
    groups: dict[tuple[str, str, str], list[Result]] = {}
    for r in rows:
        if r.engine != "eager":
            groups.setdefault((r.model, r.task, r.dtype), []).append(r)
    return [(f"{m} {t} {SHORT_DTYPE.get(d, d)}", rs) for (m, t, d), rs in groups.items()]


def axis_range(rows: list[Result]) -> tuple[float, float]:
    """Powers of two around every speedup, at least 0.5x to 2x."""
    vals = [r.speedup for r in rows if r.speedup and r.engine != "eager"] or [1.0]
    lo = min(0.5, 2 ** math.floor(math.log2(min(vals))))
    hi = max(2.0, 2 ** math.ceil(math.log2(max(vals))))
    return lo, hi


def bar_label(r: Result) -> str:
    if r.speedup is None:
        return "failed" if r.status == "failed" else r.status
    return ("WRONG " if r.status == "incorrect" else "") + f"{r.speedup:.2f}x"


def plot_speedups(rows: list[Result], path: str | Path, title: str, subtitle: str) -> Path:
    """Write the chart to ``path`` (PNG) with matplotlib, or to ``path`` with suffix ``.txt`` without it.
    Returns the file written."""
    path = Path(path)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        out = path.with_suffix(".txt")
        out.write_text(text_chart(rows, title, subtitle))
        return out
    fig = _figure(plt, rows, title, subtitle)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _figure(plt, rows: list[Result], title: str, subtitle: str):
    groups = cases(rows)
    engines = list(dict.fromkeys(r.engine for _, rs in groups for r in rs))
    colors = engine_colors(engines)
    lo, hi = axis_range(rows)
    n_bars = sum(len(rs) for _, rs in groups)
    fig, ax = plt.subplots(figsize=(9, 1.9 + 0.28 * n_bars + 0.15 * len(groups)), layout="constrained")
    y, ticks, labels, drawn = 0.0, [], [], set()
    for label, rs in groups:
        start = y
        for r in rs:
            _bar(ax, r, y, colors[r.engine], lo, drawn)
            y += 1
        ticks.append((start + y - 1) / 2)
        labels.append(label)
        y += 0.6                                           # a gap between cases
    ax.set_xscale("log", base=2)
    ax.set_xlim(lo, hi * 1.6)                              # room for the value labels
    ax.axvline(1.0, color="black", linewidth=1)
    ax.grid(axis="x", color="#e1e1e1")
    ax.set_yticks(ticks, labels)
    ax.set_ylim(max(y - 1.0, 0.5), -0.7)                 # top to bottom, room for a 'failed' label
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.set_xlabel("speedup over eager (log scale; right of the black line: faster than eager)")
    ax.set_title(f"{title}\n{subtitle}", fontsize=9)
    if drawn:           # outside the axes, so it never covers a bar
        fig.legend(loc="outside lower center", ncol=len(drawn), fontsize=8, frameon=False)
    return fig


def _bar(ax, r: Result, y: float, color: str, lo: float, drawn: set) -> None:
    label = bar_label(r)
    if r.speedup is None:
        ax.text(1.0, y, "  " + label, va="center", color="#c81e1e", fontsize=8)
        return
    left, width = min(1.0, r.speedup), abs(r.speedup - 1.0) or 0.01
    wrong = r.status == "incorrect"
    ax.barh(y, width, left=left, height=0.8, color=color, edgecolor="#c81e1e" if wrong else color,
            linewidth=2 if wrong else 0, label=None if r.engine in drawn else r.engine)
    drawn.add(r.engine)
    ax.text(max(1.0, r.speedup) * 1.03, y, label, va="center", fontsize=8,
            color="#c81e1e" if wrong else "black")


def text_chart(rows: list[Result], title: str, subtitle: str) -> str:
    """The chart in plain text: a bar of '#' per engine, its length proportional to log2(speedup) from the
    axis' low end, with the 1x position marked '|'."""
    groups = cases(rows)
    lo, hi = axis_range(rows)
    span = math.log2(hi) - math.log2(lo)

    def col(v: float) -> int:
        return round((math.log2(v) - math.log2(lo)) / span * TEXT_WIDTH)
    width = max([len(label) for label, _ in groups] + [len(r.engine) for _, rs in groups for r in rs] + [4])
    lines = [title, subtitle, "(matplotlib is not installed: pip install 'ember[bench]' for speedup.png)",
             " " * (width + 3) + f"{lo:g}x".ljust(col(1.0)) + "|1x", ""]
    for label, rs in groups:
        lines.append(label)
        for r in rs:
            n = 0 if r.speedup is None else col(min(max(r.speedup, lo), hi))
            chars = ["#" if i < n else " " for i in range(TEXT_WIDTH + 1)]
            chars[col(1.0)] = "|"
            lines.append(f"  {r.engine:{width}} {''.join(chars).rstrip()} {bar_label(r)}")
    return "\n".join(lines) + "\n"
