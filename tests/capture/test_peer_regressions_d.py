"""Reproducers from PyTorch's Dynamo test files run against ember, fourth batch (issue 32, tools/peer on
test_misc / test_repros / test_functions): each compiled and compared with eager on fresh inputs."""
from __future__ import annotations

import pytest
import torch

import ember


# -- isinstance decided by the metaclass from the instance ------------------------------------------------
# isinstance(v, C) calls type(C).__instancecheck__(C, v) unless type(v) is C. torch.FloatTensor and kin answer
# from the tensor's dtype/device/layout; a user metaclass may read the instance's attributes. Answering with
# issubclass(type(v), C) gave False for all of these (a wrong branch taken silently).
class _TagMeta(type):
    def __instancecheck__(cls, inst):
        return getattr(inst, "tag", 0) == 1


class _Tagged(metaclass=_TagMeta):
    pass


class _Obj:
    pass


def _legacy_float(x, o):
    return x + 1 if isinstance(x, torch.FloatTensor) else x - 1


def _legacy_double(x, o):
    return x + 1 if isinstance(x, torch.DoubleTensor) else x - 1


def _legacy_in_tuple(x, o):
    return x * 2 if isinstance(x, (torch.LongTensor, torch.FloatTensor)) else x * 3


def _legacy_cuda_type_on_cpu(x, o):
    return x + 1 if isinstance(x, torch.cuda.FloatTensor) else x - 1


def _legacy_of_new_tensor(x, o):
    y = x.to(torch.float64)
    return y + 1 if isinstance(y, torch.DoubleTensor) else y - 1


def _metaclass_reads_instance(x, o):
    return x + 1 if isinstance(o, _Tagged) else x - 1


def _metaclass_on_tensor(x, o):
    return x + 1 if isinstance(x, _Tagged) else x - 1


_ISINSTANCE = [_legacy_float, _legacy_double, _legacy_in_tuple, _legacy_cuda_type_on_cpu, _legacy_of_new_tensor,
               _metaclass_reads_instance, _metaclass_on_tensor]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", _ISINSTANCE, ids=lambda f: f.__name__)
def test_isinstance_metaclass_instancecheck(fresh_ember, fn, dtype):
    cfn = ember.compile(fn, backend="eager")
    for tag in (1, 2, 1):           # the instance's attribute is guarded: a change reruns the check
        o = _Obj()
        o.tag = tag
        x = torch.randn(4, dtype=dtype)
        torch.testing.assert_close(cfn(x, o), fn(x, o))


# -- a compile keeps nothing of the call alive ------------------------------------------------------------
# The trace's domain and its frames form reference cycles that held the call's arguments (by id, and as graph
# inputs): after the call, a tensor or module the caller dropped stayed alive until the cycle collector ran.
# Eager frees it at once; so must a compiled call (weakref dead right after ``del``, no gc.collect()).
class _Box:
    def __init__(self, t):
        self.t = t


def _arg_tensor(x):
    return x, (lambda a: a + a)


def _arg_module(x):
    m = torch.nn.Linear(4, 4)
    return m, (lambda m: m(x) * 2)


def _arg_list(x):
    return [x, x + 1], (lambda xs: xs[0] * xs[1])


def _arg_object(x):
    return _Box(x), (lambda b: b.t.sin())


def _with_break(x):
    def fn(a):
        y = a * 2
        print("", end="")       # a graph break: the frame is traced twice
        return y + 1
    return x, fn


def _break_in_callee(x):
    def inner(a):
        torch._dynamo.graph_break()
        return a.cos()

    def fn(a):
        return inner(a * 2) + 1
    return x, fn


_RELEASE = [_arg_tensor, _arg_module, _arg_list, _arg_object, _with_break, _break_in_callee]


@pytest.mark.parametrize("backend", ["eager", "counter"])
@pytest.mark.parametrize("case", _RELEASE, ids=lambda f: f.__name__)
def test_compiled_call_keeps_no_argument_alive(fresh_ember, case, backend):
    import gc
    import weakref
    from torch._dynamo.testing import CompileCounter
    x = torch.randn(4)
    arg, fn = case(x)
    cfn = ember.compile(fn, backend=CompileCounter() if backend == "counter" else "eager")
    ref = weakref.ref(arg if not isinstance(arg, list) else arg[0])
    gc.disable()
    try:
        cfn(arg)
        del arg, x
        assert ref() is None
    finally:
        gc.enable()
