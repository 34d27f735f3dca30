"""Guards, the cache and recompiles; readable guard/glue logs; ``fullgraph=True`` errors pointing at user
code.

Issue 2, items 5 and 7: a cached call with the same facts never recompiles; each changed fact the trace relied
on (shape, dtype, stride, requires_grad, module.training, a Python int argument, a global's value, grad mode,
a container's length) costs exactly one recompile, and both entries stay cached; more than 8 entries for one
code object warn once and run eagerly, with correct results."""
from __future__ import annotations

import inspect
import logging
import os
import re
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from tests.capture.harness import ROOT, assert_same  # noqa: E402

THIS_FILE = Path(__file__).name


def rand(*shape, seed, dtype=torch.float32, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=g, dtype=torch.float64)
    if dtype.is_floating_point or dtype.is_complex:
        t = t.to(dtype)
    else:
        t = (t * 10).to(dtype)
    return t.requires_grad_(requires_grad)


def stat(name: str) -> int:
    return ember.stats()[name]


# ------------------------------------------------------------------------------------ no recompile
def two_tensor_fn(x, y):
    return (x * y).sin() + y.mean()


def test_same_facts_no_recompile(counter):
    compiled = ember.compile(two_tensor_fn, backend=counter, fullgraph=True)
    for seed in range(6):
        x, y = rand(3, 4, seed=seed), rand(3, 4, seed=seed + 100)
        assert_same(compiled(x, y), two_tensor_fn(x, y))
    assert counter.count == 1
    assert stat("recompiles") == 0
    assert stat("graphs_compiled") == 1


def test_same_facts_no_recompile_module(counter):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = ember.compile(model, backend=counter, fullgraph=True)
    for seed in range(4):
        x = rand(5, 4, seed=seed)
        assert_same(compiled(x), model(x))
    # parameter values change in place (an optimizer step): same facts, no recompile
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    x = rand(5, 4, seed=9)
    assert_same(compiled(x), model(x))
    assert counter.count == 1
    assert stat("recompiles") == 0


# -------------------------------------------------------------------------------- one fact changes
@dataclass
class RecompileCase:
    """``run(callable, seed, variant)`` sets up the state for variant "a" or "b", makes fresh inputs from
    ``seed`` and calls ``callable``; the only difference between "a" and "b" is the fact named by ``name``."""
    name: str
    fn: Callable
    run: Callable[[Callable, int, str], Any]
    dynamic: bool | None = None

    def __repr__(self):
        return self.name


def _plain(x, y):
    return x * 2 + y.sum()


def _run_shape(f, seed, v):
    return f(rand(3, 4, seed=seed), rand(3, 4 if v == "a" else 5, seed=seed + 1))


def _run_dtype(f, seed, v):
    dt = torch.float32 if v == "a" else torch.float64
    return f(rand(3, 4, seed=seed, dtype=dt), rand(3, 4, seed=seed + 1, dtype=dt))


def _run_stride(f, seed, v):
    x = rand(3, 4, seed=seed) if v == "a" else rand(4, 3, seed=seed).t()
    return f(x, rand(3, 4, seed=seed + 1))


def _run_requires_grad(f, seed, v):
    return f(rand(3, 4, seed=seed, requires_grad=(v == "b")), rand(3, 4, seed=seed + 1))


def _run_grad_mode(f, seed, v):
    x = rand(3, 4, seed=seed, requires_grad=True)
    with torch.set_grad_enabled(v == "a"):
        return f(x, rand(3, 4, seed=seed + 1))


class _TrainingBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if self.training:
            return y * 2
        return y - 1


torch.manual_seed(0)
_TRAINING_MODEL = _TrainingBranch()


def _uses_model(x):
    return _TRAINING_MODEL(x).relu()


def _run_training(f, seed, v):
    _TRAINING_MODEL.train(v == "a")
    try:
        with torch.no_grad():
            return f(rand(2, 4, seed=seed))
    finally:
        _TRAINING_MODEL.train()


def _int_arg(x, n):
    for _ in range(n):
        x = x * 1.5 + 1
    return x, n


def _run_int_arg(f, seed, v):
    return f(rand(3, seed=seed), 2 if v == "a" else 3)


GLOBAL_SCALE = 2.0


def _reads_global(x):
    return x * GLOBAL_SCALE


def _run_global(f, seed, v):
    global GLOBAL_SCALE
    saved = GLOBAL_SCALE
    GLOBAL_SCALE = 2.0 if v == "a" else 3.0
    try:
        return f(rand(3, seed=seed))
    finally:
        GLOBAL_SCALE = saved


def _list_arg(xs):
    return sum(x.sum() for x in xs), len(xs)


def _run_list_len(f, seed, v):
    n = 2 if v == "a" else 3
    return f([rand(3, seed=seed + i) for i in range(n)])


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.factors = (2, 3)        # a tuple attribute of plain constants: guarded in one check

    def forward(self, x):
        return x * self.factors[0] + self.factors[1]


_SCALED = _Scaled()


def _uses_tuple_attr(x):
    return _SCALED(x)


def _run_tuple_attr(f, seed, v):
    _SCALED.factors = (2, 3) if v == "a" else (2.0, 3)       # equal values, another item type
    return f(rand(3, seed=seed).double())


class _Scaled5(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.factors = (2, 3, 1, 1, 4)      # longer than 4 items: checked as one tuple of types

    def forward(self, x):
        return x * self.factors[0] + self.factors[4]


_SCALED5 = _Scaled5()


def _uses_long_tuple_attr(x):
    return _SCALED5(x)


def _run_long_tuple_attr(f, seed, v):
    _SCALED5.factors = (2, 3, 1, 1, 4) if v == "a" else (2, 3, True, 1, 4)     # True == 1, another type
    return f(rand(3, seed=seed).double())


def _run_second_item_type(f, seed, v):
    _SCALED.factors = (2, 3) if v == "a" else (2, 3.0)
    return f(rand(3, seed=seed).double())


RECOMPILE_CASES = [
    RecompileCase("shape", _plain, _run_shape),
    RecompileCase("shape_static", _plain, _run_shape, dynamic=False),
    RecompileCase("dtype", _plain, _run_dtype),
    RecompileCase("stride", _plain, _run_stride),
    RecompileCase("requires_grad", _plain, _run_requires_grad),
    RecompileCase("grad_mode", _plain, _run_grad_mode),
    RecompileCase("module_training", _uses_model, _run_training),
    RecompileCase("python_int_arg", _int_arg, _run_int_arg),
    RecompileCase("global_value", _reads_global, _run_global),
    RecompileCase("list_length", _list_arg, _run_list_len),
    RecompileCase("tuple_attribute_item_type", _uses_tuple_attr, _run_tuple_attr),
    RecompileCase("tuple_attribute_second_item_type", _uses_tuple_attr, _run_second_item_type),
    RecompileCase("long_tuple_attribute_item_type", _uses_long_tuple_attr, _run_long_tuple_attr),
]


@pytest.mark.parametrize("case", RECOMPILE_CASES, ids=[c.name for c in RECOMPILE_CASES])
def test_one_changed_fact_one_recompile(case, counter):
    compiled = ember.compile(case.fn, backend=counter, fullgraph=True, dynamic=case.dynamic)

    def check(seed, variant, graphs, recompiles):
        assert_same(case.run(compiled, seed, variant), case.run(case.fn, seed, variant), f"{variant}{seed}")
        assert counter.count == graphs, f"variant {variant}, call {seed}:\n{counter.describe()}"
        assert stat("recompiles") == recompiles, f"variant {variant}, call {seed}: {ember.stats()}"

    check(1, "a", graphs=1, recompiles=0)
    check(2, "a", graphs=1, recompiles=0)
    check(3, "b", graphs=2, recompiles=1)
    check(4, "b", graphs=2, recompiles=1)
    check(5, "a", graphs=2, recompiles=1)  # the first entry is still cached
    assert stat("graphs_compiled") == 2


# ------------------------------------------------------------------------------------ cache limit
def _add_one(x):
    return x + 1


LIMIT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
                torch.int32, torch.int64, torch.uint8, torch.complex64, torch.complex128]


def _limit_messages(records, caught) -> list[str]:
    msgs = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    msgs += [str(w.message) for w in caught]
    return [m for m in msgs if re.search(r"limit|recompil|cache", m, re.I)]


@pytest.mark.parametrize("varying", ["dtype", "int_arg"])
def test_cache_limit_warns_once_then_runs_eagerly(varying, counter, caplog):
    if varying == "dtype":
        fn = _add_one
        calls = [(rand(4, seed=i, dtype=dt),) for i, dt in enumerate(LIMIT_DTYPES)]
    else:
        fn = _int_arg
        calls = [(rand(3, seed=i), i + 1) for i in range(11)]
    compiled = ember.compile(fn, backend=counter, dynamic=False)

    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        for i, args in enumerate(calls):
            assert_same(compiled(*args), fn(*args), f"call {i}")
            if i < 8:
                assert counter.count == i + 1
                assert not _limit_messages(caplog.records, caught), f"warned early, at call {i}"
        # entries already cached still give correct results
        assert_same(compiled(*calls[0]), fn(*calls[0]))
        assert_same(compiled(*calls[-1]), fn(*calls[-1]))

    assert counter.count == 8, counter.describe()
    msgs = _limit_messages(caplog.records, caught)
    assert len(msgs) == 1, f"expected one warning about the cache limit, got {msgs}"
    assert "8" in msgs[0]


# ------------------------------------------------------------------------------------------- logs
LOG_SCRIPT = textwrap.dedent("""
    import sys, torch, ember
    if sys.argv[1] == "set_logs":
        ember.set_logs(guards=True, output_code=True, recompiles=True)

    def scale_and_shift_for_log_test(x):
        return x * 2 + 1

    f = ember.compile(scale_and_shift_for_log_test, backend="eager")
    f(torch.randn(3, 7))
    f(torch.randn(3, 7))
    f(torch.randn(3, 9, dtype=torch.float64))
    print("DONE")
""")


@pytest.mark.parametrize("how", ["env", "set_logs"])
def test_guard_and_glue_logs_are_readable(how, tmp_path):
    script = tmp_path / "log_script.py"
    script.write_text(LOG_SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [env.get("PYTHONPATH", ""), str(ROOT)] if p)
    env.pop("EMBER_LOGS", None)
    if how == "env":
        env["EMBER_LOGS"] = "guards,output_code,recompiles"
    proc = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, env=env,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "DONE" in proc.stdout
    assert "scale_and_shift_for_log_test" in out
    # the guards of the first entry: dtype and shape of x
    assert "float32" in out, out
    assert re.search(r"3,\s*7", out), out
    # the recompile for the second entry names what changed
    assert "float64" in out or re.search(r"3,\s*9", out), out
    # the glue / generated code is printed as readable source
    assert "x" in out and len(out.splitlines()) >= 5


def test_no_logs_by_default(tmp_path):
    script = tmp_path / "log_script.py"
    script.write_text(LOG_SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [env.get("PYTHONPATH", ""), str(ROOT)] if p)
    env.pop("EMBER_LOGS", None)
    proc = subprocess.run([sys.executable, str(script), "quiet"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "scale_and_shift_for_log_test" not in proc.stdout + proc.stderr


# ------------------------------------------------------------------------- unsupported under fullgraph
def prints_item(x):
    y = x * 2
    print(y.item())  # UNSUPPORTED
    return y + 1


def data_dependent_branch(x):
    y = x.cos()
    if y.sum() > 0:  # UNSUPPORTED
        return y * 2
    return y - 1


def helper_that_prints(t):
    print("value:", t.item())  # UNSUPPORTED
    return t


def calls_helper_that_prints(x):
    y = x + 1
    y = helper_that_prints(y)
    return y * 3


UNSUPPORTED = [prints_item, data_dependent_branch, calls_helper_that_prints]


def marked_line(fn, marker: str = "# UNSUPPORTED") -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


# where each program's unsupported line is, and the call lines that lead there
WHERE = {
    prints_item: [(prints_item, "# UNSUPPORTED")],
    data_dependent_branch: [(data_dependent_branch, "# UNSUPPORTED")],
    calls_helper_that_prints: [(helper_that_prints, "# UNSUPPORTED"),
                               (calls_helper_that_prints, "y = helper_that_prints(y)")],
}


@pytest.mark.parametrize("fn", UNSUPPORTED, ids=[f.__name__ for f in UNSUPPORTED])
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["pos", "neg"])
def test_fullgraph_unsupported_points_at_user_line(fn, sign, counter):
    x = rand(1, seed=3).abs() * sign
    compiled = ember.compile(fn, backend=counter, fullgraph=True)
    with pytest.raises(ember.Unsupported) as info:
        compiled(x)
    msg = str(info.value)
    assert THIS_FILE in msg, msg
    for where, marker in WHERE[fn]:
        line = marked_line(where, marker)
        pattern = rf"{re.escape(THIS_FILE)}\D{{1,12}}{line}\b"
        assert re.search(pattern, msg), f"line {line} not named in:\n{msg}"


@pytest.mark.parametrize("fn", UNSUPPORTED, ids=[f.__name__ for f in UNSUPPORTED])
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["pos", "neg"])
def test_without_fullgraph_unsupported_runs_correctly(fn, sign, counter, capsys):
    compiled = ember.compile(fn, backend=counter)
    for seed in (3, 4):
        x = rand(1, seed=seed).abs() * sign
        expected = fn(x)
        eager_out = capsys.readouterr().out
        actual = compiled(x)
        compiled_out = capsys.readouterr().out
        assert_same(actual, expected)
        assert compiled_out == eager_out



# ------------------------------------------------------------------------------------ identity fast path
class _Hyper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stride = (1, 2)          # immutable hyperparameters, read on every call
        self.mode = "zeros"
        self.eps = 1e-5

    def forward(self, x):
        y = x * self.stride[1] + self.eps
        return y if self.mode == "zeros" else -y


def test_immutable_constants_are_checked_by_identity_first(counter):
    """A guarded immutable value (a tuple of ints, a str, a float) is first compared by identity with the object
    read when compiling, then, for another object, by type and value: an equal new object still hits the
    entry, a value of another type or value recompiles."""
    from ember.capture.guards import GuardSet
    from ember.capture.sources import Codegen, LocalSource
    gs = GuardSet(Codegen())
    t = (1, 2)
    gs.tuple_of_constants(LocalSource("t"), t)
    gs.equals(LocalSource("m"), "zeros")
    assert all(" is __const_" in g.expr for g in gs.guards), [g.expr for g in gs.guards]
    m = _Hyper()
    compiled = ember.compile(m, backend=counter, fullgraph=True)
    x = rand(3, seed=0)
    assert_same(compiled(x), m(x))
    before = stat("recompiles")
    m.stride, m.mode, m.eps = tuple([1, 2]), "".join(["ze", "ros"]), float("1e-5")   # equal, other objects
    assert_same(compiled(x), m(x))
    assert stat("recompiles") == before and counter.count == 1
    m.stride = (1, 2.0)                  # equal value, another item type
    assert_same(compiled(x), m(x))
    m.mode = "reflect"
    assert_same(compiled(x), m(x))
    assert stat("recompiles") == before + 2


def test_inference_weights_are_checked_by_identity_and_version(counter):
    """Under no_grad a module's parameters and buffers are checked in full once, then by identity and version
    counter (``ember.capture.torch.fastguard``): every way of changing a weight's metadata is still caught:
    ``.data =`` (no version bump: an epoch instead), in-place shape changes (a version bump),
    ``torch.utils.swap_tensors`` (which refuses tensors with weak references: the records drop theirs), a new
    Parameter object, ``requires_grad_``, and a weight made in inference mode (no version counter)."""
    from ember.capture.torch import fastguard
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.Linear(5, 3)).eval()
    compiled = ember.compile(model, backend=counter)
    x = rand(4, 6, seed=0)

    def check(grad=False):
        with torch.set_grad_enabled(grad):
            assert_same(compiled(x), model(x))

    check()
    check()
    assert counter.count == 1
    seen = [s for s in fastguard._ALL.values() if s[0] is not fastguard._dead]
    assert {s[0][0]() for s in seen} >= set(model.parameters()) | {model[1].running_mean, model[1].running_var}
    lin = model[2]
    lin.weight.data = lin.weight.data[:2].clone()       # .data =: smaller, same object, same version
    lin.bias.data = lin.bias.data[:2].clone()
    check()
    assert counter.count == 2
    with torch.no_grad():
        lin.weight.t_()                                  # in place: a version bump
        lin.weight.t_()
    check()                                              # same metadata again: no recompile
    assert counter.count == 2
    with torch.no_grad():
        model[1].running_var.resize_(2)
        model[1].running_var.fill_(1.0)
        model[1].running_mean.resize_(2)
        model[1].weight.data, model[1].bias.data = model[1].weight.data[:2], model[1].bias.data[:2]
        model[0].weight.data, model[0].bias.data = model[0].weight.data[:2], model[0].bias.data[:2]
        lin.weight.data = lin.weight.data[:, :2].clone()
    model[1].num_features = 2
    check()
    torch.utils.swap_tensors(lin.weight, nn.Parameter(rand(4, 2, seed=1)))
    lin.bias = nn.Parameter(rand(4, seed=2))
    check()
    lin.weight.requires_grad_(False)
    check()
    check(grad=True)                                     # grad mode: another entry, checked in full
    with torch.inference_mode():
        lin.weight = nn.Parameter(rand(4, 2, seed=3))
    check()
    check()
    # the records live as long as their guards: dropping the compiled entries frees them
    import gc
    before = len(fastguard._ALL)
    ember.reset()
    del compiled
    gc.collect()
    assert len(fastguard._ALL) < before, (len(fastguard._ALL), before)


class _GradReader(nn.Module):
    """Branches on its weight's requires_grad (a read the guards must keep, even under no_grad)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if self.lin.weight.requires_grad else y - 1


def _enable_inside(x, w):
    with torch.enable_grad():
        return x * w


def test_no_grad_graphs_do_not_guard_requires_grad(counter):
    """Under no_grad, a graph that never turns gradients on and never reads a requires_grad does not depend on
    which inputs require grad (its outputs require none either way): freezing a weight or passing an input that
    requires grad does not recompile it. A trace that reads requires_grad, or turns grad mode on inside, keeps
    those guards."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)).eval()
    compiled = ember.compile(model, backend=counter)
    x = rand(2, 4, seed=0)
    with torch.no_grad():
        assert_same(compiled(x), model(x))
        model[0].weight.requires_grad_(False)
        assert_same(compiled(x), model(x))
        xr = rand(2, 4, seed=1, requires_grad=True)
        assert_same(compiled(xr), model(xr))
    assert counter.count == 1
    assert_same(compiled(xr), model(xr))                # grad mode on: its own entry, which guards them
    model[2].weight.requires_grad_(False)
    assert_same(compiled(xr), model(xr))
    assert counter.count == 3

    reader = _GradReader()
    compiled_reader = ember.compile(reader, backend=counter)
    with torch.no_grad():
        assert_same(compiled_reader(x), reader(x))
        reader.lin.weight.requires_grad_(False)         # the branch the trace took changes
        assert_same(compiled_reader(x), reader(x))
    assert counter.count == 5

    inside = ember.compile(_enable_inside, backend=counter)
    w = rand(4, seed=2)
    with torch.no_grad():
        for req in (False, True, False):
            xi = rand(2, 4, seed=3, requires_grad=req)
            assert_same(inside(xi, w), _enable_inside(xi, w))
    assert counter.count == 7


class _Scaled(nn.Module):
    scale = 3.0         # a class attribute, shadowed by the instance's

    def __init__(self) -> None:
        super().__init__()
        self.scale = 2.0
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * self.scale


def test_module_attributes_read_through_the_instance_dict(counter):
    """A module's attributes are read from its ``__dict__`` in the guards (one fetch per module per call, then
    dict lookups): deleting an instance attribute (the class's shows through), writing a submodule or a
    parameter into the module's dicts directly, are all still seen."""
    torch.manual_seed(0)
    m = _Scaled()
    compiled = ember.compile(m, backend=counter)
    x = rand(2, 4, seed=0)
    assert_same(compiled(x), m(x))
    del m.scale                                         # the class's 3.0 now: a new entry
    assert_same(compiled(x), m(x))
    assert counter.count == 2
    m.scale = 2.0                                       # the first entry again
    assert_same(compiled(x), m(x))
    m._modules["lin"] = nn.Linear(4, 4, bias=False)     # written into the dict directly: no bias, a new entry
    assert_same(compiled(x), m(x))
    assert counter.count == 3
    m.lin._parameters["weight"] = nn.Parameter(rand(4, 4, seed=1))     # same metadata: the same entry
    assert_same(compiled(x), m(x))
    with torch.no_grad():
        assert_same(compiled(x), m(x))
        m.lin._parameters["weight"] = nn.Parameter(rand(4, 4, seed=2))  # identity-checked under no_grad
        assert_same(compiled(x), m(x))
        m.lin.weight.data = rand(4, 4, seed=3)
        assert_same(compiled(x), m(x))
    assert counter.count == 4


def _view_of_input(x):
    return x[:, :2]


def _same_or_view(x):
    return x.contiguous(), x.float(), x.expand(3, 4), x.view(-1)


def test_no_grad_outputs_that_alias_inputs_keep_their_requires_grad():
    """Under no_grad a view of an input, or the input an op returns as is (``contiguous``, ``float``), still
    requires grad when the input does: those inputs keep their requires_grad guards (the default backend records
    which outputs alias which inputs, requires_grad included), and backward through them works."""
    for fn in (_view_of_input, _same_or_view):
        compiled = ember.compile(fn)
        with torch.no_grad():
            for req in (False, True, False, True):
                x = rand(3, 4, seed=0, requires_grad=req)
                assert_same(compiled(x), fn(x))
        grads = []
        for run in (compiled, fn):      # backward through the output works as in eager (a no_grad view is a leaf)
            x = rand(3, 4, seed=1, requires_grad=True)
            with torch.no_grad():
                out = run(x)
            first = out if isinstance(out, torch.Tensor) else out[0]
            (first * 2).sum().backward()
            grads.append((x.grad, first.grad))
        assert_same(grads[0], grads[1])
    # traced under inference_mode (whose views keep no _base), called later under no_grad: still an alias
    compiled = ember.compile(_view_of_input)
    with torch.inference_mode():
        compiled(rand(3, 4, seed=2))
    with torch.no_grad():
        x = rand(3, 4, seed=3, requires_grad=True)
        assert_same(compiled(x), _view_of_input(x))


class _ReadsStep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.step = 0

    def forward(self, x):
        n = int(x.sum().item())          # a graph break: the rest is a continuation
        return x * self.step + n, self.step


class _Rewrites(nn.Module):
    """Rewrites its attribute reads (its own ``__getattribute__``): guards must read through it."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = 2.0

    def __getattribute__(self, name):
        v = super().__getattribute__(name)
        return v * 10 if name == "scale" else v

    def forward(self, x):
        return x * self.scale


def _reads_via_getattribute(x):
    return x * 2 if x.__getattribute__("requires_grad") else x - 1


def test_module_attribute_reads_after_a_break_and_through_custom_getattribute(counter):
    """A module attribute that changes every call read after a graph break (automatic dynamic: a graph input,
    not a guard) is read from the module's ``__dict__`` assigned in the guards, not first in the return line;
    a module class with its own ``__getattribute__`` is read through it; ``x.__getattribute__('requires_grad')``
    under no_grad keeps the requires_grad guard. Recompile messages show plain attribute paths."""
    m = _ReadsStep()
    compiled = ember.compile(m, backend="eager")
    x = torch.ones(3)
    for i in range(4):
        m.step = i + 1
        assert_same(compiled(x), m(x))
    r = _Rewrites()
    assert_same(ember.compile(r, backend="eager")(x), r(x))
    reader = ember.compile(_reads_via_getattribute, backend=counter)
    with torch.no_grad():
        for req in (False, True):
            xr = rand(2, seed=0, requires_grad=req)
            assert_same(reader(xr), _reads_via_getattribute(xr))
    reasons = [g.reason for g in ember.explain(_Scaled())(torch.zeros(2, 4)).guards]
    assert "self.scale == 2.0" in reasons, reasons


@torch.enable_grad()
def _grad_helper(x):
    return x * 2


@torch.no_grad()
def _no_grad_helper(x):
    return x + 1


def _calls_decorated(x):
    return _grad_helper(x) + _no_grad_helper(x), torch.is_grad_enabled()


def test_functions_decorated_with_grad_modes(counter):
    """A helper decorated with ``@torch.enable_grad()`` / ``@torch.no_grad()`` (its decorator's context object is
    never entered itself: each call enters a clone) compiles under either grad mode, and the caller's grad mode
    is restored after it: the guard checks that the object was not entered, not the value it would restore."""
    compiled = ember.compile(_calls_decorated, backend=counter)
    for grad in (False, True, False, True):
        x = rand(3, seed=0, requires_grad=True)
        with torch.set_grad_enabled(grad):
            assert_same(compiled(x), _calls_decorated(x))
            assert torch.is_grad_enabled() is grad
    assert counter.count == 2
