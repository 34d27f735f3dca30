"""Indices that substitute a ``Mod`` into a ``Mod`` of a product (``Mod(3 * x1, 4)`` with ``x1 = xindex %
8``): sympy 1.14 simplifies ``Mod(k * Mod(x, m), q)`` to a wrong value (``ember.shapes.sympy_mod``). A
strided slice of a reshaped stack read the wrong elements (fuzz seed 510421). Differential: values compiled
== eager for view chains that produce such indices, and sympy's ``Mod`` of such products checked against
Python's ``%``."""
from __future__ import annotations

import itertools

import pytest
import sympy
import torch

import ember
import ember.shapes  # noqa: F401  (installs the guard)


def stack_reshape_stride3(x):
    return torch.stack([x, x], 2).reshape(5, 32)[1:, 8:31:3] * 1


def cat_reshape_stride5(x):
    return torch.cat([x, x * 2], 1).reshape(5, 32)[:, 3::5] + 1


def stack_flat_stride3(x):
    return torch.stack([x, -x], -1).flatten()[2::3].exp()


def unfold_like(x):
    return torch.stack([x, x + 1, x + 2], 1).reshape(5, 48)[:, 1:47:6] * 2


@pytest.mark.parametrize("fn", [stack_reshape_stride3, cat_reshape_stride5, stack_flat_stride3, unfold_like],
                         ids=lambda f: f.__name__)
def test_strided_views_of_stacks(fn):
    ember.reset()
    f = ember.compile(fn)
    x = torch.randn(5, 4, 4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(f(x), fn(x))


def test_mod_of_products_with_mods():
    x, y = sympy.symbols("x y", integer=True, nonnegative=True)
    M = sympy.Mod
    for k, m, q in itertools.product(range(1, 6), (2, 3, 4, 8), (2, 3, 4, 8)):
        cases = [(M(k * M(x, m), q), lambda v, w: (k * (v % m)) % q),
                 (M(k * M(x, m) + y, q), lambda v, w: (k * (v % m) + w) % q),
                 (M(M(x, m) * M(y, q) * k, q), lambda v, w: ((v % m) * (w % q) * k) % q),
                 (M(k * x, q).subs(x, M(y, m)), lambda v, w: (k * (w % m)) % q)]
        for e, ref in cases:
            for v, w in itertools.product(range(0, 24, 5), range(0, 13, 4)):
                assert int(e.subs({x: v, y: w})) == ref(v, w), (e, v, w)


_FRESH = """
import itertools, sys, threading
import sympy
import ember.shapes
from ember.shapes import sympy_mod
assert "sympy.combinatorics" not in sys.modules and sympy_mod._FAULTY == [], "import evaluated a Mod"
M = sympy.Mod
x = sympy.Symbol("x", integer=True, nonnegative=True)
bad = []

def check(k):
    for m, q in itertools.product((2, 3, 4, 8), (2, 3, 4, 8)):
        e = M(k * M(x, m), q)
        bad.extend((k, m, q, v) for v in range(0, 24, 5) if int(e.subs(x, v)) != (k * (v % m)) % q)

threads = [threading.Thread(target=check, args=(k,)) for k in range(1, 6)]   # the first Mods, at once
[t.start() for t in threads]
[t.join() for t in threads]
assert not bad, bad
print(sympy_mod._FAULTY)
"""


def test_guard_is_decided_at_the_first_mod_not_at_import():
    """Importing ember.shapes evaluates no ``Mod`` (the fault probe's arithmetic imports sympy.tensor and
    sympy.combinatorics: ~50 ms of a warm start that does no size arithmetic); the first ``Mod`` evaluations,
    from several threads at once, wait for the probe and get right values."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True, cwd=root, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip() in ("[True]", "[False]")
