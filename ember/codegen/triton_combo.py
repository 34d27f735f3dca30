"""Triton source of a combo kernel (``ember.loopir.combo``): consecutive independent pointwise kernels in one
launch.

Each part is generated as its kernel alone would be, as a ``@triton.jit`` function taking its program id
``pid``; parts with the same text (the same update on parameters of one shape) share one function. The kernel
gives each part the program ids its own grid would have had, in order::

    @triton.jit
    def ember_combo0_kernel0(p0, p1, p2, p3, p4, p5):
        pid = tl.program_id(0)
        if pid < 4:
            part0(p0, p1, p2, pid)           # kernel0: buf0=add+mul
        elif pid < 68:
            part1(p3, p4, p5, pid - 4)       # kernel1: buf1=add+mul

so the parts run side by side, each on as many programs as alone. The launch takes the largest of the parts'
``num_warps``. Over symbolic sizes (``triton_sym``) the kernel takes the union of its parts' size symbols after
the pointers, each part its own, and the program ranges (``pid < ...``) and the grid are expressions over them.
"""
from __future__ import annotations

from ember.loopir.combo import ComboBody

from typing import Any

import sympy

from ember.shapes import to_python

from . import triton_sym
from .triton_gen import (_PLACEHOLDER, _SHARED, HEADER, LaunchConfig, _Gen, _sizes, _symbolic, body_symbols, canonical,
                         launch_config)

NOINLINE_SHARED = True      # a part function called by several parts is compiled once, not inlined into each


def generate_combo(body: ComboBody, table: Any = None) -> tuple[str, str, LaunchConfig]:
    """(module source, kernel function name, launch configuration) of a combo kernel (``table``: the graph's
    ``SymbolTable`` where a part has symbolic sizes)."""
    fns: dict[str, str] = {}          # a part function's text -> its name
    uses: dict[str, int] = {}
    position = {b: i for i, b in enumerate(body.buffers)}
    calls: list[str] = []
    start: Any = 0
    warps, int64 = 1, False
    syms: set = set()
    for part in body.parts:
        cfg = _symbolic(launch_config(*_sizes(part, True, table)), part, table)
        assert cfg.grid[1:] == (1, 1) and not part.kernel.is_reduction, part.name
        text = canonical(_Gen(part, cfg, _PLACEHOLDER, part=True, table=table).generate(), list(part.buffers))
        fn_text = text[text.index("@triton.jit"):]
        fname = fns.setdefault(fn_text, f"part{len(fns)}")
        uses[fname] = uses.get(fname, 0) + 1
        syms.update(body_symbols(part))
        pid = "pid" if start == 0 else f"pid - {_src(start)}"
        args = ", ".join([f"p{position[b]}" for b in part.buffers] + list(cfg.symbols) + [pid])
        end = start + (cfg.grid_expr if cfg.symbols else cfg.grid[0])
        test = "if" if start == 0 else "elif"
        calls.append(f"    {test} pid < {_src(end)}:")
        calls.append(f"        {fname}({args})  # {part.kernel.name}: {part.kernel.fused()}")
        start, warps, int64 = end, max(warps, cfg.num_warps), int64 or cfg.int64
    k = body.kernel
    names = tuple(s.name for s in triton_sym.kernel_symbols(syms))
    params = ", ".join([f"p{i}" for i in range(len(body.buffers))] + list(names))
    parts_src = "".join(_noinline(t, uses[n] > 1).replace(_PLACEHOLDER, n) + "\n\n" for t, n in fns.items())
    kernel = "\n".join(["@triton.jit", f"def {_PLACEHOLDER}({params}):", "    pid = tl.program_id(0)"] + calls)
    text = parts_src + kernel + "\n"
    fname = _SHARED.setdefault(text, f"ember_{k.name}")
    head = (f"# ember triton combo kernel {k.name}: {len(body.parts)} parts, grid={start} num_warps={warps}\n"
            f"# parameters: {', '.join(f'p{i}={b}' for i, b in enumerate(body.buffers))}\n")
    if names:
        cfg = LaunchConfig((triton_sym.hint(table, start), 1, 1), 1, 1, warps, True, int64, symbols=names,
                           grid_expr=start)
    else:
        cfg = LaunchConfig((start, 1, 1), 1, 1, warps, True, int64)
    return HEADER + head + text.replace(_PLACEHOLDER, fname), fname, cfg


def _src(n: Any) -> str:
    """A program count: an int, or a sympy expression over the size symbols printed as Python (Triton)."""
    return to_python(n) if isinstance(n, sympy.Basic) else str(n)


def _noinline(fn_text: str, shared: bool) -> str:
    if not (NOINLINE_SHARED and shared):
        return fn_text
    return fn_text.replace("@triton.jit\n", "@triton.jit(noinline=True)\n", 1)


__all__ = ["generate_combo"]
