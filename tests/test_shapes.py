"""ember.shapes: symbols, hints, relations, and PyTorch's meta kernels computing with ember's SymNode."""
import pytest
import sympy
import torch

from ember.shapes import SymbolTable, expr_of, hint_of, is_symbolic, located, to_python


def _table(*hints):
    t = SymbolTable()
    return t, [t.symint(t.new_symbol(h, f"L['x'].size()[{i}]")) for i, h in enumerate(hints)]


def test_arithmetic_keeps_hint_and_expression():
    t, (s0, s1) = _table(5, 7)
    n = (s0 * 2 + s1) // 3
    assert hint_of(n) == (5 * 2 + 7) // 3
    assert is_symbolic(n) and expr_of(n) == sympy.floor((2 * sympy.Symbol("s0", integer=True, positive=True)
                                                          + sympy.Symbol("s1", integer=True, positive=True)) / 3)
    src = to_python(expr_of(n))
    assert eval(src, {"s0": 11, "s1": 4}) == (11 * 2 + 4) // 3


def test_branch_records_relation_with_location_and_check():
    t, (s0,) = _table(6)
    with located("model.py:12"):
        assert bool(s0 % 2 == 0)
    assert len(t.relations) == 1 and t.relations[0].where == "model.py:12"
    s = t.symbols[0]
    assert t.check({s: 8}) and not t.check({s: 7})


def test_ranges_decide_without_a_guard():
    t, (s0,) = _table(4)
    assert bool(s0 >= 2) and bool(s0 != 1) and not bool(s0 == 0)
    assert t.relations == []
    assert not t.check({t.symbols[0]: 1})       # sizes 0 and 1 are outside a symbol's range


@pytest.mark.parametrize("cond", ["s0*s1 >= 2", "s0*s1 > 1", "s0**2 >= 4", "s0*s1*s0 >= 8",
                                  "Ne(3*s0*s1, 5)", "s0*s1 + s0 >= 6", "-(s0*s1) < 0"])
def test_products_of_sizes_decide_without_a_guard(cond):
    """Products of sizes are bounded by their factors' ranges (numel > 1 of a [s0, s1] tensor is known)."""
    t, (a, b) = _table(4, 6)
    expr = sympy.sympify(cond, locals={"s0": t.symbols[0], "s1": t.symbols[1]})
    assert t.known(expr) is True and t.decide(expr) and t.relations == []


def test_equal_sizes_unify():
    t, (s0, s1) = _table(5, 5)
    assert bool(s0 == s1)
    assert expr_of(s1 * 1 + 0) == expr_of(s0) or t.simplify(expr_of(s1)) == expr_of(s0)


def test_guard_int_specializes():
    t, (s0,) = _table(5)
    assert int(s0) == 5
    assert not t.check({t.symbols[0]: 6})


def test_meta_kernels_compute_symbolic_shapes():
    t, (s0, s1) = _table(5, 7)
    x = torch.empty(s0, 3, device="meta")
    assert x.sum(1).shape[0] is not None and str(x.sum(1).shape[0]) == "s0"
    assert str(torch.cat([x, x]).shape[0]) == "2*s0"
    assert [str(d) for d in (torch.empty(s0, s1, device="meta") @ torch.empty(s1, 4, device="meta")).shape] == ["s0", "4"]
    y = torch.nn.functional.conv2d(torch.empty(s0, 3, s1, s1, device="meta"), torch.empty(4, 3, 3, 3, device="meta"))
    assert [str(d) for d in y.shape] == ["s0", "4", "s1 - 2", "s1 - 2"]


def test_python_meta_code_reads_the_hint():
    """PyTorch's Python meta kernels (native_layer_norm_backward's ``statically_known_true(M == 0)``) read
    ``node._hint``."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    t, (s0,) = _table(5)
    assert statically_known_true(s0 == 0) is False and t.relations == []


def _sym(t, i):
    return t.symbols[i]


@pytest.mark.parametrize("make,expected", [
    (lambda s0, s1: sympy.Le(sympy.floor(s0 / 2), s0), True),          # (s0 // 2) <= s0
    (lambda s0, s1: sympy.Ge(4 * sympy.floor(s0 / 2), 2), True),       # 4*(s0//2) >= 2
    (lambda s0, s1: sympy.Lt(sympy.Mod(s0, 3), 3), True),
    (lambda s0, s1: sympy.Ge(sympy.Mod(s0, 3), 0), True),
    (lambda s0, s1: sympy.Ge(sympy.Max(s0, s1), 2), True),
    (lambda s0, s1: sympy.Le(sympy.Min(s0, 4), 4), True),
    (lambda s0, s1: sympy.Ge(s0 * s1, 4), True),                       # products of non-negative terms
    (lambda s0, s1: sympy.Gt(s0 * s1 - s0, 0), None),                  # not decided by intervals: recorded
    (lambda s0, s1: sympy.Eq(sympy.floor(s0 / 2), 1), None),           # holds at the hints only
    (lambda s0, s1: sympy.Lt(sympy.Mod(s0, 3), 2), None),
    (lambda s0, s1: sympy.Gt(sympy.floor(s0 / 2), s1), None),
])
def test_known_bounds_of_floor_mod_max_min_products(make, expected):
    t, _ = _table(3, 5)
    cond = make(_sym(t, 0), _sym(t, 1))
    assert t.known(cond) is expected
    t.decide(cond)
    assert (t.relations == []) is (expected is not None)


F, C = sympy.floor, sympy.ceiling
# integer-division rounding identities (the two forms a stepped slice's length takes: ceil(n/k) and
# (n + k - 1) // k, or -((-n) // k)) and near-misses that do not hold for every integer: (cond, holds)
ROUNDING = [
    (lambda u, s: sympy.Eq(C(u / 2), F((u + 1) / 2)), True),
    (lambda u, s: sympy.Eq(-F(-u / 2), F((u + 1) / 2)), True),
    (lambda u, s: sympy.Eq(C(u / 3), F((u + 2) / 3)), True),
    (lambda u, s: sympy.Eq(-F(-u / 5), F((u + 4) / 5)), True),
    (lambda u, s: sympy.Eq(C((u + s) / 4), F((u + s + 3) / 4)), True),
    (lambda u, s: sympy.Eq(C((2 * u + 1) / 2), u + 1), True),
    (lambda u, s: sympy.Ne(C(u / 3), F((u + 2) / 3)), False),
    (lambda u, s: sympy.Eq(F(u / 2), F((u + 1) / 2)), None),           # u odd: they differ
    (lambda u, s: sympy.Eq(C(u / 3), F((u + 1) / 3)), None),           # u = 3k + 2
    (lambda u, s: sympy.Eq(C(u / 2), F(u / 2)), None),
]


@pytest.mark.parametrize("signed", [False, True], ids=["size", "int"])
@pytest.mark.parametrize("i", range(len(ROUNDING)))
def test_rounding_identities_of_integer_division_on_unbacked_symbols(i, signed):
    """ceil(u/k) == (u + k - 1) // k for every integer u: proven from the ranges alone (an unbacked u has no
    hint to guard on); never claimed where some integer breaks it (checked on every u in -12..12)."""
    make, expected = ROUNDING[i]
    t = SymbolTable()
    u = t.new_unbacked("t.item()", lo=None if signed else 0)
    s = t.new_symbol(5, "L['x'].size()[0]")
    cond = make(u, s)
    assert t.known(cond) is expected, cond
    values = [bool(cond.subs({u: a, s: b})) for a in range(-12 if signed else 0, 13) for b in (2, 3, 7)]
    if expected is None:
        assert not all(values) and any(values), cond
    else:
        assert all(v is expected for v in values), cond
