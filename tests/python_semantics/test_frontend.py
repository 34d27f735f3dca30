"""The torch-free compile path on functions it must not trace as plain functions, and its fallback."""
from __future__ import annotations

import pytest

from ember.capture import compile_python
from ember.errors import Unsupported


def numbers(n):
    for i in range(n):
        yield i * i


def test_generator_function_runs_natively():
    g = compile_python(numbers)
    assert list(g(4)) == [0, 1, 4, 9]
    with pytest.raises(Unsupported, match="generator"):
        compile_python(numbers, fullgraph=True)(4)


async def coro(x):
    return x


def test_coroutine_function_runs_natively():
    c = compile_python(coro)(3)
    try:
        c.send(None)
    except StopIteration as e:
        assert e.value == 3
    else:
        raise AssertionError("the coroutine did not finish")


SHADOWED_SUPER = '''
class A:
    def m(self):
        return "A"

class B(A):
    def m(self):
        return "B" + super().m()

def call_m():
    return B().m()
'''


class _Fake:
    m = staticmethod(lambda: "-fake")


@pytest.mark.parametrize("shadow", [False, True])
def test_super_attribute_with_super_shadowed_at_run_time(shadow):
    """3.12+ compiles `super().m` to LOAD_SUPER_ATTR, which must call a `super` global that replaced the
    builtin after compilation (the compiler only sees that it is not shadowed statically)."""
    from ember.capture import run_concrete
    ns: dict = {}
    exec(compile(SHADOWED_SUPER, "<shadowed super>", "exec"), ns)     # noqa: S102 - the test's own snippet
    if shadow:
        ns["super"] = lambda *a: _Fake()
    fn = ns["call_m"]
    expected = fn()
    assert expected == ("B-fake" if shadow else "BA")
    assert run_concrete(fn) == expected
    assert compile_python(fn)() == expected
