"""Device functions the generated Triton kernels call (``_h.name``) and the ``libdevice`` they use.

Whether Triton compiles or interprets is decided per process: ``triton.jit`` (also on Triton's own library
functions such as ``tl.sum``) reads TRITON_INTERPRET when a function is defined, so it must be set before
``triton`` is first imported. The interpreter runs kernels as Python on numpy arrays and cannot call libdevice,
so under it ``libdevice`` here is a shim evaluating the same functions with torch; compiled, it is Triton's own
``triton.language.extra.libdevice``.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import triton
import triton.language as tl


def interpreting() -> bool:
    try:
        return bool(triton.knobs.runtime.interpret)
    except AttributeError:  # older triton
        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class _InterpLibdevice:
    """libdevice for the Triton interpreter: torch functions on the numpy data of interpreter tensors."""

    FNS: ClassVar[dict[str, Callable[..., torch.Tensor]]] = {
        "nearbyint": torch.round, "rint": torch.round, "signbit": lambda x: torch.signbit(x).to(torch.int32),
        "isnan": lambda x: torch.isnan(x).to(torch.int32), "isinf": lambda x: torch.isinf(x).to(torch.int32),
        "pow": torch.pow, "fmod": torch.fmod,
    }

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = self.FNS.get(name) or getattr(torch, name, None)
        if fn is None:
            raise AttributeError(f"libdevice.{name} is not available under TRITON_INTERPRET")

        def call(*args: Any) -> Any:
            from triton.runtime.interpreter import TensorHandle
            ref = next(a for a in args if isinstance(a, tl.tensor))
            ts = [torch.from_numpy(a.handle.data) if isinstance(a, tl.tensor) else a for a in args]
            out = fn(*ts)
            if not isinstance(out, torch.Tensor):
                out = torch.as_tensor(out)
            scalar = {torch.int32: tl.int32}.get(out.dtype, ref.dtype.scalar)
            data = out.numpy()
            ty = tl.block_type(scalar, list(data.shape)) if data.ndim else scalar
            return tl.tensor(TensorHandle(data, scalar), ty)
        return call


def _patch_interpreter_index() -> None:
    """The interpreter holds a kernel's int argument (a symbolic size) as a one-element array, and turns it
    into a Python int (``range(0, s1, RBLOCK)``) with ``int(array)``, which NumPy 2 refuses for arrays of one
    dimension: take the element instead."""
    try:
        from triton.runtime import interpreter
        patch = interpreter._patch_lang_tensor
    except (ImportError, AttributeError):
        return
    if getattr(patch, "ember_index", False):
        return

    def patched(tensor: Any, scope: Any) -> None:
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    patched.ember_index = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


if interpreting():
    libdevice: Any = _InterpLibdevice()
    _patch_interpreter_index()
else:
    from triton.language.extra import libdevice


@triton.jit
def floordiv_int(a, b):
    q = a // b
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)


@triton.jit
def remainder_int(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def remainder_float(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def floordiv_float(a, b):
    # torch's div_floor_floating: exact where a / b rounds across an integer
    r = a % b
    d = (a - r) / b
    d = tl.where((r != 0) & ((b < 0) != (r < 0)), d - 1.0, d)
    fd = tl.floor(d)
    fd = tl.where(d - fd > 0.5, fd + 1.0, fd)
    return tl.where(b == 0, a / b, tl.where(d == 0, d * 0.0 + tl.where((a < 0) != (b < 0), -0.0, 0.0), fd))


@triton.jit
def maximum(a, b):
    # NaN test as a select, not ``|``: Triton's interpreter cannot ``|`` a 0-d load's mask with a block's
    return tl.where(a != a, a, tl.where(a > b, a, b))  # noqa: PLR0124 - NaN test


@triton.jit
def welford_update(mean, m2, n, x, valid):
    """One step of Welford's running mean and M2 (sum of squared deviations) per lane, where ``valid``."""
    n_new = tl.where(valid, n + 1.0, n)
    delta = x - mean
    mean_new = tl.where(valid, mean + delta / tl.maximum(n_new, 1.0), mean)
    return mean_new, tl.where(valid, m2 + delta * (x - mean_new), m2), n_new


@triton.jit
def welford_update_dense(mean, m2, x, inv_n):
    """``welford_update`` where every lane holds a point (no mask): one count for all, ``inv_n`` its inverse."""
    delta = x - mean
    mean_new = mean + delta * inv_n
    return mean_new, m2 + delta * (x - mean_new)


@triton.jit
def welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    """Chan's formula: (mean, M2, n) of two sets of points from each one's."""
    n = n_a + n_b
    delta = mean_b - mean_a
    w = tl.where(n == 0.0, 0.0, n_b / tl.maximum(n, 1.0))
    return mean_a + delta * w, m2_a + m2_b + delta * delta * n_a * w, n


@triton.jit
def welford_finish(mean, m2, n):
    """The row's M2 from its lanes' (mean, M2, n)."""
    _, out, _ = tl.reduce((mean, m2, n), 1, welford_combine)
    return out[:, None]


@triton.jit
def minimum(a, b):
    return tl.where(a != a, a, tl.where(a < b, a, b))  # noqa: PLR0124 - NaN test (a select, as in maximum)


@triton.jit
def sum_combine(a, b):
    return a + b


@triton.jit
def prod_combine(a, b):
    return a * b


@triton.jit
def sign_float(a):
    return tl.where(a > 0, 1.0, tl.where(a < 0, -1.0, a * 0.0)).to(a.dtype)


@triton.jit
def digamma(x):
    # as torch's calc_digamma: reflection for x < 0 (through the fractional part, where tan is accurate),
    # recurrence up to x >= 6, then the asymptotic series
    xf = x
    pi = 3.141592653589793
    neg = xf < 0.0
    y = tl.where(neg, 1.0 - xf, xf)
    refl = tl.where(neg, pi / libdevice.tan(pi * (xf - libdevice.trunc(xf))), 0.0)
    acc = tl.zeros_like(y)
    for _ in tl.static_range(6):
        small = y < 6.0
        acc = tl.where(small, acc - 1.0 / y, acc)
        y = tl.where(small, y + 1.0, y)
    z = 1.0 / (y * y)
    poly = z * (0.08333333333333333 + z * (-0.008333333333333333 + z * (0.003968253968253968 + z * (
        -0.004166666666666667 + z * (0.007575757575757576 + z * (-0.021092796092796094 + z * 0.08333333333333333))))))
    r = tl.log(y) - 0.5 / y - poly + acc - refl
    is_pole = (xf <= 0.0) & (xf == tl.floor(xf))
    r = tl.where(is_pole, tl.where(xf == 0.0, -float("inf"), float("nan")), r)
    return r
