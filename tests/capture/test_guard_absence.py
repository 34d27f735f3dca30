"""Every attribute/name lookup a trace resolved is guarded both ways (issue 31, item 1): where the name was found
and where it was *not* (``getattr(obj, name, default)``, ``hasattr``, a method the instance does not shadow,
a ``__getattr__`` fallback, a global or builtin that is not defined, a name absent from a dict).

Each case is a program plus a list of changes made between calls (attribute added, changed, deleted, on the
instance or on the class; a buffer or submodule registered; a global defined or deleted). After each change the
compiled function must give what eager gives, on fresh inputs. Before the fix the compiled function kept the
first call's answer: ``getattr(self, "scale", 1)`` stayed 1 after ``m.scale = 3``."""
from __future__ import annotations

import builtins
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

import ember


class Cfg:
    pass


class Slotted:
    __slots__ = ("a", "b")


class WithClassAttr:
    scale = 2.0

    def bonus(self):
        return 1.0


class Fallback:
    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return 7.0


def _fresh(seed: int) -> torch.Tensor:
    return torch.randn(3, generator=torch.Generator().manual_seed(seed))


@dataclass
class Case:
    name: str
    make: Callable[[], tuple[Callable, Any]]       # -> (eager callable, state the changes act on)
    changes: list[Callable[[Any], None]] = field(default_factory=list)


# -- modules ---------------------------------------------------------------------------------------------------
class GetattrDefault(torch.nn.Module):
    def forward(self, x):
        return x * getattr(self, "scale", 1)


class HasattrModule(torch.nn.Module):
    def forward(self, x):
        return x + 1 if hasattr(self, "flag") else x - 1


class ClassAttrModule(torch.nn.Module):
    scale = 2.0

    def helper(self, x):
        return x + 1

    def forward(self, x):
        return self.helper(x) * self.scale


class OptionalBuffer(torch.nn.Module):
    def forward(self, x):
        extra = getattr(self, "extra", None)
        return x if extra is None else x + (extra(x) if isinstance(extra, torch.nn.Module) else extra)


class WithChild(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x)


def _double(module, inputs, output):
    return output * 2


class LazyHooks(torch.nn.Module):
    """transformers' pattern: install hooks once, behind a flag on the instance (registering a hook is a graph
    break: it runs natively on every call that takes that branch)."""

    def __init__(self):
        super().__init__()
        self.child = torch.nn.Identity()

    def forward(self, x):
        if not getattr(self, "_hooks_installed", False):
            self.child.register_forward_hook(_double)
            self._hooks_installed = True
        return self.child(x) + 1


def _module(cls):
    def make():
        m = cls()
        return m, m
    return make


def _set(name, value):
    return lambda s: setattr(s, name, value)


def _del(name):
    return lambda s: delattr(s, name)


# -- plain objects, classes, globals ------------------------------------------------------------------------------
CFG = Cfg()
SLOTS = Slotted()
WCA = WithClassAttr()
FB = Fallback()
TABLE: dict = {}
NS = types.ModuleType("ember_absence_test_ns")        # a user module


def _act(x):
    return x + 1


def ns_lookups(x):
    return NS.act(x) * getattr(NS, "FACTOR", 1.0)


def _flagged(x):
    return x


def function_attribute(x):
    return x * getattr(_flagged, "factor", 1.0) + hasattr(_flagged, "flag")


def class_object_lookups(x):
    return x * getattr(WithClassAttr, "extra", 1.0) + WithClassAttr.bonus(None)


def plain_getattr(x):
    v = getattr(CFG, "flag", None)
    return x if v is None else x * v


def plain_hasattr(x):
    return x + 1 if hasattr(CFG, "flag") else x


def in_instance_dict(x):
    return x + 1 if "flag" in CFG.__dict__ else x


def slots_getattr(x):
    return x * getattr(SLOTS, "b", 5.0)


def class_attr(x):
    return x * WCA.scale + WCA.bonus()


def fallback_getattr(x):
    return x * FB.weight


def in_dict(x):
    return x + TABLE["k"] if "k" in TABLE else x


def maybe_global(x):
    try:
        k = ABSENCE_TEST_GLOBAL   # noqa: F821 - defined and deleted by the changes
    except NameError:
        k = 1.0
    return x * k


def builtin_or_global(x):
    return x * abs(-2)


def _global(name, value):
    def change(_):
        if value is None:
            globals().pop(name, None)
        else:
            globals()[name] = value
    return change


def _fresh_objects():
    for obj in (CFG, WCA, FB):
        obj.__dict__.clear()
    for slot in ("a", "b"):
        if hasattr(SLOTS, slot):
            delattr(SLOTS, slot)
    TABLE.clear()
    WithClassAttr.scale = 2.0
    WithClassAttr.bonus = _BONUS
    for attr in ("flag",):
        if attr in Cfg.__dict__:
            delattr(Cfg, attr)
    globals().pop("ABSENCE_TEST_GLOBAL", None)
    globals().pop("abs", None)
    NS.__dict__.pop("FACTOR", None)
    NS.act = _act
    _flagged.__dict__.clear()
    if "extra" in WithClassAttr.__dict__:
        del WithClassAttr.extra


_BONUS = WithClassAttr.bonus


def _plain(fn):
    return lambda: (fn, None)


CASES = [
    Case("module getattr default: added, changed, deleted", _module(GetattrDefault),
         [_set("scale", 3.0), _set("scale", 4.0), _del("scale")]),
    Case("module hasattr: added, deleted", _module(HasattrModule), [_set("flag", True), _del("flag")]),
    Case("module class attribute and method shadowed by the instance, then not", _module(ClassAttrModule),
         [_set("scale", 5.0), _set("helper", lambda x: x - 10), _del("helper"), _del("scale")]),
    Case("module class attribute changed on the class", _module(ClassAttrModule),
         [lambda m: setattr(ClassAttrModule, "scale", 6.0), lambda m: setattr(ClassAttrModule, "scale", 2.0)]),
    Case("module attribute later a buffer, a submodule, a plain value", _module(OptionalBuffer),
         [lambda m: m.register_buffer("extra", torch.full((3,), 2.0)),
          lambda m: delattr(m, "extra"),
          lambda m: setattr(m, "extra", torch.nn.Linear(3, 3)),
          lambda m: delattr(m, "extra"),
          lambda m: setattr(m, "extra", torch.nn.Parameter(torch.ones(3))),
          lambda m: delattr(m, "extra")]),
    Case("submodule forward replaced on the instance", _module(WithChild),
         [lambda m: setattr(m.lin, "forward", lambda x: x * 7), lambda m: delattr(m.lin, "forward")]),
    Case("plain object getattr default", _plain(plain_getattr),
         [lambda _: setattr(CFG, "flag", 3.0), lambda _: delattr(CFG, "flag")]),
    Case("plain object hasattr, then a class attribute", _plain(plain_hasattr),
         [lambda _: setattr(CFG, "flag", 1), lambda _: delattr(CFG, "flag"), lambda _: setattr(Cfg, "flag", 1),
          lambda _: delattr(Cfg, "flag")]),
    Case("'name' in obj.__dict__", _plain(in_instance_dict),
         [lambda _: setattr(CFG, "flag", 1), lambda _: delattr(CFG, "flag")]),
    Case("__slots__ member unset, set, unset", _plain(slots_getattr),
         [lambda _: setattr(SLOTS, "b", 7.0), lambda _: delattr(SLOTS, "b")]),
    Case("class attribute and method: shadowed on the instance, changed on the class", _plain(class_attr),
         [lambda _: setattr(WCA, "scale", 9.0), lambda _: setattr(WCA, "bonus", lambda: 100.0),
          lambda _: WCA.__dict__.clear(), lambda _: setattr(WithClassAttr, "scale", 4.0),
          lambda _: setattr(WithClassAttr, "bonus", lambda self: -1.0)]),
    Case("__getattr__ fallback, then a real attribute", _plain(fallback_getattr),
         [lambda _: setattr(FB, "weight", 3.0), lambda _: delattr(FB, "weight")]),
    Case("key in dict: added, deleted", _plain(in_dict),
         [lambda _: TABLE.__setitem__("k", 2.0), lambda _: TABLE.pop("k")]),
    Case("module global: defined, deleted", _plain(maybe_global),
         [_global("ABSENCE_TEST_GLOBAL", 5.0), _global("ABSENCE_TEST_GLOBAL", None)]),
    Case("user module: attribute defined, deleted; function replaced", _plain(ns_lookups),
         [lambda _: setattr(NS, "FACTOR", 3.0), lambda _: delattr(NS, "FACTOR"),
          lambda _: setattr(NS, "act", lambda x: x - 5)]),
    Case("class object: attribute added, method replaced", _plain(class_object_lookups),
         [lambda _: setattr(WithClassAttr, "extra", 2.0), lambda _: delattr(WithClassAttr, "extra"),
          lambda _: setattr(WithClassAttr, "bonus", lambda self: 8.0)]),
    Case("function attribute: set, changed, deleted", _plain(function_attribute),
         [lambda _: setattr(_flagged, "factor", 3.0), lambda _: setattr(_flagged, "factor", 5.0),
          lambda _: setattr(_flagged, "flag", True), lambda _: _flagged.__dict__.clear()]),
    Case("builtin shadowed by a global, unshadowed", _plain(builtin_or_global),
         [_global("abs", lambda v: 10.0), _global("abs", None)]),
]


@pytest.mark.parametrize("backend", ["eager", "ember"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_absence_is_guarded(fresh_ember, case, backend):
    _fresh_objects()
    try:
        fn, state = case.make()
        compiled = ember.compile(fn, backend=backend)
        for step, change in enumerate([None] + case.changes):
            if change is not None:
                change(state)
            x = _fresh(step)
            torch.testing.assert_close(compiled(x), fn(x), msg=lambda m: f"after change {step}: {m}")
    finally:
        _fresh_objects()


def test_builtin_defined_later_is_seen(fresh_ember):
    def f(x):
        try:
            return x * ABSENCE_TEST_BUILTIN    # noqa: F821 - a builtin set below
        except NameError:
            return x
    compiled = ember.compile(f, backend="eager")
    try:
        x = _fresh(0)
        torch.testing.assert_close(compiled(x), x)
        builtins.ABSENCE_TEST_BUILTIN = 3.0
        torch.testing.assert_close(compiled(x), x * 3.0)
        builtins.ABSENCE_TEST_BUILTIN = 4.0
        torch.testing.assert_close(compiled(x), x * 4.0)
    finally:
        builtins.__dict__.pop("ABSENCE_TEST_BUILTIN", None)
    torch.testing.assert_close(compiled(x), x)


def test_lazily_installed_hooks_do_not_pile_up(fresh_ember):
    m_eager, m = LazyHooks(), LazyHooks()
    compiled = ember.compile(m)
    for seed in range(4):
        x = _fresh(seed)
        torch.testing.assert_close(compiled(x), m_eager(x))
    assert len(m.child._forward_hooks) == len(m_eager.child._forward_hooks) == 1
    assert m._hooks_installed is True


@pytest.mark.parametrize("name", ["weird-attr", "class", "a b", "ﬁ", "0x", ""])
def test_non_identifier_attribute_names(fresh_ember, name):
    """``getattr``/``hasattr``/``setattr`` with names that are not plain identifiers: guards read them through
    ``getattr(obj, 'name')``; a non-ASCII one is not NFKC-folded into another name (``ﬁ`` is not ``fi``)."""
    obj = Cfg()
    obj.fi = 100.0

    def f(x):
        return x * getattr(obj, name, 2.0) + hasattr(obj, name)
    compiled = ember.compile(f, backend="eager")
    x = _fresh(0)
    torch.testing.assert_close(compiled(x), f(x))
    setattr(obj, name, 3.0)
    torch.testing.assert_close(compiled(x), f(x))
    setattr(obj, name, 4.0)
    torch.testing.assert_close(compiled(x), f(x))
    delattr(obj, name)
    torch.testing.assert_close(compiled(x), f(x))


def test_setattr_with_non_identifier_name_is_replayed(fresh_ember):
    obj = Cfg()

    def f(x, key):
        setattr(obj, key, 5.0)
        return x * getattr(obj, key)
    compiled = ember.compile(f, backend="eager")
    x = _fresh(0)
    torch.testing.assert_close(compiled(x, "weird-attr"), x * 5.0)
    assert getattr(obj, "weird-attr") == 5.0


def _times_three(module, inputs, output):
    return output * 3


def _pre_plus_one(module, inputs):
    return (inputs[0] + 1,)


HOOK_REGISTRATIONS = {
    "forward hook on a submodule": lambda m: m.lin.register_forward_hook(_times_three),
    "forward pre-hook on a submodule": lambda m: m.lin.register_forward_pre_hook(_pre_plus_one),
    "forward hook on the compiled module itself": lambda m: m.register_forward_hook(_times_three),
    "global module forward hook": lambda m: torch.nn.modules.module.register_module_forward_hook(_times_three),
}


@pytest.mark.parametrize("how", list(HOOK_REGISTRATIONS))
def test_hook_registered_after_compile_is_run(fresh_ember, how):
    """A submodule called without hooks is inlined; a hook registered later must not be skipped (it is seen
    through ``RemovableHandle.next_id``, see ember/capture/torch/hookguard.py), and removing it is seen too."""
    m = WithChild()
    compiled = ember.compile(m, backend="eager")
    x = _fresh(0)
    torch.testing.assert_close(compiled(x), m(x))
    handle = HOOK_REGISTRATIONS[how](m)
    try:
        for seed in (1, 2):
            x = _fresh(seed)
            torch.testing.assert_close(compiled(x), m(x))
    finally:
        handle.remove()
    x = _fresh(3)
    torch.testing.assert_close(compiled(x), m(x))
    torch.testing.assert_close(compiled(x), m.lin(x))
