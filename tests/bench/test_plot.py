"""The speedup chart: a PNG drawn with matplotlib when it is installed, plain text when it is not; every
status is drawable, the chart grows with the cases, and an empty run still writes one."""
import io
import struct
import sys

import pytest

from ember.bench import cli
from ember.bench.plot import plot_speedups, text_chart
from ember.bench.report import print_report
from ember.bench.runner import Result


def _row(model, engine, speedup, status="ok"):
    return Result(model, "handwritten", "train", "float32", engine, "cpu", status=status, speedup=speedup)


ROWS = [_row("a", "eager", 1.0), _row("a", "inductor", 2.5), _row("a", "ember", 0.3, "incorrect"),
        _row("b", "eager", 1.0), _row("b", "inductor", None, "failed"), _row("b", "ember", 17.0)]


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def no_matplotlib(monkeypatch):
    """As if matplotlib were not installed: importing it raises ImportError."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)


def test_png_with_every_status(tmp_path):
    pytest.importorskip("matplotlib")
    path = plot_speedups(ROWS, tmp_path / "chart.png", "title", "subtitle")
    assert path == tmp_path / "chart.png"
    w, h = png_size(path)
    more = plot_speedups(ROWS + [_row("c", "ember", 1.1)], tmp_path / "more.png", "title", "subtitle")
    assert png_size(more)[1] > h and w >= 600


def test_png_of_no_cases(tmp_path):
    pytest.importorskip("matplotlib")
    assert png_size(plot_speedups([], tmp_path / "empty.png", "t", "s"))[0] > 0


@pytest.mark.parametrize("rows", [ROWS, [], [_row("x", "eager", 1.0)], [_row("y", "ember", 0.01)],
                                  [_row("z", "ember", 300.0), _row("z", "torch:eager", 1.0)]])
def test_text_fallback_without_matplotlib(rows, tmp_path, no_matplotlib):
    path = plot_speedups(rows, tmp_path / "speedup.png", "title", "subtitle")
    assert path == tmp_path / "speedup.txt" and not (tmp_path / "speedup.png").exists()
    text = path.read_text()
    assert text.startswith("title\nsubtitle\n") and "pip install" in text
    for r in rows:
        if r.engine != "eager":
            assert f"{r.model} train fp32" in text and r.engine in text


def test_text_bars_grow_with_the_speedup():
    lines = text_chart(ROWS, "t", "s").splitlines()
    bar = {ln.split()[0] + ln.split()[-1]: ln.count("#") for ln in lines if ln.startswith("  ")}
    assert bar["inductor2.50x"] < bar["ember17.00x"]
    assert bar["inductorfailed"] == 0
    assert any("WRONG 0.30x" in ln for ln in lines)
    one = [ln.index("|") for ln in lines if ln.startswith("  ")]
    assert len(set(one)) == 1                                  # the 1x line is one column


def test_outputs_and_report_without_matplotlib(tmp_path, no_matplotlib):
    """The bench's outputs step: CSV and JSON as always, the chart as text, and the printed table."""
    chart = cli.write_outputs(ROWS, {"torch": "x", "date": "d"}, [], tmp_path, ("t", "s"))
    assert chart.name == "speedup.txt"
    assert (tmp_path / "results.csv").exists() and (tmp_path / "results.json").exists()
    buf = io.StringIO()
    print_report(ROWS, [], tmp_path, 1.0, file=buf, chart=chart.name)
    out = buf.getvalue()
    assert "speedup.txt" in out and "inductor" in out and "ember" in out
