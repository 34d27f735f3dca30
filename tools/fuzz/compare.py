"""Compare the recorded calls of an eager run with a compiled run; classify the first difference.

Classes: ``wrong`` (values, dtype, shape, requires_grad, side effects on inputs, grads, printed text or the
``STATE`` list differ), ``crash`` (ember raised where eager did not), ``exc_mismatch`` (eager raised, ember
raised another type or nothing), ``timeout`` and ``died`` (set by the runner / driver). Strides are a soft
check: reported, never a failure.
"""
from __future__ import annotations

import dataclasses
import math
import re

import torch

RTOL, ATOL = 1e-3, 1e-4


@dataclasses.dataclass(frozen=True)
class Failure:
    kind: str         # wrong | crash | exc_mismatch | timeout | died
    aspect: str       # what differs (output / input side effect / grad / stdout / STATE) or the exc. type
    detail: str

    @property
    def key(self) -> tuple:
        return (self.kind, self.aspect)


def _exc_name(e) -> str:
    return type(e).__name__


def _first_line(e) -> str:
    s = str(e).strip().splitlines()
    return (s[0] if s else "")[:200]


def _tensor_diff(ref, got) -> str | None:
    _, a, a_rg, _ = ref
    _, b, b_rg, _ = got
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs {b.dtype}"
    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} vs {tuple(b.shape)}"
    if a_rg != b_rg:
        return f"requires_grad {a_rg} vs {b_rg}"
    if not a.is_floating_point():
        return None if torch.equal(a, b) else "values differ (exact dtype)"
    finite = a[torch.isfinite(a)]
    scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
    if torch.allclose(b, a, rtol=RTOL, atol=ATOL * scale, equal_nan=True):
        return None
    err = (b - a).abs().nan_to_num(nan=float("inf"))
    return f"values differ: max abs err {float(err.max()):.3g} (scale {scale:.3g})"


def _float_close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL * max(1.0, abs(a)))


def diff(ref, got, path: str = "") -> str | None:
    """The first difference between two snapshots (see ``run.snapshot``), as ``path: what``; None if equal."""
    if isinstance(ref, tuple) and ref[:1] == ("T",) and len(ref) == 4:
        if not (isinstance(got, tuple) and got[:1] == ("T",) and len(got) == 4):
            return f"{path}: tensor vs {type(got).__name__}"
        d = _tensor_diff(ref, got)
        return d and f"{path}: {d}"
    if type(ref) is not type(got) and not (isinstance(ref, (int, float)) and isinstance(got, (int, float))
                                           and type(ref) is not bool and type(got) is not bool):
        return f"{path}: type {type(ref).__name__} vs {type(got).__name__}"
    if isinstance(ref, float) or isinstance(got, float):
        return None if type(ref) is type(got) and _float_close(ref, got) else f"{path}: {ref!r} vs {got!r}"
    if isinstance(ref, (list, tuple)):
        if len(ref) != len(got):
            return f"{path}: length {len(ref)} vs {len(got)}"
        for i, (a, b) in enumerate(zip(ref, got)):
            d = diff(a, b, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(ref, dict):
        if list(ref) != list(got):
            return f"{path}: keys {list(ref)} vs {list(got)}"
        for k in ref:
            d = diff(ref[k], got[k], f"{path}[{k!r}]")
            if d:
                return d
        return None
    return None if ref == got else f"{path}: {ref!r} vs {got!r}"


_GRAD_FN = re.compile(r"grad_fn=<\w+>")
_SPACE = re.compile(r"\s+")
_NUM = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf")


def stdout_diff(a: str, b: str) -> str | None:
    """Printed text: equal outside numbers, numbers equal within a printed-precision tolerance. A printed
    tensor's ``grad_fn=<...>`` names the autograd node, which a compiled graph legitimately replaces."""
    a, b = _GRAD_FN.sub("grad_fn=<>", a), _GRAD_FN.sub("grad_fn=<>", b)
    # the node's name sets where a tensor's repr wraps its last line: whitespace runs compare as one space
    a, b = _SPACE.sub(" ", a), _SPACE.sub(" ", b)
    if a == b:
        return None
    if _NUM.sub("#", a) != _NUM.sub("#", b):
        return f"printed {a[-120:]!r} vs {b[-120:]!r}"
    for x, y in zip(_NUM.findall(a), _NUM.findall(b)):
        fx, fy = float(x), float(y)
        if not (fx == fy or (math.isnan(fx) and math.isnan(fy)) or
                math.isclose(fx, fy, rel_tol=2e-3, abs_tol=2e-3)):
            return f"printed number {x} vs {y}"
    return None


def stride_notes(ref, got, path="out") -> list[str]:
    notes = []
    if isinstance(ref, tuple) and ref[:1] == ("T",) and isinstance(got, tuple) and got[:1] == ("T",):
        if ref[3] != got[3] and ref[1].shape == got[1].shape:
            notes.append(f"{path}: stride {ref[3]} vs {got[3]}")
    elif isinstance(ref, (list, tuple)) and isinstance(got, (list, tuple)):
        for i, (a, b) in enumerate(zip(ref, got)):
            notes += stride_notes(a, b, f"{path}[{i}]")
    elif isinstance(ref, dict) and isinstance(got, dict):
        for k in ref:
            if k in got:
                notes += stride_notes(ref[k], got[k], f"{path}[{k!r}]")
    return notes


def _compare_one(i: int, r, g) -> Failure | None:
    if r.exc is not None or g.exc is not None:
        if r.exc is None:
            return Failure("crash", f"{_exc_name(g.exc)} ({g.stage})", f"call {i}: {_first_line(g.exc)}")
        if g.exc is None:
            return Failure("exc_mismatch", f"{_exc_name(r.exc)} vs none",
                           f"call {i}: eager raised {_exc_name(r.exc)}: {_first_line(r.exc)}")
        if type(r.exc) is not type(g.exc):
            return Failure("exc_mismatch", f"{_exc_name(r.exc)} vs {_exc_name(g.exc)}",
                           f"call {i}: eager {_first_line(r.exc)} | ember {_first_line(g.exc)}")
        return None
    checks = [("output", lambda: diff(r.out, g.out, "out")),
              ("input side effect", lambda: diff(r.inputs, g.inputs, "inputs")),
              ("grad", lambda: diff(r.grads, g.grads, "grads")),
              ("stdout", lambda: stdout_diff(r.stdout, g.stdout)),
              ("STATE", lambda: diff(r.state, g.state, "STATE"))]
    for aspect, fn in checks:
        d = fn()
        if d:
            return Failure("wrong", aspect, f"call {i}: {d}")
    return None


def compare_calls(ref: list, got: list) -> tuple[Failure | None, list[str]]:
    for i, (r, g) in enumerate(zip(ref, got)):
        f = _compare_one(i, r, g)
        if f:
            return f, []
    if len(ref) != len(got):
        return Failure("wrong", "call count", f"{len(ref)} vs {len(got)} calls"), []
    notes = []
    for r, g in zip(ref, got):
        notes += stride_notes(r.out, g.out)
    return None, notes
