"""Reproducers from PyTorch's Dynamo test files run against ember, fifth batch, continued (issue 32, tools/peer
on test_misc / test_functions): NumPy interop, iterators of constants, container-subclass attributes and
scalar conversions; each compiled and compared with eager on fresh inputs."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch

import ember


# -- true division of integer NumPy arrays -------------------------------------------------------------------
# NumPy divides integers (and bools) in float64; torch._numpy, which the graph runs for NumPy code, gives the
# default dtype (float32): t.numpy() / 4 came back float32, rounding large integers (a silent wrong result).
def _div_by_int(t):
    return t.numpy() / 4


def _int_by_array(t):
    return 3 / (t.numpy() + 1)


def _array_by_array(t):
    a = t.numpy()
    return a / (a * 0 + 7), np.true_divide(a, 3), np.divide(a, a + 1)


def _big_ints(t):
    return (t.numpy() + 2**40 + 1) / 1


def _mean_over_len(t):
    a = t.numpy()
    return a.sum() / len(a)


_INT_DIVISION = [_div_by_int, _int_by_array, _array_by_array, _big_ints, _mean_over_len]


@pytest.mark.parametrize("fn", _INT_DIVISION, ids=lambda f: f.__name__)
def test_numpy_integer_true_division_is_float64(fn):
    t = torch.arange(12).reshape(3, 4)
    expected = fn(t)
    got = ember.compile(fn, backend="eager", fullgraph=True)(t)
    for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        assert np.asarray(g).dtype == np.asarray(e).dtype == np.float64
        np.testing.assert_array_equal(g, e)


# -- NumPy arrays given as inputs ----------------------------------------------------------------------------
# An array made from a tensor in the trace (t.numpy()) was traced as tensor code, but an array passed in was
# an opaque object: ``x.size + x``, ``1 + x`` and ``x.sum()`` raised or broke the graph (fullgraph compiles
# failed: test_misc's test_numpy_size_attr, test_numpy_ndarray_works_with_builtin_function). An input array
# is now the tensor torch.from_numpy(x) (same memory) in the graph, guarded like a tensor input.


def _np_size_plus(x, y):
    return x.size + x


def _np_reflected(x, y):
    return 1 - x, 2.5 * x, 3 * x


def _np_methods(x, y):
    return x.sum() / len(x), x.mean(axis=0), x.T.copy()


def _np_functions(x, y):
    return np.maximum(x, y), np.concatenate([x, y]), np.where(x > 0, x, y)


def _np_returns_input(x, y):
    return x, y[0]


def _np_to_tensor_and_back(x, y):
    t = torch.from_numpy(x)
    return (t * 2).numpy(), np.add(y, 1)


def _np_in_place(x, y):
    x += 1              # writes the caller's array (a graph break in ember)
    return x * y


_NP_INPUTS = [_np_size_plus, _np_reflected, _np_methods, _np_functions, _np_returns_input, _np_to_tensor_and_back,
              _np_in_place]


def _np_eq(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for p, q in zip(a, b):
            _np_eq(p, q)
        return
    assert type(a) is type(b), (type(a), type(b))
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)     # (reduction order)
    assert np.asarray(a).dtype == np.asarray(b).dtype


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("fn", _NP_INPUTS, ids=lambda f: f.__name__)
def test_numpy_array_inputs(fn, dtype):
    rng = np.random.default_rng(0)
    compiled = ember.compile(fn, backend="eager", fullgraph=fn is not _np_in_place)
    for _ in range(2):
        x = (rng.standard_normal((3, 4)) * 4).astype(dtype)
        y = (rng.standard_normal((3, 4)) * 4).astype(dtype)
        xe, ye = x.copy(), y.copy()
        expected, got = fn(xe, ye), compiled(x, y)
        _np_eq(got, expected)
        np.testing.assert_array_equal(x, xe)        # the same writes to the inputs
        if fn is _np_returns_input:
            assert got[0] is x


def test_numpy_input_not_from_numpy_stays_correct():
    """Arrays torch.from_numpy refuses (read-only, negative strides, other dtypes) keep the old path."""
    def fn(a):
        return a * 2

    c = ember.compile(fn, backend="eager")
    for a in (np.broadcast_to(np.arange(3.0), (2, 3)), np.arange(6.0)[::-1], np.arange(4, dtype=np.uint16),
              np.float64(2.5) * np.ones(())):
        np.testing.assert_array_equal(c(a), fn(a))
        assert type(c(a)) is type(fn(a))


# -- __iter__ / __reversed__ called on a constant container ------------------------------------------------
# range(3).__iter__() ran the real method at trace time and kept the iterator it made as a constant; next()
# on that constant then broke the graph (test_misc's test_range___iter__). It is iter(range(3)): an iterator
# the trace advances.
def _range_dunder_iter(x):
    it = range(3).__iter__()
    return x + next(it) + next(it) * 10


def _tuple_dunder_iter(x):
    it = (4, 5, 6).__iter__()
    next(it)
    return x * next(it)


def _str_dunder_iter(x):
    return x + len(list("abc".__iter__()))


def _range_dunder_reversed(x):
    it = range(1, 4).__reversed__()
    return x + next(it) - next(it)


def _dunder_iter_in_loop(x):
    for i in range(2, 5).__iter__():
        x = x * i
    return x


_CONST_DUNDER_ITER = [_range_dunder_iter, _tuple_dunder_iter, _str_dunder_iter, _range_dunder_reversed,
                      _dunder_iter_in_loop]


@pytest.mark.parametrize("fn", _CONST_DUNDER_ITER, ids=lambda f: f.__name__)
def test_dunder_iter_on_constant(fn):
    x = torch.randn(3)
    torch.testing.assert_close(ember.compile(fn, backend="eager", fullgraph=True)(x), fn(x))


# -- attributes of dict/list/set-subclass objects passed in -------------------------------------------------
# For a container-subclass input (an OrderedDict subclass such as transformers' ModelOutput), ``o.__dict__``
# was a bound-method stand-in (item assignment and iteration on it broke the graph: test_misc's
# test_mutable_mapping_* tests), ``o.attr = v`` broke the graph, and a property defined by the class was not
# run: ``o.value`` came back as the real object's attribute read after the call, so a property reading a value
# the trace had just written gave the old one (a silent wrong result).


class _Mapping(OrderedDict):
    pass


class _WithProperty(dict):
    def __init__(self):
        super().__init__()
        self.__dict__["_value"] = 0

    @property
    def value(self):
        return self.__dict__.get("_value", 0)

    @value.setter
    def value(self, v):
        self.__dict__["_value"] = v

    def doubled(self):
        return self.value * 2


class _Items(list):
    scale = 3


def _write_through_dict(m, x):
    m.__dict__["custom"] = 42
    return x + m.__dict__["custom"]


def _lazy_init(m, x):
    if not hasattr(m, "_cache"):
        m.__dict__["_cache"] = {}
    m.__dict__["_cache"]["key"] = x.sum()
    return x * len(m.__dict__)


def _dict_then_attribute(m, x):
    m.__dict__["a"] = 1
    m.b = m.a + 1
    return x * m.b, len(m.__dict__)


def _property_after_write(m, x):
    m.value = 100
    return x + m.value + m.doubled()


def _attribute_then_delete(m, x):
    m.flag = 5
    y = x * m.flag
    del m.flag
    return y, hasattr(m, "flag")


def _class_attribute(m, x):
    return x * m.scale


_CONTAINER_ATTRS = [(_write_through_dict, _Mapping), (_lazy_init, _Mapping), (_dict_then_attribute, _Mapping),
                    (_property_after_write, _WithProperty), (_attribute_then_delete, _WithProperty),
                    (_class_attribute, _Items), (_dict_then_attribute, _Items)]


@pytest.mark.parametrize("fn,cls", _CONTAINER_ATTRS, ids=lambda v: v.__name__)
def test_container_subclass_attributes(fn, cls):
    compiled = ember.compile(fn, backend="eager", fullgraph=True)
    for _ in range(2):
        x = torch.randn(3)
        m_eager, m_comp = cls(), cls()
        expected, got = fn(m_eager, x), compiled(m_comp, x)
        torch.testing.assert_close(got, expected)
        assert {k: v for k, v in vars(m_comp).items() if k != "_cache"} == \
            {k: v for k, v in vars(m_eager).items() if k != "_cache"}
        assert vars(m_comp).keys() == vars(m_eager).keys()


# -- float() of a one-element integer or bool tensor ----------------------------------------------------------
# With capture_scalar_outputs (on under fullgraph=True) float(t) of a floating tensor stayed in the graph, but
# of an integer or bool tensor it broke the graph (test_functions' test_cast_tensor_single_elem).
def _float_of_int(x):
    return float(x + 1)


def _float_of_bool(x):
    return float(x > 0) + 0.5


def _float_of_big_int(x):
    return float(x * 0 + 2**60 + 1)


def _float_in_arithmetic(x):
    return x.float() * float(x.sum())


@pytest.mark.parametrize("fn", [_float_of_int, _float_of_bool, _float_of_big_int, _float_in_arithmetic],
                         ids=lambda f: f.__name__)
def test_float_of_integer_tensor_fullgraph(fn):
    for v in (3, -2, 0):
        x = torch.tensor([v])
        got, expected = ember.compile(fn, backend="eager", fullgraph=True)(x), fn(x)
        assert type(got) is type(expected)
        torch.testing.assert_close(got, expected)


# -- torch.unique_consecutive: a data-dependent output size like unique -------------------------------------
# unique had an unbacked output size under capture_dynamic_output_shape_ops (on under fullgraph=True), but
# unique_consecutive broke the graph as an op with a data-dependent output (test_misc's
# test_unique_consecutive).
def _uc_values(x):
    return torch.unique_consecutive(x) * 2 + 1


def _uc_inverse_counts(x):
    v, inv, counts = torch.unique_consecutive(x, return_inverse=True, return_counts=True)
    return v, inv, counts.sum()


def _uc_method_positional(x):
    return x.unique_consecutive(True)


def _uc_dim(x):
    return torch.unique_consecutive(x.reshape(-1, 2), dim=0, return_counts=True)


@pytest.mark.parametrize("fn", [_uc_values, _uc_inverse_counts, _uc_method_positional, _uc_dim],
                         ids=lambda f: f.__name__)
def test_unique_consecutive_fullgraph(fn):
    compiled = ember.compile(fn, backend="eager", fullgraph=True)
    for x in (torch.tensor([1, 1, 2, 2, 1, 3]), torch.tensor([5, 5, 5, 5]), torch.randint(0, 3, (8,))):
        torch.testing.assert_close(compiled(x), fn(x))
