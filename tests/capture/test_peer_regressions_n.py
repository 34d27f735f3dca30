"""Capture fidelity found by the peer suites (issue 32): tensors with NumPy arrays, NumPy integer arguments under
automatic dynamic, and a second ``ember.compile`` of the same function. Differential: compiled == eager."""
import gc
import warnings
import weakref

import numpy as np
import pytest
import torch

import ember


def _same(a, b):
    if isinstance(a, tuple):
        return type(b) is tuple and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and torch.allclose(a, b)
    return type(a) is type(b) and a == b


def _outcome(fn, *args):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args), None
    except Exception as e:      # noqa: BLE001
        return None, type(e)


# -- 1. a tensor and a NumPy array in one operator ---------------------------------------------------------
_ARR = np.random.rand(3)

ARRAY_CASES = {     # name: (function of x (float32[3]), captured without a graph break)
    "add_made": (lambda x: x + np.ones(3), True),
    "mul_made": (lambda x: x * np.ones(3), True),
    "sub_float32": (lambda x: x - np.ones(3, dtype=np.float32) * 2, True),
    "div_int_array": (lambda x: x / np.arange(1, 4), True),
    "int_tensor_int_array": (lambda x: x.long() + np.arange(3), True),
    "zero_d_array": (lambda x: x + np.array(2.0), True),
    "broadcast": (lambda x: x.sin() + np.zeros((2, 3)), True),
    "global_array": (lambda x: x * _ARR, True),
    "traced_array": (lambda x: x + x.cos().numpy(), True),
    "reflected_div": (lambda x: np.ones(3) / x, True),
    "reflected_eq": (lambda x: np.ones(3) == x, True),
    "numpy_scalar": (lambda x: x + np.ones(3).sum(), True),
    "array_dtype": (lambda x: x.double() if np.ones(3).dtype == np.float64 else x, True),
    "traced_dtype": (lambda x: x.double() if x.numpy().dtype == np.float32 else x, True),
    # torch reads the NumPy scalar as a number (float32 result), a 0-d tensor would promote to float64: a break
    "int_tensor_numpy_scalar": (lambda x: x.long() + np.ones(3).sum(), False),
    # eager raises TypeError for these: so must the compiled call
    "reflected_add": (lambda x: np.ones(3) + x, False),
    "reflected_mul": (lambda x: np.ones(3) * x, False),
    "compare_lt": (lambda x: x < np.ones(3), False),
}


@pytest.mark.parametrize("name", list(ARRAY_CASES))
def test_tensor_with_array(name):
    fn, captured = ARRAY_CASES[name]
    ember.reset()
    cf = ember.compile(fn, backend="eager")
    for _ in range(2):
        x = torch.randn(3)
        (want, werr), (got, gerr) = _outcome(fn, x), _outcome(cf, x)
        assert werr == gerr, (werr, gerr)
        if werr is None:
            assert _same(want, got), (want, got)
    if captured:
        assert ember.stats()["graph_breaks"] == 0, ember.stats()


def test_tensor_with_array_argument():
    ember.reset()

    def f(x, a):
        return x * a, a - x.numpy()

    cf = ember.compile(f, backend="eager")
    for dt in (np.float64, np.float32, np.int64):
        x, a = torch.randn(3), np.arange(3).astype(dt)
        want, got = f(x, a), cf(x, a)
        assert _same(want[0], got[0]) and type(got[1]) is np.ndarray and np.allclose(want[1], got[1])
    assert ember.stats()["graph_breaks"] == 0, ember.stats()


# -- 2. NumPy integer arguments follow the int policy --------------------------------------------------------
INT_CASES = {   # name: (function of (x, i), input maker, most graphs for 8 values (None: correctness only))
    "add_int_tensor": (lambda x, i: x + i, lambda: torch.tensor([1, 2]), 2),
    "int32_tensor": (lambda x, i: x * i, lambda: torch.tensor([1, 2], dtype=torch.int32), 2),
    "truediv": (lambda x, i: x / i, lambda: torch.tensor([1, 2]), 2),
    "floordiv": (lambda x, i: x // i, lambda: torch.randn(3), 2),
    "float_tensor": (lambda x, i: x * i + 1, lambda: torch.randn(3), 2),
    "as_size": (lambda x, i: x.new_ones(i) * x.sum(), lambda: torch.randn(3), 2),
    "full": (lambda x, i: torch.full((i,), 2.0) + x.sum(), lambda: torch.randn(3), 2),
    "view": (lambda x, i: x.view(i, -1).sum(0).sum(), lambda: torch.arange(720.0), 2),
    "returned": (lambda x, i: (x + i, i), lambda: torch.randn(3), 2),
    "type_check": (lambda x, i: x + 1 if type(i) is np.int64 else x - 1, lambda: torch.randn(3), 2),
    "compared": (lambda x, i: (x + 1, i > 5) if i > 5 else (x - 1, i > 5), lambda: torch.randn(3), 3),
    # NumPy's own arithmetic: specialized (NumPy result types), never a different answer
    "numpy_arith": (lambda x, i: (x * (i * 2), i * 2, i / 4), lambda: torch.randn(3), None),
    "negated": (lambda x, i: x * -i, lambda: torch.randn(3), None),
    "item": (lambda x, i: (x + i.item(), i.item()), lambda: torch.randn(3), None),
}


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("name", list(INT_CASES))
def test_numpy_int_arguments(name, backend):
    fn, make, most = INT_CASES[name]
    ember.reset()
    cf = ember.compile(fn, backend=backend)
    for v in (2, 3, 4, 5, 6, 8, 9, 10):
        x = make()
        i = np.int64(v)
        assert _same(fn(x, i), cf(x, i)), v
    if most is not None:
        assert ember.stats()["graphs_compiled"] <= most, ember.stats()


def test_numpy_int_arguments_static():
    """``dynamic=False`` keeps specializing NumPy ints, as Python ints."""
    ember.reset()
    cf = ember.compile(lambda x, i: x + i, backend="eager", dynamic=False)
    for v in (2, 3, 4):
        assert _same(cf(torch.tensor([1]), np.int64(v)), torch.tensor([1]) + np.int64(v))
    assert ember.stats()["graphs_compiled"] == 3
