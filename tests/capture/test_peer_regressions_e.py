"""Reproducers from PyTorch's Dynamo test files run against ember, fifth batch (issue 32, tools/peer on
test_misc / test_repros / test_functions): each compiled and compared with eager on fresh inputs."""
from __future__ import annotations

import typing

import pytest
import torch

import ember


# -- attribute writes through a data descriptor ------------------------------------------------------------
# CPython's generic setattr hands ``obj.name = v`` to the class attribute's ``__set__`` (``del`` to its
# ``__delete__``) whenever its type defines one, with or without ``__get__``. ember wrote a descriptor that has
# no ``__get__`` into the instance ``__dict__`` in the trace (the read after it saw the raw value, and the
# replay called ``__set__`` later), and refused every other Python descriptor.
class _SetOnly:
    """A descriptor with ``__set__`` and no ``__get__``: reads go to the instance ``__dict__``."""

    def __set__(self, obj, value):
        obj.__dict__["field"] = obj.__dict__.get("field", 0) + value * 2


class _Full:
    def __get__(self, obj, owner=None):
        return self if obj is None else obj.__dict__.get("_v", -1) * 10

    def __set__(self, obj, value):
        obj.__dict__["_v"] = value + 1

    def __delete__(self, obj):
        obj.__dict__.pop("_v", None)


class _Holder:
    field = _SetOnly()
    full = _Full()

    def __init__(self):
        self.__dict__["field"] = 0


def _set_only(x, o):
    o.field = 10
    return x + o.field


def _set_twice(x, o):
    o.field = 1
    o.field = 2
    return x * o.field


def _full_set_get(x, o):
    o.full = 3
    return x + o.full


def _full_delete(x, o):
    o.full = 3
    del o.full
    return x + o.full


def _new_object_through_descriptor(x, o):
    h = _Holder()
    h.full = 5
    h.field = 1
    return x + h.full + h.field, h.__dict__


_DESCRIPTOR = [_set_only, _set_twice, _full_set_get, _full_delete, _new_object_through_descriptor]


def _state(o):
    return dict(o.__dict__)


@pytest.mark.parametrize("fn", _DESCRIPTOR, ids=lambda f: f.__name__)
def test_setattr_through_data_descriptor(fn):
    x = torch.randn(3)
    o_eager, o_comp = _Holder(), _Holder()
    expected = fn(x, o_eager)
    got = ember.compile(fn, backend="eager", fullgraph=True)(x, o_comp)
    torch.testing.assert_close(got, expected)
    assert _state(o_comp) == _state(o_eager)


# -- a tuple made in the trace is one object wherever it goes ----------------------------------------------
# The glue rebuilt a tuple made in the trace at every place it was stored (the stack and a local at a graph
# break, two slots of the result), so ``a is b`` failed and an attribute set on one copy of a tuple subclass
# with a ``__dict__`` (a subclass of a NamedTuple) was lost from the other.
class _NT(typing.NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


class _NTWithDict(_NT):
    pass


def _attr_after_break(x):
    t = _NTWithDict(x + 1, x)
    t.c = x * 3                 # ember breaks the graph on this write: the glue hands t to the native step
    return t, t.c


def _same_tuple_twice(x):
    t = (x + 1, x)
    return t, t


def _same_namedtuple_in_list(x):
    t = _NT(x + 1, x - 1)
    return [t, t], t


def _tuple_in_dict_and_result(x):
    t = (x.sin(),)
    return {"k": t}, t


_IDENTITY = [_attr_after_break, _same_tuple_twice, _same_namedtuple_in_list, _tuple_in_dict_and_result]


def _shape_of(r):
    """The identity structure of a result: for each pair of tuples in it, whether they are one object."""
    seen = []

    def walk(v):
        if isinstance(v, tuple):
            seen.append(v)
        if isinstance(v, (list, tuple)):
            for i in v:
                walk(i)
        elif isinstance(v, dict):
            for i in v.values():
                walk(i)

    walk(r)
    return [[a is b for b in seen] for a in seen]


@pytest.mark.parametrize("fn", _IDENTITY, ids=lambda f: f.__name__)
def test_tuple_identity_kept(fn):
    x = torch.randn(4)
    expected = fn(x)
    got = ember.compile(fn, backend="eager")(x)
    torch.testing.assert_close(got, expected)
    assert _shape_of(got) == _shape_of(expected)
    if fn is _attr_after_break:
        assert got[0].__dict__.keys() == expected[0].__dict__.keys()
        torch.testing.assert_close(got[0].c, expected[0].c)


# -- builtin min/max over one-element tensors --------------------------------------------------------------
# max(a, b) on tensors compares them and takes the truth of a tensor: a graph break (test_functions'
# test_min_max; a fullgraph compile failed). Each step is now torch.where(x > best, x, best) in the graph:
# the first of equal candidates wins and a NaN never replaces the best, as in Python.
def _max_two(a, b):
    return max(a.sum(), b.sum()) * 2


def _min_two(a, b):
    return min(a.sum(), b.sum()) - 1


def _clamp_by_numbers(a, b):
    s, t = a.sum(), b.sum()
    s = min(max(s, 0), 1)
    t = max(0, min(1, t))
    return max(s, t) - min(s, t) + a


def _over_a_list(a, b):
    return max([a.sum(), b.sum(), a.mean(), 0.5]) + min((a.max(), b.min()))


def _nan_keeps_first(a, b):
    n = a.sum() * float("nan")
    return max(a.sum(), n), max(n, a.sum()), min(n, b.sum())


def _ties_keep_first(a, b):
    s = a.sum()
    return max(s, s.clone()) + min(b.sum(), b.sum().clone())


def _int_tensors(a, b):
    i, j = a.sum().round().long(), b.sum().round().long()
    return max(i, j, 0), min(i, -3), a * max(i, j)


def _with_grad(a, b):
    return max(a.sum() * 2, b.sum()) + min(a.sum(), b.sum())


_MINMAX = [_max_two, _min_two, _clamp_by_numbers, _over_a_list, _nan_keeps_first, _ties_keep_first, _int_tensors,
           _with_grad]


def _numbers_as_tensors(r):
    """Python picks a number candidate itself; the graph gives it as a tensor of the same value."""
    if isinstance(r, tuple):
        return tuple(_numbers_as_tensors(x) for x in r)
    return torch.tensor(r) if isinstance(r, (int, float)) else r


@pytest.mark.parametrize("fn", _MINMAX, ids=lambda f: f.__name__)
def test_builtin_min_max_of_tensors(fn):
    torch.manual_seed(0)
    for _ in range(6):
        a = torch.randn(5, requires_grad=fn is _with_grad)
        b = torch.randn(5, requires_grad=fn is _with_grad)
        expected = fn(a, b)
        got = ember.compile(fn, backend="eager", fullgraph=True)(a, b)
        torch.testing.assert_close(_numbers_as_tensors(got), _numbers_as_tensors(expected), equal_nan=True)
        if fn is _with_grad:        # (an input no candidate chosen came from: eager's grad is None, the
            def grads(r):           # graph's where() gives zeros)
                g = torch.autograd.grad(r, (a, b), allow_unused=True)
                return [torch.zeros_like(a) if x is None else x for x in g]
            torch.testing.assert_close(grads(got), grads(expected))


def _mixed_shapes(a, b):
    return max(a.sum(), b.sum().reshape(1))       # the result's shape would depend on the data


def _mixed_dtypes(a, b):
    return max(a.sum(), b.sum().double())


def _key_given(a, b):
    return max(a.sum(), b.sum(), key=lambda t: -t)


@pytest.mark.parametrize("fn", [_mixed_shapes, _mixed_dtypes, _key_given], ids=lambda f: f.__name__)
def test_builtin_min_max_not_exact_still_correct(fn):
    """Where the choice would change the result's metadata, ember keeps Python's semantics (a graph break)."""
    a, b = torch.randn(5), torch.randn(5)
    expected = fn(a, b)
    got = ember.compile(fn, backend="eager")(a, b)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected)


# -- int() of a one-element floating tensor ----------------------------------------------------------------
# With capture_scalar_outputs (on under fullgraph=True) int(t) of an integer tensor was a symbolic int, but of
# a floating tensor a graph break: a fullgraph compile failed. It is t.trunc().to(int64)'s item now.
def _int_of_sum(x):
    return x * int(x.sum() * 3)


def _int_of_negative(x):
    return x + int(-x.abs().sum() - 0.5)


def _int_as_size(x):
    return torch.ones(int(x.abs().sum().clamp(max=4)) + 1)


def _int_of_half(x):
    return x + int(x.sum().half())


@pytest.mark.parametrize("fn", [_int_of_sum, _int_of_negative, _int_as_size, _int_of_half], ids=lambda f: f.__name__)
def test_int_of_float_tensor_fullgraph(fn):
    for _ in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(ember.compile(fn, backend="eager", fullgraph=True)(x), fn(x))


# -- attributes a custom autograd.Function reads off its class or a module are guarded ----------------------
# With an input that requires grad, Function.apply becomes one graph node whose forward/backward AOT autograd
# traces at compile time. The globals and closure cells the methods read were guarded, but not the attributes
# read off them (``Cls.scale``, ``cfg.factor``): after ``Cls.scale = 5`` the compiled code kept multiplying
# by the old value, in the forward and in the gradient.
class _Cfg:
    factor = 2.0


class _Inner:
    k = 2.0


class _ScaleInForward(torch.autograd.Function):
    scale = 2.0

    @staticmethod
    def forward(ctx, x):
        return x * _ScaleInForward.scale

    @staticmethod
    def backward(ctx, g):
        return g * _ScaleInForward.scale


class _ScaleThroughCtx(torch.autograd.Function):
    scale = 2.0

    @staticmethod
    def forward(ctx, x):
        ctx.s = _ScaleThroughCtx.scale
        return x * ctx.s

    @staticmethod
    def backward(ctx, g):
        return g * ctx.s


class _ScaleFromOtherClass(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x + _Cfg.factor

    @staticmethod
    def backward(ctx, g):
        return g * _Cfg.factor


class _ScaleChained(torch.autograd.Function):
    inner = _Inner

    @staticmethod
    def forward(ctx, x):
        return x * _ScaleChained.inner.k

    @staticmethod
    def backward(ctx, g):
        return g * _ScaleChained.inner.k


def _closure_function():
    holder = _Cfg

    class _FromClosure(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * holder.factor

        @staticmethod
        def backward(ctx, g):
            return g * holder.factor

    return _FromClosure


_FromClosure = _closure_function()


_AUTOGRAD_ATTRS = [(_ScaleInForward, _ScaleInForward, "scale"), (_ScaleThroughCtx, _ScaleThroughCtx, "scale"),
                   (_ScaleFromOtherClass, _Cfg, "factor"), (_ScaleChained, _Inner, "k"), (_FromClosure, _Cfg, "factor")]


@pytest.mark.parametrize("cls,owner,attr", _AUTOGRAD_ATTRS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_autograd_function_attribute_change_recompiles(cls, owner, attr):
    def fn(x):
        return cls.apply(x) * 3

    old = getattr(owner, attr)
    compiled = ember.compile(fn)
    try:
        for value in (2.0, 5.0, 2.0, -1.5):
            setattr(owner, attr, value)
            x = torch.randn(4, requires_grad=True)
            expected, got = fn(x), compiled(x)
            torch.testing.assert_close(got, expected)
            torch.testing.assert_close(torch.autograd.grad(got.sum(), x), torch.autograd.grad(expected.sum(), x))
    finally:
        setattr(owner, attr, old)


# -- a failed fullgraph compile does not keep the program's objects alive -----------------------------------
# The error a fullgraph=True compile raised kept, in its chained context (the UserException of the trace) and
# in reference cycles through its traceback's frames, the interpreter's values and so the call's arguments:
# with the error kept as unittest's assertRaises keeps it (its own traceback's frames cleared, the chain not),
# they stayed alive, and without the collector even when it was dropped.
class _Payload:
    pass


def _raises_in_trace(x, o):
    y = x + 1
    raise ValueError("boom")


def _reads_missing_attribute(x, o):
    return x + o.missing


def _bad_view(x, o):
    return x.view(7, 7)


def _branch_on_data(x, o):
    if x.sum() > 0:
        return x
    return -x


def _prints(x, o):
    print("side effect")
    return x + 1


_FAILING = [_raises_in_trace, _reads_missing_attribute, _bad_view, _branch_on_data, _prints]


@pytest.mark.parametrize("fn", _FAILING, ids=lambda f: f.__name__)
def test_failed_fullgraph_compile_frees_arguments(fn):
    import gc
    import unittest
    import weakref

    case = unittest.TestCase()
    compiled = ember.compile(fn, fullgraph=True)
    gc.collect()
    gc.disable()
    try:
        x, o = torch.randn(100), _Payload()
        refs = weakref.ref(x), weakref.ref(o)
        with case.assertRaises(Exception) as cm:      # keeps the error, clears only its own traceback
            compiled(x, o)
        del x, o
        alive = [r() is not None for r in refs]
        assert cm.exception is not None
        assert alive == [False, False]
    finally:
        gc.enable()


# -- struct sequences (torch.return_types) made in the trace ------------------------------------------------
# torch.return_types.max((values, indices)) and kin are C struct sequence types: calling one in compiled code
# broke the graph ("creating a max object ... is not supported"), and fullgraph compiles failed (test_misc's
# test_structseq1/2). Such a call is a tuple of that class holding the sequence's items.
def _structseq_returned(x, y):
    return torch.return_types.max((x + 1, y))


def _structseq_fields(x, y):
    r = torch.return_types.sort([x * 2, y])
    a, b = r
    return r.values + a, r.indices, b


def _structseq_to_tuple(x, y):
    return tuple(torch.return_types.qr((2 * x, y - 1)))


def _structseq_of_numbers(x, y):
    r = torch.return_types.max((3, 4))
    return x * r.values + r[1]


_STRUCTSEQ = [_structseq_returned, _structseq_fields, _structseq_to_tuple, _structseq_of_numbers]


@pytest.mark.parametrize("fn", _STRUCTSEQ, ids=lambda f: f.__name__)
def test_structseq_made_in_trace(fn):
    x, y = torch.randn(3, 2), torch.randn(3, 2)
    expected = fn(x, y)
    got = ember.compile(fn, backend="eager", fullgraph=True)(x, y)
    assert type(got) is type(expected)
    torch.testing.assert_close(tuple(got), tuple(expected))


def test_structseq_wrong_length_raises_as_eager():
    def fn(x):
        return torch.return_types.max((x, x, x))

    with pytest.raises(TypeError, match="2-sequence"):
        fn(torch.randn(2))
    with pytest.raises((TypeError, ember.Unsupported), match="2-sequence"):
        ember.compile(fn, backend="eager", fullgraph=True)(torch.randn(2))
    with pytest.raises(TypeError, match="2-sequence"):
        ember.compile(fn, backend="eager")(torch.randn(2))


# -- a NamedTuple class's own __getitem__ / __len__ / __iter__ ---------------------------------------------
# A NamedTuple subclass may define __getitem__ (index every field: test_misc's
# test_namedtuple_with_custom_getitem), __len__ or __iter__. ember ignored them in the trace (t[0] gave the
# first field: a wrong result), and its guards and glue read an input's items with t[i], which ran the
# override: the fresh entry rejected the call that built it (an InternalError).
class _Batch(typing.NamedTuple):
    a: torch.Tensor
    b: torch.Tensor

    def __getitem__(self, index):
        return _Batch(self.a[index], self.b[index])


class _Sized(typing.NamedTuple):
    a: torch.Tensor
    b: torch.Tensor

    def __len__(self):
        return 7


class _Reversed(typing.NamedTuple):
    a: torch.Tensor
    b: torch.Tensor

    def __iter__(self):
        return iter((self.b, self.a))


def _field_of_input(t, x):
    return t.a + x


def _index_input(t, x):
    return t[0], t[1:]


def _index_new(t, x):
    n = _Batch(x + 1, x * 2)
    return n[0].a + n[1].b


def _len_override(t, x):
    s = _Sized(x, x)
    return x * len(s)


def _iter_override(t, x):
    first, second = _Reversed(x + 1, x - 1)
    return first * 2 + second


def _sum_over_override(t, x):
    return sum(_Reversed(x, x * 3)) + len(t)


_TUPLE_OVERRIDES = [_field_of_input, _index_input, _index_new, _len_override, _iter_override, _sum_over_override]


def _plain(r, leaves):
    """The shape of a result (its tuples' classes, their stored items read without their __getitem__), its
    tensors appended to ``leaves``."""
    if isinstance(r, tuple):
        return f"{type(r).__name__}({', '.join(_plain(x, leaves) for x in tuple.__iter__(r))})"
    leaves.append(r)
    return type(r).__name__


@pytest.mark.parametrize("fn", _TUPLE_OVERRIDES, ids=lambda f: f.__name__)
def test_namedtuple_dunder_overrides(fn):
    compiled = ember.compile(fn, backend="eager", fullgraph=True)
    for _ in range(2):          # the second call runs the guards of the first entry
        t, x = _Batch(torch.randn(3), torch.randn(3)), torch.randn(3)
        expected, got = fn(t, x), compiled(t, x)
        le, lg = [], []
        assert _plain(got, lg) == _plain(expected, le)
        torch.testing.assert_close(lg, le)
