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
