"""The speedup chart: one group of horizontal bars per case (model, task, dtype), one bar per compiling
engine, drawn on a log2 axis from the 1x line (eager) to the engine's speedup over eager. Wrong results are
marked WRONG, failed engines 'failed'."""
from __future__ import annotations

import math
from pathlib import Path

from .png import BLACK, Canvas, text_height, text_width
from .runner import Result

PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (148, 103, 189), (140, 86, 75), (227, 119, 194),
           (127, 127, 127), (188, 189, 34), (23, 190, 207)]
FIXED = {"inductor": (31, 119, 180), "ember": (214, 39, 40)}
GRID, AXIS, RED = (225, 225, 225), (90, 90, 90), (200, 30, 30)
S = 2                     # font scale
BAR_H, BAR_GAP, GROUP_GAP = 14, 3, 14
PLOT_W, MARGIN = 560, 16
SHORT_DTYPE = {"float32": "fp32", "bf16": "bf16"}


def engine_colors(engines: list[str]) -> dict[str, tuple[int, int, int]]:
    colors, free = {}, iter(p for p in PALETTE if p not in FIXED.values())
    for e in engines:
        colors[e] = FIXED.get(e) or next(free, (60, 60, 60))
    return colors


def _cases(rows: list[Result]) -> list[tuple[str, list[Result]]]:
    groups: dict[tuple[str, str, str], list[Result]] = {}
    for r in rows:
        if r.engine != "eager":
            groups.setdefault((r.model, r.task, r.dtype), []).append(r)
    return [(f"{m} {t} {SHORT_DTYPE.get(d, d)}", rs) for (m, t, d), rs in groups.items()]


def _axis_range(rows: list[Result]) -> tuple[float, float]:
    vals = [r.speedup for r in rows if r.speedup and r.engine != "eager"] or [1.0]
    lo = min(0.5, 2 ** math.floor(math.log2(min(vals))))
    hi = max(2.0, 2 ** math.ceil(math.log2(max(vals))))
    return math.log2(lo), math.log2(hi)


class SpeedupChart:
    def __init__(self, rows: list[Result], title: str, subtitle: str):
        self.cases = _cases(rows)
        self.engines = list(dict.fromkeys(r.engine for _, rs in self.cases for r in rs))
        self.colors = engine_colors(self.engines)
        self.lo, self.hi = _axis_range(rows)
        self.title, self.subtitle = title, subtitle
        labels = [label for label, _ in self.cases] or [""]
        self.x0 = MARGIN + max(text_width(s, S) for s in labels) + 12
        self.top = MARGIN + 3 * (text_height(S) + 8) + 8
        n_bars = sum(len(rs) for _, rs in self.cases)
        body = n_bars * (BAR_H + BAR_GAP) + len(self.cases) * GROUP_GAP
        value_room = text_width("WRONG 10.00x", S)
        width = max(self.x0 + PLOT_W + value_room + MARGIN, text_width(title, S) + 2 * MARGIN,
                    text_width(subtitle, S) + 2 * MARGIN)
        self.canvas = Canvas(width, self.top + body + 2 * text_height(S) + 3 * MARGIN)

    def x(self, speedup: float) -> int:
        frac = (math.log2(speedup) - self.lo) / (self.hi - self.lo)
        return self.x0 + round(min(1.0, max(0.0, frac)) * PLOT_W)

    def draw(self) -> Canvas:
        c = self.canvas
        c.text(MARGIN, MARGIN, self.title, BLACK, S)
        c.text(MARGIN, MARGIN + text_height(S) + 8, self.subtitle, AXIS, S)
        self._legend(MARGIN + 2 * (text_height(S) + 8))
        bottom = self._bars()
        self._axis(bottom)
        return c

    def _legend(self, y: int) -> None:
        x = MARGIN
        for e in self.engines:
            self.canvas.rect(x, y, text_height(S), text_height(S), self.colors[e])
            x = self.canvas.text(x + text_height(S) + 6, y, e, BLACK, S) + 18
        self.canvas.text(x, y, "(bars: speedup over eager, log scale)", AXIS, S)

    def _grid(self, y0: int, y1: int) -> None:
        k = math.ceil(self.lo)
        while k <= self.hi:
            xx = self.x(2.0 ** k)
            if k == 0:
                self.canvas.vline(xx, y0, y1 - y0, BLACK)
            else:
                self.canvas.vline(xx, y0, y1 - y0, GRID)
            k += 1

    def _bars(self) -> int:
        c, y = self.canvas, self.top
        end = self.top + sum(len(rs) * (BAR_H + BAR_GAP) + GROUP_GAP for _, rs in self.cases)
        self._grid(self.top - 4, end)
        one = self.x(1.0)
        for label, rs in self.cases:
            group_h = len(rs) * (BAR_H + BAR_GAP)
            c.text(MARGIN, y + (group_h - text_height(S)) // 2, label, BLACK, S)
            for r in rs:
                self._bar(r, y, one)
                y += BAR_H + BAR_GAP
            y += GROUP_GAP
        return y

    def _bar(self, r: Result, y: int, one: int) -> None:
        c = self.canvas
        if r.speedup is None:
            what = "failed" if r.status == "failed" else r.status
            c.text(one + 6, y, what, RED, S)
            return
        xs = self.x(r.speedup)
        left, w = min(one, xs), max(1, abs(xs - one))
        c.rect(left, y, w, BAR_H, self.colors[r.engine])
        value = f"{r.speedup:.2f}x"
        if r.status == "incorrect":
            c.outline(left, y, w, BAR_H, RED)
            value = "WRONG " + value
        tx = max(one, xs) + 6
        c.text(tx, y, value, RED if r.status == "incorrect" else BLACK, S)

    def _axis(self, y: int) -> None:
        c = self.canvas
        c.hline(self.x0, y, PLOT_W + 1, AXIS)
        k = math.ceil(self.lo)
        while k <= self.hi:
            v = 2.0 ** k
            label = f"{v:g}x"
            xx = self.x(v)
            c.vline(xx, y, 6, AXIS)
            c.text(xx - text_width(label, S) // 2, y + 10, label, BLACK, S)
            k += 1
        note = "right of the black line: faster than eager"
        c.text(self.x0, y + 10 + text_height(S) + 10, note, AXIS, S)


def plot_speedups(rows: list[Result], path: str | Path, title: str, subtitle: str) -> None:
    SpeedupChart(rows, title, subtitle).draw().save(path)
