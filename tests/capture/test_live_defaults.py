"""A compiled function's own defaults are read at call time, as CPython reads them: replacing ``__defaults__``
or ``__kwdefaults__`` after the first compiled call changes what an omitted argument means (a wrong result
before: the dispatcher kept the defaults it was made with). Each case calls the compiled function and the
original with the same argument lists around a change of the defaults; both must agree, exceptions included."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ember


def _f(x, shift=0.5, *, scale=2.0):
    return (x + shift) * scale


def _g(a, b=1, /, c=2, *args, d=3, **kw):
    return a + b + c + d + sum(args) + sum(kw.values())


def _h(x, y):
    return x * y


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, bias=0.0, relu=True):
        y = self.lin(x) + bias
        return y.relu() if relu else y


CALLS = {
    "f": [((), {}), ((1.0,), {}), ((), {"scale": 3.0}), ((), {"shift": 2.0})],
    "g": [((), {}), ((5,), {"c": 7}), ((1, 2, 3, 4), {"d": 1, "e": 9})],
    "h": [((2.0,), {})],
    "net": [((), {}), ((1.0,), {}), ((), {"relu": False})],
}
# (function, the changes made between rounds of calls)
CASES = {
    "defaults_replaced": ("f", [("__defaults__", (3.0,))]),
    "kwdefaults_replaced": ("f", [("__kwdefaults__", {"scale": 10.0})]),
    "both_replaced_twice": ("f", [("__defaults__", (4.0,)), ("__kwdefaults__", {"scale": -1.0}),
                                  ("__defaults__", (0.25,))]),
    "defaults_removed_then_back": ("f", [("__defaults__", None), ("__defaults__", (7.0,))]),
    "positional_only_defaults": ("g", [("__defaults__", (10, 20)), ("__kwdefaults__", {"d": 0})]),
    "a_parameter_loses_its_default": ("g", [("__defaults__", (30,))]),
    "defaults_added": ("h", [("__defaults__", (5.0,))]),
    "module_forward_defaults": ("net", [("__defaults__", (1.5, False))]),
}


def _clone(fn):
    import types
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ else None
    return new


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except TypeError as e:
        return ("TypeError", str(e).split("(")[0].split()[-1])


@pytest.mark.parametrize("backend", ["eager", "ember"])
@pytest.mark.parametrize("case", list(CASES))
def test_changed_defaults_are_used(case, backend):
    name, changes = CASES[case]
    ember.reset()
    x = torch.randn(2, 3)
    if name == "net":
        torch.manual_seed(0)
        net = _Net()
        fn = net.forward.__func__
        saved = (fn.__defaults__, fn.__kwdefaults__)
        compiled = ember.compile(net, backend=backend)
        run_e, run_c, target = net, compiled, fn
    else:
        target = _clone({"f": _f, "g": _g, "h": _h}[name])
        compiled = ember.compile(target, backend=backend)
        run_e, run_c = target, compiled
        saved = None
    try:
        for round_ in range(len(changes) + 1):
            if round_:
                setattr(target, *changes[round_ - 1])
            for args, kwargs in CALLS[name]:
                if name == "h" and round_ == 0:
                    args = (3.0,) + args     # no default yet: both arguments given
                want = _outcome(run_e, x, *args, **kwargs)
                got = _outcome(run_c, x, *args, **kwargs)
                if isinstance(want, tuple):
                    assert got == want, (round_, args, kwargs)
                else:
                    torch.testing.assert_close(got, want, msg=lambda m: f"round {round_} {args} {kwargs}: {m}")
    finally:
        if saved is not None:
            target.__defaults__, target.__kwdefaults__ = saved
