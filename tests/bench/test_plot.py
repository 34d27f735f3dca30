"""The PNG chart: valid PNG, size grows with the cases, every status drawable."""
from ember.bench.plot import plot_speedups
from ember.bench.png import Canvas, read_png_size, text_width
from ember.bench.runner import Result


def _row(model, engine, speedup, status="ok"):
    return Result(model, "handwritten", "train", "float32", engine, "cpu", status=status, speedup=speedup)


def test_chart_with_every_status(tmp_path):
    rows = [_row("a", "eager", 1.0), _row("a", "inductor", 2.5), _row("a", "ember", 0.3, "incorrect"),
            _row("b", "eager", 1.0), _row("b", "inductor", None, "failed"), _row("b", "ember", 17.0)]
    path = tmp_path / "chart.png"
    plot_speedups(rows, path, "title", "subtitle")
    w, h = read_png_size(path)
    plot_speedups(rows + [_row("c", "ember", 1.1)], tmp_path / "more.png", "title", "subtitle")
    assert read_png_size(tmp_path / "more.png")[1] > h and w >= 600


def test_empty_chart_still_writes(tmp_path):
    plot_speedups([], tmp_path / "empty.png", "t", "s")
    assert read_png_size(tmp_path / "empty.png")[0] > 0


def test_canvas_text_and_clipping():
    c = Canvas(20, 10)
    assert c.text(0, 0, "ab", scale=1) == text_width("ab", 1)
    c.rect(-5, -5, 100, 100, (1, 2, 3))  # clipped, no error
    assert c.pixels[:3] == bytes((1, 2, 3))
