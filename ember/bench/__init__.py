"""``python -m ember.bench``: one command that shows what ember does against eager and torch.compile.

A model zoo built without downloads (``zoo``), engines (``engines``), measurement (``measure``), the loop
(``runner``), and the outputs: a table, CSV/JSON (``report``) and a speedup chart (``plot``: a PNG with
matplotlib, the ``[bench]`` extra, else plain text). See ``cli`` for the command line.
"""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from .cli import main as _main
    return _main(argv)
