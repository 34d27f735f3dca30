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


# -- .item() / float(t) under fullgraph=True --------------------------------------------------------------
# torch.compile turns capture_scalar_outputs on under fullgraph=True (a break would be an error there), so
# Dynamo's tests compile these with nopython=True; ember refused them. float(t) also missed Tensor.__float__
# (the builtin float() of a tensor fell to "creating a float object"), so it broke even with the option on.
def _int_item_returned(x):
    return x.max().int().item()


def _int_item_scales(x):
    return x * x.max().int().item()


def _float_item(x):
    return x * x.sum().item() + 1


def _float_builtin(x):
    return x * float(x.sum())


def _float_builtin_of_0dim(x):
    s = x[0]
    return x - float(s) * 2


def _int_builtin_of_int_tensor(x):
    return x + int(x.long().sum())


_ITEMS = [_int_item_returned, _int_item_scales, _float_item, _float_builtin, _float_builtin_of_0dim,
          _int_builtin_of_int_tensor]


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize("fn", _ITEMS, ids=lambda f: f.__name__)
def test_item_and_float_of_tensor(fresh_ember, fn, fullgraph):
    cfn = ember.compile(fn, backend="eager", fullgraph=fullgraph)
    for _ in range(3):          # fresh values each call: the number is read when the graph runs
        x = torch.randn(5) * 4
        got, want = cfn(x), fn(x)
        assert type(got) is type(want)
        torch.testing.assert_close(got, want)


def test_float_builtin_captured_with_option(fresh_ember):
    cfn = ember.compile(_float_builtin, backend="eager", fullgraph=True,
                        options={"capture_scalar_outputs": True})
    x = torch.randn(5)
    torch.testing.assert_close(cfn(x), _float_builtin(x))


# .item() inside a function given to torch.func.vmap raises vmap's RuntimeError in eager. With the float read
# captured (option on, or fullgraph=True now), ember computed a result instead: its float path records no item
# node for vmap to refuse at run time.
def _vmap_float_item(x):
    return torch.func.vmap(lambda a: a * a.sum().item())(x)


def _vmap_int_item(x):
    return torch.func.vmap(lambda a: a * a.long().sum().item())(x)


def _vmap_float_builtin(x):
    return torch.func.vmap(lambda a: a * float(a[0]))(x)


@pytest.mark.parametrize("kw", [{"options": {"capture_scalar_outputs": True}}, {"fullgraph": True}, {}],
                         ids=["option_on", "fullgraph", "default"])
@pytest.mark.parametrize("fn", [_vmap_float_item, _vmap_int_item, _vmap_float_builtin], ids=lambda f: f.__name__)
def test_item_inside_vmap_raises_as_eager(fresh_ember, fn, kw):
    x = torch.randn(3, 2)
    with pytest.raises(RuntimeError, match="vmap: It looks like you're calling .item"):
        fn(x)
    expected = ember.Unsupported if kw.get("fullgraph") else RuntimeError
    with pytest.raises(expected, match=r"vmap: It looks like you're calling \.item"):
        ember.compile(fn, backend="eager", **kw)(x)


# -- closures from torch's Python modules ------------------------------------------------------------------
# torch.nn.modules.utils._pair is _ntuple(2)'s closure ``parse``. Every Python function of torch's Python
# modules was recorded as a graph node by module and __name__, and the graph's code then failed with
# "module 'torch.nn.modules.utils' has no attribute 'parse'". A function its module does not name is now traced.
from torch.nn.modules import utils as _nn_utils  # noqa: E402


def _pair_of_size(x):
    return torch.zeros(_nn_utils._pair(x.size())) + x


def _ntuple_made_inside(x):
    return x + torch.ones(_nn_utils._ntuple(3)(2)).sum()


def _single_triple_quadruple(x):
    return x * (sum(_nn_utils._single(2)) + sum(_nn_utils._triple(1)) + len(_nn_utils._quadruple(x.shape[0])))


def _pair_in_module_init(x):
    conv = torch.nn.Conv2d(1, 1, 3)      # its __init__ calls _pair
    return torch.tensor(conv.kernel_size + conv.stride, dtype=x.dtype).sum() + x


_TORCH_CLOSURES = [_pair_of_size, _ntuple_made_inside, _single_triple_quadruple, _pair_in_module_init]


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fn", _TORCH_CLOSURES, ids=lambda f: f.__name__)
def test_torch_module_closures_are_traced(fresh_ember, fn, backend, dynamic):
    cfn = ember.compile(fn, backend=backend, dynamic=dynamic)
    for n in (4, 5):
        x = torch.randn(n, n)
        torch.testing.assert_close(cfn(x), fn(x))


# -- slices with tensor bounds ------------------------------------------------------------------------------
# slice(t, None) called as a builtin was "creating a slice object" (a graph break); the object then reached the
# resumed trace (or came in as an argument) as a constant, and the graph's code named its tensor: NameError
# 'int64' when the graph ran (peer test_repros::test_slicing_dynamic_shape_setitem).
def _builtin_slice_setitem(n, y, s):
    y[(3, slice(n[3], None, None))] = 0
    return y * 2


def _builtin_slice_forms(n, y, s):
    return y[slice(2)].sum(0) + y[slice(1, 3)].sum(0) + y[slice(0, 6, 2)].sum(0) + y[slice(n[0], None)]


def _slice_argument_setitem(n, y, s):
    y[2, s] = -1.0
    return y + 1


def _slice_argument_getitem_const_bound(n, y, s):
    return y[:, slice(s.start.item(), None)].sum() + y


def _slice_made_before_break(n, y, s):
    sl = slice(n[1], None)
    torch._dynamo.graph_break()
    y[0, sl] = 3.0
    return y


_SLICES = [_builtin_slice_setitem, _builtin_slice_forms, _slice_argument_setitem, _slice_argument_getitem_const_bound,
           _slice_made_before_break]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fn", _SLICES, ids=lambda f: f.__name__)
def test_slices_with_tensor_bounds(fresh_ember, fn, backend):
    cfn = ember.compile(fn, backend=backend)
    for v in (2, 4, 2):
        n = torch.full((6,), v, dtype=torch.int64)
        s = slice(torch.tensor(v), None)
        y = torch.randn(6, 8)
        y1, y2 = y.clone(), y.clone()
        torch.testing.assert_close(cfn(n, y2, s), fn(n, y1, s))
        torch.testing.assert_close(y2, y1)


# -- subscripted typing forms ------------------------------------------------------------------------------
# An annotation such as ``y: typing.List[Variable]`` on a nested function is evaluated when the def runs;
# indexing typing.List / Optional / Union / Callable was "indexing typing.List" (a graph break, an error
# under fullgraph; peer test_misc::test_function_annotation). Subscripting them is pure: the real alias.
import typing  # noqa: E402


class _Variable:
    pass


# (this file has ``from __future__ import annotations``: the subscripts are written out, as the def would run them)
def _list_of_class(x):
    return x + 1, typing.List[_Variable]


def _closure_class_maker():
    class Local:        # a class the compiled function reaches through a closure cell (as in the peer test)
        pass

    def _list_of_closure_class(x):
        alias = typing.List[Local]
        return x + 1, alias.__args__[0] is Local
    return _list_of_closure_class


_list_of_closure_class = _closure_class_maker()


def _optional_dict_union(x):
    return x * 2, (typing.Optional[typing.Dict[str, int]], typing.Union[int, _Variable])


def _callable_and_tuple(x):
    return x - 1, (typing.Callable[[int], int], typing.Tuple[int, ...])


def _builtin_generic_alias(x):
    alias = list[int]
    return x + len(alias.__args__), dict[str, typing.List[int]]


_TYPING = [_list_of_class, _list_of_closure_class, _optional_dict_union, _callable_and_tuple, _builtin_generic_alias]


@pytest.mark.parametrize("fn", _TYPING, ids=lambda f: f.__name__)
def test_typing_subscripts(fresh_ember, fn):
    cfn = ember.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(3)
    got, want = cfn(x), fn(x)
    if isinstance(want, tuple):
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
    else:
        torch.testing.assert_close(got, want)


# -- compiled functions inside compiled code ---------------------------------------------------------------
# Calling an ember.compile'd (or torch.compile'd) function from compiled code traced into the wrapper's own
# machinery: "calling RLock.__enter__ (a method written in C)", a graph break (an error under fullgraph; peer
# test_misc::test_nested_optimize*). As torch.compile does, the outer trace runs the original function, and
# compiling a compiled function compiles its original (the outer compiler wins).
def _nested_body(x):
    return torch.relu(torch.cos(x) + torch.sin(x))


def _chain_inner(x):
    return torch.sin(x) * 10


def _nested_cases():
    from torch._dynamo.testing import CompileCounter
    inner_cnt = CompileCounter()
    inner = ember.compile(_chain_inner, backend=inner_cnt, fullgraph=True)
    middle = ember.compile(lambda x: inner(x) + 1, backend=CompileCounter(), fullgraph=True)
    dyn_run = torch._dynamo.run()(_chain_inner)
    tc = torch.compile(_chain_inner, backend="eager")
    mod = torch.nn.Linear(4, 4)
    om = ember.compile(mod, backend="eager")
    return inner_cnt, {
        "compiled_callee": (lambda x: inner(x) * 2, lambda x: _chain_inner(x) * 2),
        "two_levels": (lambda x: torch.relu(middle(x)), lambda x: torch.relu(_chain_inner(x) + 1)),
        "dynamo_run_callee": (lambda x: dyn_run(x) - 1, lambda x: _chain_inner(x) - 1),
        "torch_compile_callee": (lambda x: tc(x) + x, lambda x: _chain_inner(x) + x),
        "compiled_module_callee": (lambda x: om(x).tanh(), lambda x: mod(x).tanh()),
    }


@pytest.mark.parametrize("name", ["compiled_callee", "two_levels", "dynamo_run_callee", "torch_compile_callee",
                                  "compiled_module_callee"])
def test_compiled_function_called_from_compiled_code(fresh_ember, name):
    from torch._dynamo.testing import CompileCounter
    inner_cnt, cases = _nested_cases()
    fn, ref = cases[name]
    outer = CompileCounter()
    cfn = ember.compile(fn, backend=outer, fullgraph=True)
    for _ in range(2):
        x = torch.randn(3, 4)
        torch.testing.assert_close(cfn(x), ref(x))
    assert outer.frame_count == 1            # one graph, the callee's work in it
    assert inner_cnt.frame_count == 0        # the callee's own compiler never ran


def test_compile_of_compiled_function_compiles_the_original(fresh_ember):
    from torch._dynamo.testing import CompileCounter
    c1, c2 = CompileCounter(), CompileCounter()
    fn1 = ember.compile(_nested_body, backend=c1, fullgraph=True)
    fn2 = ember.compile(fn1, backend=c2, fullgraph=True)
    x = torch.randn(4)
    torch.testing.assert_close(fn2(x), _nested_body(x))
    assert (c1.frame_count, c2.frame_count) == (0, 1)
    torch.testing.assert_close(fn1(x), _nested_body(x))     # the inner wrapper, called itself, still compiles
    assert c1.frame_count == 1


# -- type.__subclasses__() ---------------------------------------------------------------------------------
# C.__subclasses__() was "call to C.__subclasses__ is not supported" (peer test_misc::
# test_builtin_subclasses_as_method_*). It is the live set of subclasses: compiled code must see classes made
# after the first call (a guard on the answer), not a stale list.
class _Base:
    def tag(self):
        return 1


class _Child(_Base):
    def tag(self):
        return 2


def _count_subclasses(x):
    return x + len(_Base.__subclasses__())


def _subclass_of_subclass(x):
    subs = _Base.__subclasses__()
    return x * len(subs[0].__subclasses__()), [c.__name__ for c in subs]


def _call_through_subclass(x):
    return x + _Base.__subclasses__()[0]().tag()


@pytest.mark.parametrize("fn", [_count_subclasses, _subclass_of_subclass, _call_through_subclass],
                         ids=lambda f: f.__name__)
def test_type_subclasses(fresh_ember, fn):
    cfn = ember.compile(fn, backend="eager", fullgraph=True)
    made = []
    for step in range(3):
        x = torch.randn(3)
        got, want = cfn(x), fn(x)
        if isinstance(want, tuple):
            torch.testing.assert_close(got[0], want[0])
            assert got[1] == want[1]
        else:
            torch.testing.assert_close(got, want)
        made.append(type(f"_Made{step}", (_Child if step % 2 else _Base,), {}))   # the answer changes
