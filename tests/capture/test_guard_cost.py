"""The host cost of a cached call's guards, without losing a fact.

Guards are rewritten to cost less on every call (one check of a function's whole defaults tuple, C-level reads
of an instance ``__dict__`` past a class's own ``__getattribute__``, subscripts instead of ``.get``): each
table below mutates what a guard protects, between calls of one compiled function, and checks the compiled
result equals eager's after every mutation (a missing guard is a stale, wrong answer). ``test_guard_count_*``
bounds the clauses a representative module's entry checks on every call.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn as nn

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from tests.capture.harness import assert_same  # noqa: E402


def rand(*shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------- lookups that found None
class _Base:
    scale = 3.0


class _Mid(_Base):
    scale = None            # deleting it exposes _Base.scale


class _Child(_Mid):
    pass


class _Own(_Base):
    scale = None            # found in the object's own class


def _reads_scale(x, obj):
    s = obj.scale           # resolved through the class: the class dicts' lookup is guarded
    return x * 2 if s is None else x * s


def _reads_scale_twice(x, obj):
    return _reads_scale(x, obj) + _reads_scale(x + 1, obj)


def _reset_none(obj):
    _Mid.scale = None
    _Own.scale = None


def _del_mid(obj):
    del _Mid.scale


def _del_own(obj):
    del _Own.scale


@dataclass(frozen=True)
class NoneLookupCase:
    name: str
    fn: Callable
    make: Callable
    mutate: Callable


NONE_LOOKUPS = [
    NoneLookupCase("own_class_attr_none_deleted", _reads_scale, _Own, _del_own),
    NoneLookupCase("base_class_attr_none_deleted", _reads_scale, _Child, _del_mid),
    NoneLookupCase("callee_reads_base_class_none_deleted", _reads_scale_twice, _Child, _del_mid),
]


@pytest.mark.parametrize("case", NONE_LOOKUPS, ids=[c.name for c in NONE_LOOKUPS])
def test_lookup_that_found_none_fails_once_the_name_is_gone(case, fresh_ember):
    """A class lookup that found None, then the name deleted from that class (a base's value shows through):
    the lookup guard reads the class dict by subscript, so a deleted name fails it (``.get(k) is None``
    passed; in these cases a guard on the value read also caught it)."""
    obj = case.make()
    _reset_none(obj)
    try:
        f = ember.compile(case.fn)
        for seed in range(2):
            x = rand(4, seed=seed)
            assert_same(f(x, obj), case.fn(x, obj))
        case.mutate(obj)
        for seed in range(2, 4):
            x = rand(4, seed=seed)
            assert_same(f(x, obj), case.fn(x, obj))
    finally:
        _reset_none(obj)


# ------------------------------------------------------------------- mutations of what guards protect
class _Config:
    """A transformers-style config: its own ``__getattribute__`` maps aliases (guards read its ``__dict__``
    past the hook)."""
    aliases = {"width": "hidden"}

    def __init__(self) -> None:
        self.hidden, self.scale, self.use_bias = 4, 2.0, True

    def __getattribute__(self, key):
        if key != "aliases" and key in super().__getattribute__("aliases"):
            key = super().__getattribute__("aliases")[key]
        return super().__getattribute__(key)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = _Config()
        self.lin = nn.Linear(4, 4)
        self.factor = 1.5

    def forward(self, x):
        c = self.config
        y = self.lin(x) * c.scale * self.factor
        if c.use_bias:
            y = y + c.width
        if self.training:
            y = y * 2
        y = y + _GLOBAL_OFFSET[0] * _HELPER_SCALE
        return _combine(y)


def _combine(y, shift=0.5, mode="add", scale=None, clip=False):
    y = y if scale is None else y * scale
    y = y.clamp(-1, 1) if clip else y
    return y + shift if mode == "add" else y - shift


_GLOBAL_OFFSET = [0.25]
_HELPER_SCALE = 1.0


def _set_param(m):
    m.lin.weight = nn.Parameter(torch.randn(4, 4, generator=torch.Generator().manual_seed(7)))


def _param_inplace(m):
    with torch.no_grad():
        m.lin.bias.add_(1.0)


def _param_data(m):
    m.lin.weight.data = torch.randn(4, 4, dtype=torch.float64).float()


def _param_requires_grad(m):
    m.lin.bias.requires_grad_(not m.lin.bias.requires_grad)


def _attr_changed(m):
    m.factor = -2.0


def _attr_removed(m):
    del m.factor
    type(m).factor = 3.0        # now the class attribute answers


def _attr_added(m):
    m.extra = 1                 # not read: must not matter


def _config_changed(m):
    m.config.scale = 0.5


def _config_flag(m):
    m.config.use_bias = False


def _config_alias(m):
    m.config.hidden = 9         # read through the alias width -> hidden


def _config_alias_map(m):
    m.config.__dict__["aliases"] = {}         # an instance attribute shadows the class's alias map
    m.config.width = 11


def _global_changed(m):
    global _HELPER_SCALE
    _HELPER_SCALE = 3.0


def _global_list_item(m):
    _GLOBAL_OFFSET[0] = -1.0


def _training(m):
    m.train(not m.training)


def _hook(m):
    m.lin.register_forward_hook(lambda mod, inp, out: out * 10)


def _defaults_changed(m):
    _combine.__defaults__ = (0.5, "sub", None, False)


def _defaults_equal_copy(m):
    _combine.__defaults__ = tuple([0.5, "add", None, False])     # a new tuple, equal: no recompile needed


def _defaults_one_changed(m):
    _combine.__defaults__ = (0.5, "add", None, True)

MUTATIONS = [_set_param, _param_inplace, _param_data, _param_requires_grad, _attr_changed, _attr_added,
             _config_changed, _config_flag, _config_alias, _config_alias_map, _global_changed, _global_list_item,
             _training, _hook, _defaults_changed, _defaults_equal_copy, _defaults_one_changed, _attr_removed]

INPUTS = {
    "plain": lambda seed: (rand(3, 4, seed=seed),),
    "dtype": lambda seed: (rand(3, 4, seed=seed).double(),),
    "shape": lambda seed: (rand(5, 4, seed=seed),),
    "stride": lambda seed: (rand(4, 3, seed=seed).t(),),
    "requires_grad": lambda seed: (rand(3, 4, seed=seed).requires_grad_(),),
}


@pytest.fixture
def restore_net():
    defaults = _combine.__defaults__
    yield
    global _HELPER_SCALE
    _combine.__defaults__ = defaults
    _HELPER_SCALE, _GLOBAL_OFFSET[0] = 1.0, 0.25
    if "factor" in _Net.__dict__:
        del _Net.factor


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("mutate", MUTATIONS, ids=[f.__name__.lstrip("_") for f in MUTATIONS])
def test_every_mutation_of_a_guarded_fact_gives_eager_results(mutate, grad, fresh_ember, restore_net):
    """Compiled == eager before and after ``mutate`` (then with inputs of another dtype, shape, stride and
    requires_grad): the cheaper guards keep every fact that decides the result."""
    torch.manual_seed(0)
    m = _Net().eval()
    f = ember.compile(m)
    with torch.set_grad_enabled(grad):
        for step, make in enumerate(["plain", "plain", "mutate", "plain", "plain", *list(INPUTS)[1:]]):
            if make == "mutate":
                mutate(m)
                continue
            args = INPUTS[make](step)
            if make == "dtype":
                m.double()
            assert_same(f(*args), m(*args))
            if make == "dtype":
                m.float()


# ------------------------------------------------------------------- what a cached call costs
def _guards(m, *args) -> list:
    with torch.no_grad():
        return ember.explain(m)(*args).guards


def test_cached_calls_read_a_config_past_its_getattribute(fresh_ember):
    """The guards on a config with its own ``__getattribute__`` read its instance dict through the class's
    ``__dict__`` slot, not ``config.__dict__`` (which runs the hook, in Python, on every call: ~1 us)."""
    m = _Net().eval()
    guards = _guards(m, rand(3, 4, seed=0))
    through_hook = [g.expr for g in guards if "config" in g.reason and ".__dict__" in g.expr]
    assert not through_hook
    assert any("__dict_of" in g.expr for g in guards)
    f = ember.compile(m)
    with torch.no_grad():
        for seed in range(3):
            x = rand(3, 4, seed=seed)
            assert_same(f(x), m(x))


def test_a_functions_constant_defaults_are_one_clause(fresh_ember):
    """``_combine``'s four defaults (None, flags, a str, a float) are checked by one clause (the tuple's
    identity first), not one each."""
    clauses = [g for g in _guards(_Net().eval(), rand(3, 4, seed=0)) if "__defaults__" in g.expr]
    assert len(clauses) == 1, [g.expr for g in clauses]


# the clauses of ``_Net``'s entry under no_grad (38 when this bound was set: grad/inference/autocast state, the
# input, the module tree and its weights, the config's dict, the globals and the defaults); a new kind of
# clause per attribute or per weight shows as a jump past it
GUARD_BOUND = 42


def test_guard_count_of_a_representative_module_does_not_regress(fresh_ember):
    n = len(_guards(_Net().eval(), rand(3, 4, seed=0)))
    assert n <= GUARD_BOUND, f"{n} guard clauses (bound {GUARD_BOUND})"


def test_no_fact_is_checked_twice(fresh_ember):
    """The config's alias map is looked up twice through its ``__getattribute__`` (``aliases`` is not an
    instance attribute): the first clause assigns the hoisted dict, the second read the same fact from the
    name; only the first stays."""
    guards = _guards(_Net().eval(), rand(3, 4, seed=0))
    reasons = [g.reason for g in guards]
    assert len(set(reasons)) == len(reasons), sorted(r for r in reasons if reasons.count(r) > 1)
