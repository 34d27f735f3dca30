"""Capture fidelity found by PyTorch's test_misc.py run through tools/peer (issue 32). Differential: each
program runs eagerly and compiled on the same arguments, call after call, and the results must agree."""
import dataclasses

import numpy as np
import pytest
import torch

import ember


class _Obj:
    pass


class _Mod(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.y1 = torch.ones(2)
        self.y2 = torch.zeros(2)


_O1, _O2 = _Obj(), _Obj()
_T1, _T2 = torch.ones(2), torch.zeros(2)
_GLOBAL_LIST = [_O1]
_GLOBAL_DICT = {_O1: 5}
_MOD = _Mod()


# -- 1. identity of the objects passed in: a trace that saw two distinct objects (or an id) holds only for
#       them. Each program takes (t, a, b); the calls alternate distinct and identical a, b.
IDENTITY_CASES = {
    "is": lambda t, a, b: t + 1 if a is b else t - 1,
    "is_not": lambda t, a, b: t + 1 if a is not b else t - 1,
    "default_eq": lambda t, a, b: t + 1 if a == b else t - 1,
    "default_ne": lambda t, a, b: t + 1 if a != b else t - 1,
    "in_new_list": lambda t, a, b: t + 1 if a in [b] else t - 1,
    "in_global_list": lambda t, a, b: t + 1 if a in _GLOBAL_LIST else t - 1,
    "global_dict_get": lambda t, a, b: t + _GLOBAL_DICT.get(a, 0),
    "new_dict_get": lambda t, a, b: t + {b: 3}.get(a, 0),
    "new_set_len": lambda t, a, b: t + len({a, b}),
    "id_eq": lambda t, a, b: t + (id(a) == id(b)),
    "id_of_arg": lambda t, a, b: t + 1 if id(a) == id(_O1) else t - 1,
    "id_vs_int_arg": lambda t, a, b: t * 0 if id(a) == b else t,
    "tensor_id": lambda t, a, b: t + 1 if id(_MOD.y1) == id(a) else t - 1,
}
_OBJ_CALLS = [(_O2, _O1), (_O1, _O1), (_O1, _O2), (_O2, _O2)]
_TENSOR_CALLS = [(_T1, _T2), (_T1, _T1), (_MOD.y1, _T1), (_T2, _T2)]


def _calls(name):
    if name == "id_vs_int_arg":
        return [(_O1, id(_O1)), (_O2, id(_O1)), (_O2, id(_O2))]
    if name == "tensor_id":
        return [(_MOD.y1, None), (_MOD.y2, None), (_MOD.y1, None)]
    return _OBJ_CALLS + (_TENSOR_CALLS if name in ("is", "is_not", "id_eq", "new_set_len") else [])


@pytest.mark.parametrize("name", list(IDENTITY_CASES))
def test_identity_of_arguments_is_guarded(name, fresh_ember):
    fn = IDENTITY_CASES[name]
    cfn = ember.compile(fn, backend="eager")
    t = torch.zeros(2)
    for a, b in _calls(name):
        torch.testing.assert_close(cfn(t, a, b), fn(t, a, b))


@pytest.mark.parametrize("backend", ["eager", "ember"])
def test_id_of_self_in_a_method(backend, fresh_ember):
    """test_id_guarded_object: a compiled method compares id(self) with an id passed in."""
    class User:
        @ember.compile(backend=backend)
        def call(self, x, ref_id):
            return torch.mul(x, 1.0) if id(self) == ref_id else torch.mul(x, 0)

    x = torch.ones(2)
    first, second = User(), User()
    torch.testing.assert_close(first.call(x, id(first)), torch.ones(2))
    torch.testing.assert_close(second.call(x, id(first)), torch.zeros(2))
    torch.testing.assert_close(second.call(x, id(second)), torch.ones(2))


def test_id_of_module_tensor_attribute(fresh_ember):
    """test_id_tensor: id() of a module's tensor attribute is that tensor's id (it was a stand-in's)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.y1 = torch.ones(2)
            self.y2 = torch.zeros(2)

        def forward(self, x, ref_id):
            return torch.mul(x, self.y1) if ref_id == id(self.y1) else torch.mul(x, self.y2)

    m = M()
    om = ember.compile(m, backend="eager", fullgraph=True)
    x = torch.ones(2)
    for ref in (id(m.y1), id(m.y2), id(m.y1)):
        torch.testing.assert_close(om(x, ref), m(x, ref))


# -- 2. what a truth or length dunder returns is checked as CPython checks it
#       (test_if_cond_user_defined_object2)
class _Bool:
    def __init__(self, r):
        self.r = r

    def __bool__(self):
        return self.r


class _Len:
    def __init__(self, r):
        self.r = r

    def __len__(self):
        return self.r


class _Index:
    def __index__(self):
        return 2


DUNDER_RESULT_CASES = {     # name: (object, use)
    "bool_float": (_Bool(1.2), "truth"),
    "bool_int": (_Bool(1), "truth"),
    "bool_none": (_Bool(None), "truth"),
    "bool_true": (_Bool(True), "truth"),
    "len_negative_truth": (_Len(-1), "truth"),
    "len_negative": (_Len(-1), "len"),
    "len_float_truth": (_Len(1.5), "truth"),
    "len_float": (_Len(1.5), "len"),
    "len_index": (_Len(_Index()), "len"),
    "len_bool_is_int": (_Len(True), "len_type"),
    "len_zero_truth": (_Len(0), "truth"),
}
_USES = {
    "truth": lambda x, o: x + 1 if o else x - 1,
    "len": lambda x, o: x + len(o),
    "len_type": lambda x, o: (x, type(len(o))),
}


def _outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except Exception as e:      # noqa: BLE001
        return type(e), str(e)


@pytest.mark.parametrize("name", list(DUNDER_RESULT_CASES))
def test_dunder_results_checked(name, fresh_ember):
    obj, use = DUNDER_RESULT_CASES[name]
    fn = _USES[use]
    x = torch.zeros(1)
    want, got = _outcome(fn, x, obj), _outcome(ember.compile(fn, backend="eager"), x, obj)
    assert want[0] == got[0] and (want[0] != "ok" and want[1] == got[1] or want[0] == "ok" and
                                  str(want[1]) == str(got[1])), (want, got)


# -- 3. the spellings of "is torch.compile tracing this" answer as under torch.compile (test_is_compiling)
IS_COMPILING_CASES = {
    "compiler.is_compiling": lambda: torch.compiler.is_compiling(),
    "utils.is_compiling": lambda: torch._utils.is_compiling(),
    "compiler.is_dynamo_compiling": lambda: torch.compiler.is_dynamo_compiling(),
    "compiler.is_exporting": lambda: not torch.compiler.is_exporting(),
}


@pytest.mark.parametrize("name", list(IS_COMPILING_CASES))
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_is_compiling_spellings(name, fresh_ember):
    fn = IS_COMPILING_CASES[name]
    body = (lambda x: x + 1 if fn() else x - 1)
    torch.testing.assert_close(ember.compile(body, backend="eager")(torch.zeros(2)), torch.ones(2))


# -- 4. torch's legacy tensor types called in compiled code
#       (test_generate_tensor_from_list_of_numpy_primitive_type)
LEGACY_CASES = {    # name: (function of x (float32[2]), compare values (False: an uninitialized tensor))
    "long_of_numpy_ints": (lambda x: x + torch.LongTensor([np.int64(1), np.int64(3)]), True),
    "long_of_floats": (lambda x: x + torch.LongTensor([1.7, 2.2]), True),
    "float_of_tuple": (lambda x: x + torch.FloatTensor((1, 2)), True),
    "double_of_sizes": (lambda x: torch.DoubleTensor(2, 3), False),
    "half_of_dynamic_size": (lambda x: torch.HalfTensor(x.shape[0]), False),
    "int_empty": (lambda x: torch.IntTensor(), False),
    "bool_of_list": (lambda x: torch.BoolTensor([True, False]) & (x > 0), True),
    "float_of_traced_items": (lambda x: torch.FloatTensor([x.sum().item(), 2.0]) + x, True),
    "tensor_of_list": (lambda x: x * torch.Tensor([2, 3]), True),
    "tensor_of_size": (lambda x: torch.Tensor(torch.Size([2, 3])), False),
}


def _check_legacy(fn, values, x):
    want, got = fn(x), ember.compile(fn, backend="eager", fullgraph=True)(x)
    assert (got.dtype, got.shape, got.device) == (want.dtype, want.shape, want.device)
    if values:
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", list(LEGACY_CASES))
def test_legacy_tensor_type_constructors(name, fresh_ember):
    fn, values = LEGACY_CASES[name]
    _check_legacy(fn, values, torch.ones(2))


def test_legacy_tensor_follows_default_dtype(fresh_ember):
    """torch.Tensor(data) is of the default dtype: a later call under another default recompiles."""
    fn = lambda x: x.int() + torch.Tensor([2, 3])      # noqa: E731
    cfn = ember.compile(fn, backend="eager", fullgraph=True)
    assert cfn(torch.ones(2)).dtype == fn(torch.ones(2)).dtype
    torch.set_default_dtype(torch.float64)
    try:
        assert cfn(torch.ones(2)).dtype == fn(torch.ones(2)).dtype == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


# -- 5. str's and int's C methods on an existing instance of a Python subclass (torch.__version__ is a
#       TorchVersion, a str subclass) read its base value: captured, and guarded on that value
class _Str(str):
    pass


class _Int(int):
    pass


SCALAR_SUBCLASS_CASES = {   # name: (function of (x, o), first o, second o)
    "split": (lambda x, o: x + len(o.split(".")), _Str("2.0.1"), _Str("1.2.3.4")),
    "contains": (lambda x, o: x + ("+" in o), _Str("2.1+cpu"), _Str("2.1")),
    "len": (lambda x, o: x + len(o), _Str("abc"), _Str("abcdef")),
    "iterate": (lambda x, o: x + len(set(o)), _Str("aab"), _Str("abc")),
    "startswith": (lambda x, o: x + o.startswith("2"), _Str("2.0"), _Str("1.0")),
    "format": (lambda x, o: x + len(f"{o}!"), _Str("ab"), _Str("abcd")),
    "int_bit_length": (lambda x, o: x + o.bit_length(), _Int(7), _Int(1024)),
    "torch_version_split": (lambda x, o: x + int(torch.__version__.split(".")[0]), None, None),
}


@pytest.mark.parametrize("name", list(SCALAR_SUBCLASS_CASES))
def test_scalar_subclass_c_methods(name, fresh_ember):
    fn, first, second = SCALAR_SUBCLASS_CASES[name]
    cfn = ember.compile(fn, backend="eager", fullgraph=True)
    for o in (first, second, first):
        torch.testing.assert_close(cfn(torch.zeros(1), o), fn(torch.zeros(1), o))


# -- 6. a frozen dataclass made in compiled code as a dict key or set member (test_frozen_dataclass_hashable)
@dataclasses.dataclass(frozen=True)
class _Point:
    x: float
    z: int


@dataclasses.dataclass(frozen=True)
class _Outer:
    p: _Point
    n: int


_EXISTING = {_Point(1.5, 2): 10}

DATACLASS_KEY_CASES = {
    "same_value_lookup": lambda x: x + {_Point(3.2, 5): 2}[_Point(3.2, 5)],
    "nested": lambda x: x + {_Outer(_Point(2.4, 4.4), 5): 2}[_Outer(_Point(2.4, 4.4), 5)],
    "finds_existing_key": lambda x: x + _EXISTING[_Point(1.5, 2)],
    "misses_existing_key": lambda x: x + _EXISTING.get(_Point(1.5, 3), -1),
    "set_of_equal_values": lambda x: x + len({_Point(1.0, 1), _Point(1.0, 1), _Point(2.0, 1)}),
    "in_set": lambda x: x + (_Point(1.0, 1) in {_Point(1.0, 1)}),
}


@pytest.mark.parametrize("name", list(DATACLASS_KEY_CASES))
def test_new_frozen_dataclass_as_key(name, fresh_ember):
    fn = DATACLASS_KEY_CASES[name]
    x = torch.zeros(1)
    torch.testing.assert_close(ember.compile(fn, backend="eager", fullgraph=True)(x), fn(x))


# -- 7. Tensor.tolist() of a 0-dim tensor is its item() (test_tolist_0d): captured as item() is
TOLIST_0D_CASES = {
    "int": (lambda x: [x.tolist() * 4], torch.tensor(42), torch.tensor(-3)),
    "float": (lambda x: x.tolist() + 1.5, torch.tensor(2.5), torch.tensor(-1.25)),
}


@pytest.mark.parametrize("name", list(TOLIST_0D_CASES))
def test_tolist_of_0d_tensor(name, fresh_ember):
    fn, a, b = TOLIST_0D_CASES[name]
    cfn = ember.compile(fn, backend="eager", fullgraph=True)
    for x in (a, b):
        assert cfn(x) == fn(x)
