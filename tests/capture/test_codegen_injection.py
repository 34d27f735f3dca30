"""No user string becomes code (issue 31, item 3): every name, string and constant that ember writes into source
it ``exec``s or compiles (guards, glue, continuations, the Python wrapper, C++ and Triton kernels) is emitted
through ``ember.emit``: an identifier only where it is one, a string only as its ``str.__repr__``, a constant as
a literal only where it reads back exactly, anything else as a bound value.

Each test hands a crafted string to one generator. The payload, if pasted as code, records itself in
``sys.modules``; the tests assert it never does, and that the compiled result equals eager."""
from __future__ import annotations

import enum
import functools
import math
import os
import sys

import pytest
import torch

if not torch.cuda.is_available():        # the Triton CPU backend runs in Triton's interpreter here
    os.environ.setdefault("TRITON_INTERPRET", "1")

import ember  # noqa: E402
from ember import emit  # noqa: E402

MARK = "ember_injection_marker"


def payload(tail: str = "__class__") -> str:
    """Text that, pasted after ``obj.`` or between quotes-less code, runs ``sys.modules[MARK] = 1``."""
    return f"__class__ and __import__('sys').modules.setdefault({MARK!r}, 1) and {tail}"


PAYLOADS = [payload(), "x'] or __import__('sys').modules.setdefault('" + MARK + "', 1) or ['",
            'x") or __import__("sys").modules.setdefault("' + MARK + '", 1) or ("', "a\nimport sys; sys.modules['"
            + MARK + "'] = 1\nb", "a\\", "}{", "{MARK}"]


@pytest.fixture(autouse=True)
def no_marker(fresh_ember):
    sys.modules.pop(MARK, None)
    yield
    assert MARK not in sys.modules, "a crafted string ran as code"


class Cfg:
    pass


def _x(seed=0):
    return torch.randn(3, generator=torch.Generator().manual_seed(seed))


# -- capture: guards ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", PAYLOADS)
def test_guard_on_attribute_read(key):
    cfg = Cfg()
    setattr(cfg, key, 2.0)

    def f(x):
        return x * getattr(cfg, key)
    compiled = ember.compile(f, backend="eager")
    torch.testing.assert_close(compiled(_x()), f(_x()))
    setattr(cfg, key, 3.0)
    torch.testing.assert_close(compiled(_x()), f(_x()))


@pytest.mark.parametrize("key", PAYLOADS)
def test_guard_on_absent_attribute_and_module_attribute(key):
    class M(torch.nn.Module):
        def forward(self, x):
            return x * getattr(self, key, 1.0)
    m = M()
    compiled = ember.compile(m, backend="eager")
    torch.testing.assert_close(compiled(_x()), m(_x()))
    setattr(m, key, 4.0)
    torch.testing.assert_close(compiled(_x()), m(_x()))


@pytest.mark.parametrize("key", PAYLOADS)
def test_guard_on_dict_key(key):
    table = {key: 2.0, "other": 1.0}

    def f(x):
        return x * table[key]
    compiled = ember.compile(f, backend="eager")
    torch.testing.assert_close(compiled(_x()), f(_x()))


# -- capture: glue (side effects replayed, values rebuilt) --------------------------------------------------------
@pytest.mark.parametrize("key", PAYLOADS)
def test_glue_replays_setattr_delattr_and_dict_writes(key):
    cfg, table = Cfg(), {}
    setattr(cfg, "old", 1)

    def f(x):
        setattr(cfg, key, 5.0)
        table[key] = 6.0
        return x + 1
    compiled = ember.compile(f, backend="eager")
    torch.testing.assert_close(compiled(_x()), _x() + 1)
    assert getattr(cfg, key) == 5.0 and table == {key: 6.0}
    delattr(cfg, key)
    table.clear()
    compiled(_x())
    assert getattr(cfg, key) == 5.0 and table == {key: 6.0}


def _takes_kwargs(x, **kw):
    return x, kw


@pytest.mark.parametrize("key", PAYLOADS)
def test_glue_rebuilds_partial_with_odd_keyword(key):
    def f(x):
        return functools.partial(_takes_kwargs, **{key: 1}), x + 1
    compiled = ember.compile(f, backend="eager")
    p, y = compiled(_x())
    torch.testing.assert_close(y, _x() + 1)
    assert p.keywords == {key: 1} and p(0) == (0, {key: 1})


@pytest.mark.parametrize("key", PAYLOADS)
def test_glue_new_object_attributes(key):
    def f(x):
        o = Cfg()
        setattr(o, key, 2.0)
        return o, x * 2
    compiled = ember.compile(f, backend="eager")
    o, y = compiled(_x())
    assert getattr(o, key) == 2.0
    torch.testing.assert_close(y, _x() * 2)


# -- capture: continuations after a graph break --------------------------------------------------------------------
@pytest.mark.parametrize("key", PAYLOADS[:2])
def test_continuation_keeps_crafted_state(key):
    cfg = Cfg()
    setattr(cfg, key, 3.0)

    def f(x):
        y = x * getattr(cfg, key)
        torch._dynamo.graph_break() if hasattr(torch, "_dynamo") else print(end="")
        return y + getattr(cfg, key)
    compiled = ember.compile(f, backend="eager")
    torch.testing.assert_close(compiled(_x()), f(_x()))


# -- the helper itself ---------------------------------------------------------------------------------------------
class EvilStr(str):
    def __repr__(self):
        return f"__import__('sys').modules.setdefault({MARK!r}, 1)"


class Color(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize("v", [1, -0.0, 1e308, 5e-324, True, None, "a'b\"c\n", b"\x00'", (1, (2.5, "x")), 2**80])
def test_literals_read_back_exactly(v):
    lit = emit.py_literal(v)
    assert lit is not None
    back = eval(lit, {"__builtins__": {}})     # noqa: S307 - the point of the test
    assert type(back) is type(v) and back == v and repr(back) == repr(v)


@pytest.mark.parametrize("v", [math.nan, math.inf, -math.inf, EvilStr("x"), Color.RED, (1, math.nan), object(),
                               1.0 + 2j])
def test_no_literal_where_none_reads_back(v):
    assert emit.py_literal(v) is None


def test_names_and_strings():
    assert emit.attr("o", "ok_name") == "o.ok_name"
    for bad in ["weird-attr", "class", "ﬁ", "a b", "", "0x", payload()]:
        out = emit.attr("o", bad)
        assert out.startswith("getattr(o, ")
        assert eval(out, {"o": type("O", (), {bad: 42})()}) == 42   # noqa: S307
    assert emit.py_str(EvilStr("x")) == "'x'"
    with pytest.raises(ValueError):
        emit.py_name("a or b")
    assert emit.c_name("a-b.c ﬁ") == "a_b_c__" and emit.c_name("9x")[0] == "v"


# -- codegen: the Python wrapper, C++, Triton -----------------------------------------------------------------------
def test_wrapper_arguments_never_pasted():
    """Extern arguments reach the wrapper as values; a str subclass or an IntEnum goes in bound, not by repr."""
    from ember.codegen.wrapper import _Writer
    w = _Writer.__new__(_Writer)
    w.globals = {}
    for v in [EvilStr("reflect"), Color.RED, math.nan, {EvilStr("k"): 1}, [Color.RED, "ok"]]:
        src = w.arg(v)
        assert MARK not in src and "<" not in src
        back = eval(src, dict(w.globals))     # noqa: S307
        assert back == v or (isinstance(v, float) and math.isnan(back))
        assert type(back) is type(v)


@pytest.mark.parametrize("cpu_backend", ["cpp", "python", "triton"])
def test_kernel_constants_from_user_values(cpu_backend):
    """nan, inf, -0.0, huge and tiny floats and ints from the program reach the kernel sources as exact constants."""
    consts = [math.nan, math.inf, -math.inf, -0.0, 1e38, 1e-45, 2**31 + 7]

    def f(x):
        y = x
        for c in consts:
            y = torch.where(x > 0, y + c, y * 0.5)
        return y, torch.full_like(x, math.inf) - x, x.clamp(min=-math.inf, max=1e30)
    compiled = ember.compile(f, options={"cpu_backend": cpu_backend})
    x = torch.randn(8)
    for got, want in zip(compiled(x), f(x)):
        torch.testing.assert_close(got, want, equal_nan=True)


# -- capture: parameter names that look like ember's own generated names ----------------------------------------
def _dunder_params(__entries, __MISS=1.0, *, __s0=2.0):
    return __entries * __s0 + __MISS


def _dunder_method_params(self, __out):
    return __out + 1


def test_parameters_named_like_generated_names():
    """The dispatcher, guards and glue name their own locals ``__entries``, ``__MISS``, ``__s0``, ``__out``...:
    a parameter with such a name shadowed them (TypeError: 'Tensor' object is not callable, or a wrong
    result). Such a function runs in the concrete interpreter instead; the result equals eager."""
    compiled = ember.compile(_dunder_params, backend="eager")
    for seed in range(3):
        x = _x(seed)
        torch.testing.assert_close(compiled(x), _dunder_params(x))
        torch.testing.assert_close(compiled(x, 3.0, __s0=4.0), _dunder_params(x, 3.0, __s0=4.0))

    class M(torch.nn.Module):
        forward = _dunder_method_params
    m = M()
    torch.testing.assert_close(ember.compile(m, backend="eager")(_x()), m(_x()))
