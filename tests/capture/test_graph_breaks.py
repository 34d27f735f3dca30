"""Graph breaks (issue 3 acceptance): a table of programs that break, compiled == eager.

Every program is registered with ``@breaks(*arg_specs, fg="tag", ...)`` (machinery in graph_break_table.py).
Each runs ``runs`` times (2, or 4 when an ``Alt`` argument flips a data-dependent branch between runs) with
fresh random inputs, under ember with a counting backend and again with an AOT-autograd backend
(``aot_eager``), and each run checks:

- outputs equal eager's (structure, values, dtype, shape, requires_grad);
- printed output (captured stdout) equals eager's, same text in the same order;
- side effects on Python objects equal eager's: the arguments after the call (lists, dicts, ``Rec`` objects'
  attributes), module attributes, the module globals the program names in ``globals_``;
- grad mode and autocast state after the call are the caller's, and the global RNG state equals eager's;
- with ``grad=True`` floating inputs require grad, and the gradients of inputs and parameters of a random
  cotangent of the outputs equal eager's (autograd through the sequence of graphs);
- calls after the first one compile nothing new (``cached``; from run 3 on for alternating branches).

Once per program: ``ember.explain`` reports ``graphs`` graphs and ``nbreaks`` breaks (where given) and
shows the ``ops`` in captured graphs, and ``fullgraph=True`` raises ``ember.Unsupported`` naming
``file:line`` of the line tagged ``# @<fg>`` in this file (with ``stack``: the user stack's frames in this
file, outermost call site first), before the program printed anything.

The break lines are tagged ``# @tag``: keep each tag at the end of the line that breaks.
"""
from __future__ import annotations

import contextlib
import copy
import io
import os
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from tests.capture.graph_break_table import PROGRAMS, Alt, P, S, T, breaks, make_args, tag_lines  # noqa: E402
from tests.capture.harness import (  # noqa: E402
    CountingBackend,
    assert_module_state_same,
    assert_same,
    clone_value,
    cotangent_loss,
    tensors_in,
)

THIS_FILE = str(Path(__file__).resolve())
BF16_TOL = {"rtol": 1.6e-2, "atol": 1e-2}

# module globals some programs mutate (reset to these values before every run)
GLOG: list = []
GCOUNT = 0
GCFG: dict = {"calls": 0, "scale": 2.0}
_GLOBAL_INIT = {"GLOG": [], "GCOUNT": 0, "GCFG": {"calls": 0, "scale": 2.0}}


# --------------------------------------------------------------------------------------------- helpers
@ember.disable
def eager_only(t, rec=None, tag="eager_only"):
    """Runs natively even when called from compiled code (a graph break at each call)."""
    if rec is not None:
        rec.log.append((tag, torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")))
    return t * 3 + 1


@ember.disable
def eager_raises(t, rec):
    rec.log.append("eager_raises")
    raise ValueError(f"bad value {t.shape[0]}")


@ember.disable
def eager_grad_state(rec):
    rec.log.append(("grad", torch.is_grad_enabled(), "autocast", torch.is_autocast_enabled("cpu"),
                    torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None))


class LogCtx:
    """A user context manager: enter/exit recorded in the log, exceptions not swallowed."""

    def __init__(self, rec, name):
        self.rec, self.name = rec, name

    def __enter__(self):
        self.rec.log.append(f"enter {self.name}")
        return self

    def __exit__(self, et, ev, tb):
        self.rec.log.append(f"exit {self.name} {et.__name__ if et else None}")
        return False


class Swallow:
    """A user context manager that swallows KeyError."""

    def __init__(self, rec):
        self.rec = rec

    def __enter__(self):
        self.rec.n += 1
        return self.rec

    def __exit__(self, et, ev, tb):
        self.rec.log.append(("swallow", et.__name__ if et else None))
        return et is KeyError


@contextlib.contextmanager
def gen_ctx(rec, name):
    rec.log.append(f"gen enter {name}")
    try:
        yield name
    finally:
        rec.log.append(f"gen exit {name}")


# =============================================================================== unsupported calls/builtins
@breaks(T(3, 4), S(), fg="disabled_basic", graphs=2, nbreaks=1)
def disabled_call_between_graphs(x, rec):
    y = x.sin() * 2
    z = eager_only(y, rec)  # @disabled_basic
    return z.cos() + y


@breaks(T(5), S(), fg="eval_builtin", graphs=2, nbreaks=1)
def unsupported_builtin_eval(x, rec):
    y = x.exp()
    rec.d["keys"] = sorted(eval("['n', 'log', 'd']"))  # @eval_builtin
    return y * len(rec.d["keys"])


@breaks(T(4), S(), fg="getpid", graphs=2, nbreaks=1)
def unsupported_c_function(x, rec):
    y = torch.relu(x) + 1
    pid = os.getpid()  # @getpid
    rec.d["pid_ok"] = pid > 0
    return y * 2


@breaks(T(4), S(), fg="perf_counter")
def c_function_result_feeds_python_logic(x, rec):
    y = torch.relu(x) + 1
    rec.log.append(time.perf_counter() > 0)  # @perf_counter
    return y * 2


@breaks(T(4), S(), fg="globals_builtin", graphs=2, nbreaks=1)
def unsupported_builtin_globals(x, rec):
    y = x + 1
    has = "GLOG" in globals()  # @globals_builtin
    rec.d["has"] = has
    return y.tanh()


@breaks(T(3), S(), fg="py_random", graphs=2, nbreaks=1)
def python_random_between_graphs(x, rec):
    y = x * 2
    r = rec.rng.random()  # @py_random
    rec.d["r"] = r
    return y + 1


@breaks(T(3), S(), fg="pending_append", full="")
def pending_list_append_across_break(x, rec):
    rec.log.append(x.sum().item())  # @pending_append
    return x * 2


@breaks(T(3), S(), fg="pending_update", full="")
def pending_dict_update_across_break(x, rec):
    y = x.exp()
    rec.d.update(total=y.sum().item())  # @pending_update
    return y + 1


# a class statement is one unsupported construct (one break); each call makes a new class, so the code after
# it cannot be cached by the class's identity
@breaks(T(3), S(), fg="local_class", nbreaks=1, cached=False)
def class_defined_inside(x, rec):
    y = x * 2

    class Box:  # @local_class
        scale = 3

    rec.log.append(Box.scale)
    return y * Box.scale


@breaks(T(2, 3), fg="manual_seed", graphs=2)
def torch_manual_seed_inside(x):
    y = x.sigmoid()
    torch.manual_seed(1234)  # @manual_seed
    return y + torch.randn(2, 3)


@breaks(T(3, 3), S(), fg="dir_builtin", graphs=2, nbreaks=1)
def dir_builtin(x, rec):
    y = x @ x
    names = [n for n in dir(rec) if not n.startswith("_")]  # @dir_builtin
    rec.log.append(names)
    return y - len(names)


# ==================================================================================================== print
@breaks(T(4), fg="print_const", graphs=2, nbreaks=1)
def print_between_graphs(x):
    y = x.sin()
    print("between the graphs")  # @print_const
    return y.cos()


@breaks(T(3), fg="print_kwargs", graphs=2, nbreaks=1)
def print_with_sep_end_file(x):
    y = x * 3
    print("a", 1, 2.5, None, [1, 2], sep="|", end="!\n", file=sys.stdout)  # @print_kwargs
    return y.exp()


@breaks(T(3), fg="print_shape", graphs=2, nbreaks=1)
def print_shape_and_dtype(x):
    y = x.unsqueeze(0).expand(2, 3)
    print("shape", y.shape, y.dtype, y.size(1))  # @print_shape
    return y * 2


@breaks(T(2, 2), fg="print_tensor", graphs=2, nbreaks=1)
def print_detached_tensor(x):
    y = (x * 10).round()
    print("y =", y.detach())  # @print_tensor
    return y * x


@breaks(T(5), fg="print_item", graphs=2)
def print_formatted_item(x):
    loss = (x * x).mean()
    print(f"loss={loss.item():.4f}")  # @print_item
    return loss * 2


@breaks(T(3), S(), fg="print_order", graphs=2, nbreaks=2)
def print_and_side_effects_in_order(x, rec):
    rec.log.append("before")
    y = x + 1
    print("first", len(rec.log))  # @print_order
    rec.log.append("middle")
    print("second", len(rec.log))
    rec.log.append("after")
    return y * y


# ====================================================================================== .item() / .tolist()
@breaks(Alt(4), fg="item_if", graphs=2, full="item_if_branch")
def item_feeds_if(x):
    s = x.sum().item()  # @item_if
    if s > 0:  # @item_if_branch
        return x * 2, s
    return x - 1, -s


@breaks(P(4), fg="item_arith", graphs=2, full="")
def item_in_arithmetic(x):
    m = x.max().item()  # @item_arith
    return x / m + m


# the Python logic depends on every value of the list: later calls may specialize again (cached=False)
# (under fullgraph=True, capture_scalar_outputs is on: the list holds numbers read when the graph runs, and
# the break is where Python needs one of them)
@breaks(T(5), S(), fg="tolist_loop", cached=False, full="tolist_cond")
def tolist_feeds_loop(x, rec):
    vals = (x * 2).tolist()  # @tolist_loop
    total = 0.0
    for v in vals:
        if v > 0:  # @tolist_cond
            total += v
    rec.log.append(round(total, 5))
    return x * total


@breaks(T(6), fg="item_index", cached=False, full="")
def item_as_index(x):
    i = x.argmax().item()  # @item_index
    return x[i] * 2 + x


@breaks(T(4), S(), fg="numpy_call")
def numpy_feeds_python(x, rec):
    a = x.detach().numpy()      # traced (NumPy on tensors' arrays); float() of its value breaks
    rec.log.append(round(float(a.sum()), 5))  # @numpy_call
    return x + 1


@breaks(T(3, 4), fg="item_int_range", cached=False, full="item_range")
def item_int_drives_range(x):
    n = int((x.abs() > 10).sum().item()) + 2  # @item_int_range
    out = x
    for _ in range(n):  # @item_range
        out = out * 0.5 + 1
    return out


# ================================================================================== data-dependent branches
@breaks(Alt(3, 3), fg="if_tensor", graphs=2, nbreaks=1)
def if_on_tensor(x):
    y = x * 2
    if y.sum() > 0:  # @if_tensor
        return y.relu() + 1
    return y.abs() - 1


# the trip count depends on the data: the loop counter's values may be new on later calls (cached=False)
@breaks(P(4), fg="while_tensor", cached=False)
def while_on_tensor(x):
    x = x * 8
    steps = 0
    while x.norm() > 1:  # @while_tensor
        x = x / 2
        steps += 1
    return x, steps


@breaks(Alt(3), T(3), fg="and_tensor")
def and_or_on_tensors(x, y):
    if (x > 0).all() and y.abs().sum() > 0:  # @and_tensor
        return x + y
    return x - y


@breaks(Alt(4), fg="ternary_tensor", graphs=2, nbreaks=1)
def ternary_on_tensor(x):
    z = x.exp() if x.mean() > 0 else x.neg().exp()  # @ternary_tensor
    return z * 2


@breaks(T(3), fg="assert_tensor", graphs=2, nbreaks=1)
def assert_on_tensor(x):
    y = x.abs() + 1
    assert (y > 0).all(), "must be positive"  # @assert_tensor
    return y.log()


@breaks(Alt(5), fg="any_tensor", graphs=2, nbreaks=1)
def if_any_on_tensor(x):
    y = x.sin()
    if (x > 0).any():  # @any_tensor
        y = y + 10
    return y * x


# ==================================================================================================== loops
@breaks(T(4), fg="loop_print", graphs=4)
def print_in_for_loop(x):
    for i in range(3):
        x = x * 2 + i
        print("iter", i)  # @loop_print
    return x.sum()


@breaks([T(3), T(3), T(3)], S(), fg="loop_list_print")
def break_in_loop_over_list(xs, rec):
    acc = xs[0] * 0
    for t in xs:
        acc = acc + t.sin()
        rec.log.append(len(rec.log))
        print("acc step")  # @loop_list_print
    return acc


@breaks(T(5), fg="loop_enumerate", ops=("mul",))
def break_in_enumerate_zip_loop(x):
    ws = [1.0, 2.0, 3.0]
    out = x
    for i, (w, name) in enumerate(zip(ws, "abc")):
        out = out * w
        print(i, name)  # @loop_enumerate
    return out


@breaks(Alt(4), fg="loop_if")
def data_dependent_break_and_continue_in_loop(x):
    out = x
    for i in range(4):
        out = out + i
        if out.sum() > 100:  # @loop_if
            break
        if out.mean() < -100:
            continue
        out = out * 1.5
    return out


@breaks(T(3), S(), fg="nested_loop")
def break_in_nested_loops(x, rec):
    for i in range(2):
        for j in range(2):
            x = x + i * j
            rec.log.append((i, j))
            eager_only(x)  # @nested_loop
    return x * 2


@breaks(T(4), fg="while_counter")
def while_loop_with_counter_and_print(x):
    n = 0
    while n < 3:
        x = x.cos() + n
        print("n", n)  # @while_counter
        n += 1
    return x


# ========================================================================================= context managers
@breaks(T(3), S(), fg="no_grad_break", graphs=2, nbreaks=1)
def break_inside_no_grad(x, rec):
    a = x * 2
    with torch.no_grad():
        b = x * 3
        eager_grad_state(rec)  # @no_grad_break
        c = b + 1
        rec.log.append(c.requires_grad)
    return a * c, c


@breaks(T(3), S(), fg="no_grad_print")
def print_inside_no_grad_then_grad(x, rec):
    with torch.no_grad():
        y = x.exp()
        print("in no_grad", torch.is_grad_enabled())  # @no_grad_print
    z = x * y
    rec.log.append((y.requires_grad, z.requires_grad))
    return z


@breaks(T(2, 3), S(), fg="enable_grad_break")
def break_inside_enable_grad_inside_no_grad(x, rec):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
            eager_grad_state(rec)  # @enable_grad_break
            c = b.sin()
        d = c * 2
    return a, c, d


@breaks(T(4, 4), T(4, 4), S(), fg="autocast_break", tol=BF16_TOL, graphs=2, nbreaks=1)
def break_inside_autocast(a, b, rec):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = a @ b
        eager_grad_state(rec)  # @autocast_break
        z = y @ b
        rec.log.append(str(z.dtype))
    return z.float() + 1, y


@breaks(T(4, 4), S(), fg="autocast_print", tol=BF16_TOL)
def print_inside_autocast_then_exit(a, rec):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.mm(a, a)
        print("dtype inside", y.dtype)  # @autocast_print
    z = torch.mm(a, a)
    rec.log.append((str(y.dtype), str(z.dtype)))
    return y.float() * z


@breaks(T(3), S(), fg="user_ctx_break", graphs=2, nbreaks=1)
def break_inside_user_context_manager(x, rec):
    with LogCtx(rec, "outer"):
        y = x * 2
        with LogCtx(rec, "inner") as cm:
            rec.log.append(cm.name)
            print("inside", cm.name)  # @user_ctx_break
            y = y + 1
        rec.log.append("between")
    return y.sin()


@breaks(T(3), S(), fg="gen_ctx_break", ops=("mul", "tanh"))
def break_inside_contextmanager_generator(x, rec):
    y = x * 2
    with gen_ctx(rec, "g") as name:
        rec.log.append(name)
        y = eager_only(y, rec)  # @gen_ctx_break
        y = y.tanh()
    return y


@breaks(T(3), S(), fg="swallow_break", grad=True)
def break_then_swallowed_exception(x, rec):
    y = x + 1
    with Swallow(rec) as r:
        print("in swallow", r.n)  # @swallow_break
        y = y * 2
        rec.d["missing"] = rec.d["nope"]
    return y * 3


@breaks(T(3), S(), fg="set_grad_break")
def break_inside_set_grad_enabled(x, rec):
    with torch.set_grad_enabled(False):
        y = x.sin()
        eager_grad_state(rec)  # @set_grad_break
    return x * y, y


# =================================================================================== try / finally / except
@breaks(T(3), S(), fg="finally_break", graphs=2, nbreaks=1)
def break_inside_try_finally(x, rec):
    try:
        y = x * 2
        print("in try")  # @finally_break
        y = y + 1
    finally:
        rec.log.append("finally")
        rec.n += 1
    return y


@breaks(T(3), S(), fg="finally_return")
def return_after_break_inside_try_finally(x, rec):
    try:
        y = x.exp()
        eager_only(y, rec)  # @finally_return
        return y * 2
    finally:
        rec.log.append("finally")
        rec.n += 1


@breaks(T(3), S(), fg="break_in_finally")
def break_inside_finally_block(x, rec):
    try:
        y = x * 2
    finally:
        rec.n += 1
        print("finally block", rec.n)  # @break_in_finally
    return y + 1


@breaks(T(3), S(), fg="except_native")
def exception_from_native_call_caught(x, rec):
    y = x * 2
    try:
        eager_raises(y, rec)  # @except_native
        rec.log.append("not reached")
    except ValueError as e:
        rec.log.append(str(e))
        y = y + 1
    return y.sin()


@breaks(T(3), S(), fg="except_after_break")
def exception_after_break_caught(x, rec):
    y = x + 1
    try:
        print("try body")  # @except_after_break
        y = y * 2
        raise KeyError("k")
    except KeyError as e:
        rec.log.append(("caught", str(e)))
        y = y - 1
    else:
        rec.log.append("else")
    finally:
        rec.n += 1
    return y


@breaks(T(3), S(), fg="except_else")
def try_except_else_with_break_in_else(x, rec):
    try:
        y = x * 2
    except RuntimeError:
        y = x
    else:
        eager_only(y, rec)  # @except_else
        y = y + 5
    return y


def _raise_after_print(y):
    print("callee prints then raises")  # @raise_callee_print
    raise IndexError("from callee")


@breaks(T(3), S(), fg="raise_callee_print", stack=("raise_callee_call", "raise_callee_print"))
def exception_from_breaking_callee_caught(x, rec):
    y = x.cos()
    try:
        _raise_after_print(y)  # @raise_callee_call
    except IndexError as e:
        msg = str(e)
        rec.log.append(msg)
    return y * 2


# ============================================================================================ early returns
@breaks(Alt(3), S(), fg="early_ret", graphs=3, nbreaks=2)
def early_return_after_break(x, rec):
    y = x * 2
    eager_only(y, rec)  # @early_ret
    if y.sum() > 0:
        return y + 100
    rec.log.append("late")
    return y - 100


@breaks(T(4), fg="ret_in_loop")
def return_inside_loop_after_print(x):
    for i in range(5):
        x = x + 1
        print("i", i)  # @ret_in_loop
        if i == 2:
            return x * 2
    return x


@breaks(Alt(2), fg="ret_item")
def early_return_on_item(x):
    if x.sum().item() < 0:  # @ret_item
        return x.abs()
    y = x * 3
    return y.sqrt()


# ========================================================================================== inlined callees
def _helper_print(y):
    z = y.sin()
    print("in helper")  # @helper_print
    return z.cos()


@breaks(T(3), fg="helper_print", stack=("helper_call", "helper_print"), graphs=4, nbreaks=2)
def break_inside_inlined_callee(x):
    y = x * 2
    w = _helper_print(y) + 1  # @helper_call
    return w * x


def _helper_branch(y):
    if y.mean() > 0:  # @helper_branch
        return y * 2
    return -y


@breaks(Alt(3), fg="helper_branch", stack=("helper_branch_call", "helper_branch"), graphs=4, nbreaks=2)
def data_dependent_branch_in_callee(x):
    a = x + 1
    b = _helper_branch(a)  # @helper_branch_call
    return a * b


class Scaler:
    def __init__(self, s):
        self.s = s
        self.calls = 0

    def apply(self, t):
        self.calls += 1
        t = t * self.s
        print("scaler", self.calls)  # @method_print
        return t + self.s


@breaks(T(3), S(), fg="method_print", stack=("method_call", "method_print"))
def break_inside_user_method(x, rec):
    sc = rec.d.setdefault("scaler", Scaler(1.5))
    y = sc.apply(x)  # @method_call
    return y * sc.calls


def _helper_kwargs(t, *, scale=1.0, rec=None):
    rec.log.append(("kw", scale))
    return eager_only(t * scale)  # @helper_kwargs


@breaks(T(3), S(), fg="helper_kwargs", stack=("helper_kwargs_call", "helper_kwargs"))
def break_in_callee_with_kwargs(x, rec):
    y = _helper_kwargs(x + 1, scale=2.0, rec=rec)  # @helper_kwargs_call
    return y.sum() * x


# ======================================================================================= callees of callees
def _inner_most(t):
    t = t + 1
    print("innermost", t.shape[0])  # @inner_most
    return t * 2


def _middle(t):
    u = t.sin()
    v = _inner_most(u)  # @middle_call
    return v + u


@breaks(T(3), fg="inner_most", stack=("outer_call", "middle_call", "inner_most"), graphs=6, nbreaks=3)
def break_in_callee_of_callee(x):
    y = x * 3
    z = _middle(y)  # @outer_call
    return z.exp()


def _leaf_branch(t, rec):
    rec.log.append("leaf")
    if t.sum() > 0:  # @leaf_branch
        return t * 2
    return t / 2


def _mid_prints(t, rec):
    print("mid before")  # @mid_print
    r = _leaf_branch(t + 1, rec)
    print("mid after")
    return r


@breaks(Alt(3), S(), fg="several_first")
def breaks_at_several_levels(x, rec):
    y = x * 2
    eager_only(y, rec)  # @several_first
    z = _mid_prints(y, rec)  # @outer_mid_call
    return z + y


# ========================================================================================== multiple breaks
@breaks(T(3), fg="three_prints_1", graphs=4, nbreaks=3)
def three_prints(x):
    a = x.sin()
    print("one")  # @three_prints_1
    b = a.cos()
    print("two")
    c = b.exp()
    print("three")
    return c + 1


@breaks(Alt(4), S(), fg="mixed_1")
def mixed_breaks(x, rec):
    y = x * 2
    eager_only(y, rec)  # @mixed_1
    v = y.sum().item()
    print(f"v={v:.3f}")
    if y.mean() > 0:
        y = y + 1
    n = vars(rec)["n"]
    rec.log.append(n)
    return y * v


# ================================================================================================== globals
@breaks(T(3), fg="global_break", globals_=("GCOUNT", "GLOG"), graphs=2, nbreaks=1)
def globals_mutated_around_break(x):
    global GCOUNT
    GCOUNT += 1
    GLOG.append("start")
    y = x * 2
    print("count", GCOUNT)  # @global_break
    GCOUNT += 10
    GLOG.append(GCOUNT)
    return y + GCOUNT


@breaks(T(3), fg="global_cfg", globals_=("GCFG",))
def global_dict_read_and_written_across_break(x):
    GCFG["calls"] += 1
    y = x * GCFG["scale"]
    eager_only(y)  # @global_cfg
    GCFG["scale"] = GCFG["scale"] + 1
    return y * GCFG["scale"]


# ======================================================================================= nn.Module forwards
class PrintingBlock(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)

    def forward(self, x):
        h = torch.relu(self.lin(x))
        print("block", h.shape[-1])  # @block_print
        return h + x


@breaks(T(2, 4), fg="block_print", stack=("seq_call", "block_print"))
class ModuleWithPrintingSubmodules(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([PrintingBlock(4) for _ in range(2)])
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)  # @seq_call
        return self.head(x)


class GatedBlock(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)
        self.last = None

    def forward(self, x):
        h = self.lin(x)
        if h.mean() > 0:  # @gated_branch
            self.last = "pos"
            return h.relu()
        self.last = "neg"
        return h.sigmoid()


@breaks(T(3, 4), fg="gated_branch", stack=("gated_call", "gated_branch"))
class ModuleWithDataDependentSubmodule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = torch.nn.Linear(4, 4)
        self.gate = GatedBlock(4)

    def forward(self, x):
        y = self.gate(self.pre(x))  # @gated_call
        return y * 2


@breaks(T(4, 3), fg="seq_item")
class SequentialWithItemLoggingModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
        self.last_norm = None

    def forward(self, x):
        y = self.net(x)
        self.last_norm = round(y.norm().item(), 4)  # @seq_item
        return F.softmax(y, -1)


class NoGradBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("running", torch.zeros(3))

    def forward(self, x):
        with torch.no_grad():
            self.running.mul_(0.5).add_(x.mean(0))
            print("running updated")  # @buffer_print
        return self.lin(x) + self.running


@breaks(T(2, 3), fg="buffer_print", stack=("buffer_call", "buffer_print"))
class ModuleBufferUpdateAcrossBreak(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = NoGradBlock()

    def forward(self, x):
        return self.block(x).sum(-1)  # @buffer_call



# ================================================================================== generators and closures
def _gen_prints(xs):
    for t in xs:
        print("gen yields")  # @gen_print
        yield t * 2


@breaks([T(3), T(3)], fg="gen_print", stack=("gen_consume", "gen_print"), graphs=2, ops=("add", "mul"))
def break_inside_generator_consumed_by_compiled_code(xs):
    base = xs[0] + xs[1]
    vals = list(_gen_prints(xs))  # @gen_consume
    return base * vals[0] + vals[1]


@breaks(T(3), fg="closure_print", stack=("closure_call", "closure_print"))
def break_inside_closure_with_nonlocal(x):
    count = 0

    def bump(t):
        nonlocal count
        count += 1
        print("bump", count)  # @closure_print
        return t * 2

    y = bump(x)  # @closure_call
    y = bump(y + 1)
    return y, count


@breaks(T(3), S(), fg="lambda_break", stack=("lambda_map", "lambda_break"))
def break_inside_lambda_called_in_loop(x, rec):
    f = lambda t: eager_only(t, rec, "lam")  # noqa: E731  # @lambda_break
    outs = [f(x), f(x + 1)]  # @lambda_map
    return outs[0] + outs[1]


# ============================================================================== exceptions leaving the call
@breaks(T(3), S(), fg="uncaught_print", raises=KeyError)
def uncaught_exception_after_break_runs_finally_once(x, rec):
    try:
        y = x * 2
        print("about to fail")  # @uncaught_print
        rec.d["y_sum_positive"] = rec.n == 0
        raise KeyError("missing")
    finally:
        rec.log.append("finally")
        rec.n += 1


@breaks(T(3), S(), fg="uncaught_native", raises=ValueError)
def uncaught_exception_from_native_call_through_user_ctx(x, rec):
    with LogCtx(rec, "cm"):
        y = x.exp()
        eager_raises(y, rec)  # @uncaught_native
        rec.log.append("not reached")


@breaks(T(3), S(), fg="ctx_exc_print")
def user_ctx_exit_sees_exception_raised_after_break(x, rec):
    y = x + 1
    try:
        with LogCtx(rec, "cm"):
            print("in cm")  # @ctx_exc_print
            y = y * 2
            raise RuntimeError("boom")
    except RuntimeError as e:
        rec.d["caught"] = e.args[0]
    return y


# ===================================================================================== more module forwards
class CountingBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = self.lin(x)
        eager_only(y)  # @counting_block
        return y * self.calls


# the counter's value is read by the graph after the break: every call has a new value (cached=False)
@breaks(T(2, 3), fg="counting_block", stack=("counting_call", "counting_block"), cached=False)
class ModuleCounterAcrossBreak(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = CountingBlock()

    def forward(self, x):
        return self.block(x).tanh()  # @counting_call


@breaks(T(2, 4), fg="enum_layers_print", ops=("linear", "tanh", "abs", "mean"))
class EnumerateModuleListWithPrint(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = torch.tanh(layer(x))
            print("layer", i, round(x.abs().mean().item(), 3))  # @enum_layers_print
        return x


class PrintingLoss(torch.nn.Module):
    def forward(self, pred, target):
        loss = F.mse_loss(pred, target)
        print("loss computed")  # @loss_print
        return loss


@breaks(T(4, 3), T(4, 2), fg="loss_print", stack=("loss_call", "loss_print"))
class ModelAndLossWithBreakInLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 2)
        self.loss = PrintingLoss()

    def forward(self, x, target):
        return self.loss(self.net(x), target)  # @loss_call


# ==================================================================================================== tests
TAGS = tag_lines(THIS_FILE)


@pytest.fixture(autouse=True)
def _isolate_global_torch_state():
    """A failing test must not leak grad mode or autocast state into the next one."""
    grad, ac = torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")
    ac_dtype = torch.get_autocast_dtype("cpu")
    yield
    torch.set_grad_enabled(grad)
    torch.set_autocast_enabled("cpu", ac)
    torch.set_autocast_dtype("cpu", ac_dtype)


def _reset_globals(names):
    for n in names:
        globals()[n] = copy.deepcopy(_GLOBAL_INIT[n])


def _snapshot_globals(names):
    return {n: copy.deepcopy(globals()[n]) for n in names}


def _state_of(v):
    """Comparable view of the arguments after a call: Rec objects by their attributes."""
    from tests.capture.graph_break_table import Rec
    if isinstance(v, Rec):
        d = dict(vars(v))
        d["d"] = {k: (vars(x) if isinstance(x, Scaler) else x) for k, x in d["d"].items()}
        d["rng"] = d["rng"].getstate()
        return ("Rec", d)
    if isinstance(v, (list, tuple)):
        return type(v)(_state_of(x) for x in v)
    if isinstance(v, dict):
        return {k: _state_of(x) for k, x in v.items()}
    return v


def _fresh_target(prog):
    if prog.module:
        torch.manual_seed(0)
        return prog.fn()
    return prog.fn


class Raised:
    """What a call that raised returns here: the exception's type and message."""

    def __init__(self, e: BaseException):
        self.type, self.msg = type(e), str(e)

    def __eq__(self, other):
        return type(other) is Raised and (self.type, self.msg) == (other.type, other.msg)

    def __repr__(self):
        return f"raised {self.type.__name__}({self.msg!r})"


def _call_capturing(fn, args, kwargs, globals_, raises=None):
    _reset_globals(globals_)
    buf = io.StringIO()
    grad0, ac0 = torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")
    with contextlib.redirect_stdout(buf):
        try:
            out = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001
            if raises is None or not isinstance(e, raises):
                raise
            out = Raised(e)
    state = (torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"))
    assert state == (grad0, ac0), f"grad/autocast state after the call {state} != before {(grad0, ac0)}"
    return out, buf.getvalue(), _snapshot_globals(globals_)


def _stats_compiled():
    s = ember.stats()
    return s["frames_compiled"], s["graphs_compiled"]


def _run_and_compare(prog, backend, fullgraph=False):
    eager_fn = _fresh_target(prog)
    target = copy.deepcopy(eager_fn) if prog.module else prog.fn
    compiled = ember.compile(target, backend=backend, fullgraph=fullgraph)
    for run in range(prog.runs):
        g = torch.Generator().manual_seed(run + 1)
        args, kwargs = make_args(prog.args, g, run), make_args(prog.kwargs, g, run)
        rg = prog.grad
        e_args, e_kwargs = clone_value((args, kwargs), requires_grad=rg)
        c_args, c_kwargs = clone_value((args, kwargs), requires_grad=rg)
        before = _stats_compiled()

        torch.manual_seed(100 + run)
        expected, e_out, e_glob = _call_capturing(eager_fn, e_args, e_kwargs, prog.globals_, prog.raises)
        if prog.raises is not None:
            assert isinstance(expected, Raised), f"the table says {prog.name} raises, but eager returned"
        e_rng = torch.get_rng_state()
        torch.manual_seed(100 + run)
        actual, c_out, c_glob = _call_capturing(compiled, c_args, c_kwargs, prog.globals_, prog.raises)
        c_rng = torch.get_rng_state()

        where = f"run {run}"
        assert c_out == e_out, f"{where}: printed output differs\n--- eager:\n{e_out}--- ember:\n{c_out}"
        assert_same(actual, expected, f"{where}: out", **prog.tol)
        assert_same(_state_of(c_args), _state_of(e_args), f"{where}: args after the call", **prog.tol)
        assert_same(_state_of(c_kwargs), _state_of(e_kwargs), f"{where}: kwargs after the call", **prog.tol)
        assert_same(c_glob, e_glob, f"{where}: globals after the call")
        assert torch.equal(c_rng, e_rng), f"{where}: the compiled call consumed different randomness"
        if prog.module:
            assert_module_state_same(target, eager_fn)
            for (n, cm), em in zip(target.named_modules(), eager_fn.modules()):
                for k, v in vars(em).items():
                    if not k.startswith("_") and isinstance(v, list):
                        assert getattr(cm, k) == v, f"{where}: module {n}.{k}: {getattr(cm, k)!r} != {v!r}"
        if prog.cached and run >= (2 if prog.runs > 2 else 1):
            assert _stats_compiled() == before, (
                f"{where}: the call compiled again (frames, graphs) {before} -> {_stats_compiled()}")

        if prog.grad and prog.raises is None:
            e_loss, c_loss = cotangent_loss(expected), cotangent_loss(actual)
            assert (e_loss is None) == (c_loss is None), f"{where}: one side has no differentiable output"
            if e_loss is None:
                continue
            e_loss.backward()
            c_loss.backward()
            leaves = [(f"input {i}", c, e) for i, (c, e) in
                      enumerate(zip(tensors_in((c_args, c_kwargs)), tensors_in((e_args, e_kwargs))))]
            if prog.module:
                leaves += [(f"param {n}", c, e) for (n, c), e in
                           zip(target.named_parameters(), eager_fn.parameters())]
            for what, c, e in leaves:
                if e.grad is None:
                    assert c.grad is None, f"{where}: grad of {what}: eager has none, ember has one"
                else:
                    assert c.grad is not None, f"{where}: grad of {what}: missing under ember"
                    torch.testing.assert_close(c.grad, e.grad, **prog.tol,
                                               msg=lambda m, w=what: f"{where}: grad of {w}: {m}")
            if prog.module:
                eager_fn.zero_grad()
                target.zero_grad()


PROGRAM_IDS = [p.name for p in PROGRAMS]

# Known gaps, each an open problem listed in the closing note: strict, so a fix makes them fail loudly
# until the mark is removed. Results stay correct in all of them (the frame falls back to ember's interpreter).
_GENERATOR = ("a generator frame suspended at the break cannot be handed to the continuation yet: the frame runs "
              "in ember's interpreter, so no graph is compiled around the break")
_AUTOCAST_AOT = ("the autocast context entered in one graph is handed to the next as a graph value, which "
                 "AOT autograd rejects (ember's own backends will take it)")
KNOWN_GAPS = {
    ("program", "break_inside_contextmanager_generator"): _GENERATOR,
    ("explain", "break_inside_contextmanager_generator"): _GENERATOR,
    ("aot", "break_inside_autocast"): _AUTOCAST_AOT,
    ("aot", "print_inside_autocast_then_exit"): _AUTOCAST_AOT,
    ("explain", "break_inside_autocast"): "leaving an autocast region entered before a break is one more break",
    ("explain", "class_defined_inside"): "LOAD_BUILD_CLASS and the __build_class__ call are two breaks",
    ("explain", "unsupported_builtin_globals"): "globals() and the `in` on the module dict it returns are two breaks",
}


def _params(kind, progs):
    return [pytest.param(p, id=p.name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[(kind, p.name)]))
            if (kind, p.name) in KNOWN_GAPS else pytest.param(p, id=p.name) for p in progs]


@pytest.mark.parametrize("prog", _params("program", PROGRAMS))
def test_break_program(prog, counter):
    """Compiled (counting backend: graphs run as captured) == eager, run after run."""
    _run_and_compare(prog, counter)
    assert counter.count >= 1 or prog.graphs == 0, "no graph was compiled around the break"


@pytest.mark.parametrize("prog", _params("aot", PROGRAMS))
def test_break_program_aot_eager(prog, fresh_ember):
    """The same with AOT autograd: gradients flow through the sequence of compiled autograd functions
    (ember's "aot_eager" backend once it is registered, PyTorch's aot_eager as a custom backend until
    then)."""
    if "aot_eager" in ember.list_backends():
        backend = "aot_eager"
    else:
        from torch._dynamo.backends.registry import lookup_backend
        backend = lookup_backend("aot_eager")
    _run_and_compare(prog, backend)


@pytest.mark.parametrize("prog", PROGRAMS, ids=PROGRAM_IDS)
def test_fullgraph_reports_break_line(prog, counter):
    target = _fresh_target(prog)
    compiled = ember.compile(target, backend=counter, fullgraph=True)
    g = torch.Generator().manual_seed(1)
    args, kwargs = make_args(prog.args, g, 0), make_args(prog.kwargs, g, 0)
    if prog.full == "":         # fullgraph captures it whole (.item() read when the graph runs): eager's values
        _run_and_compare(prog, counter, fullgraph=True)
        return
    _reset_globals(prog.globals_)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(ember.Unsupported) as info:
        compiled(*args, **kwargs)
    e = info.value
    expected = f"{THIS_FILE}:{TAGS[prog.full or prog.fg]}"
    assert e.user_stack, f"Unsupported without a user stack: {e}"
    ours = [fr for fr in e.user_stack if fr.startswith(THIS_FILE + ":")]
    innermost = e.user_stack[-1]
    assert innermost == expected, f"break reported at {innermost}, expected {expected}\n{e}"
    assert expected in str(e), str(e)
    if prog.stack:
        want = [f"{THIS_FILE}:{TAGS[t]}" for t in prog.stack]
        assert ours == want, f"user stack {e.user_stack}: frames in this file != {want}"
    assert e.reason and e.hint is not None
    assert buf.getvalue() == "", f"the program printed before fullgraph raised: {buf.getvalue()!r}"


COUNTED = [p for p in PROGRAMS if p.graphs is not None or p.breaks is not None or p.ops]


@pytest.mark.parametrize("prog", _params("explain", COUNTED))
def test_explain_counts(prog, fresh_ember):
    target = _fresh_target(prog)
    g = torch.Generator().manual_seed(1)
    args, kwargs = make_args(prog.args, g, 0), make_args(prog.kwargs, g, 0)
    eargs, ekwargs = clone_value((args, kwargs))
    expected, _, _ = _call_capturing(copy.deepcopy(target) if prog.module else target, eargs, ekwargs,
                                     prog.globals_)
    _reset_globals(prog.globals_)
    with contextlib.redirect_stdout(io.StringIO()):
        res = ember.explain(target)(*args, **kwargs)
    assert_same(res.out, expected, **prog.tol)
    report = str(res)
    if prog.graphs is not None:
        assert res.graph_count == prog.graphs, report
        assert len(res.graphs) == len(res.ops_per_graph) == prog.graphs
    if prog.breaks is not None:
        assert res.graph_break_count == prog.breaks, report
    captured = {op for ops in res.ops_per_graph for op in ops}
    missing = [op for op in prog.ops if op not in captured]
    assert not missing, f"ops {missing} ran outside every captured graph\n{report}"
    assert len(res.break_reasons) == res.graph_break_count
    first = f"{THIS_FILE}:{TAGS[prog.fg]}"
    assert res.break_reasons and first in res.break_reasons[0].user_stack, report


def test_table_size_and_tags():
    assert len(PROGRAMS) >= 40
    assert len(set(PROGRAM_IDS)) == len(PROGRAMS)
    for p in PROGRAMS:
        assert p.fg in TAGS, f"{p.name}: no line tagged @{p.fg}"
        for t in p.stack:
            assert t in TAGS, f"{p.name}: no line tagged @{t}"


# =============================================================================== 12 layers, a print in each
from tests.capture.graph_break_models import LoopPrintingStack, PrintingStack  # noqa: E402

MODELS_DIR = str(Path(__file__).resolve().parent / "graph_break_models.py")


def _aot_backend():
    if "aot_eager" in ember.list_backends():
        return "aot_eager"
    from torch._dynamo.backends.registry import lookup_backend
    return lookup_backend("aot_eager")


@pytest.mark.parametrize("backend", ["counting", "aot_eager"])
@pytest.mark.parametrize("cls", [PrintingStack, LoopPrintingStack], ids=["print_in_block", "print_in_loop"])
def test_twelve_layer_model_with_print_per_layer(cls, backend, fresh_ember):
    torch.manual_seed(0)
    eager = cls(d=32, n=12)
    model = copy.deepcopy(eager)
    counter = CountingBackend()
    compiled = ember.compile(model, backend=counter if backend == "counting" else _aot_backend())
    for run in range(3):
        x = torch.randn(4, 32, generator=torch.Generator().manual_seed(run))
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        before = _stats_compiled()
        expected, e_out, _ = _call_capturing(eager, (xe,), {}, ())
        actual, c_out, _ = _call_capturing(compiled, (xc,), {}, ())
        assert e_out.count("\n") == 12
        assert c_out == e_out, f"run {run}: printed output differs\n--- eager:\n{e_out}--- ember:\n{c_out}"
        assert_same(actual, expected)
        cotangent_loss(expected).backward()
        cotangent_loss(actual).backward()
        torch.testing.assert_close(xc.grad, xe.grad)
        for (n, p), pe in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, pe.grad, msg=lambda m, n=n: f"run {run}: grad of {n}: {m}")
        model.zero_grad()
        eager.zero_grad()
        if run >= 1 and cls is PrintingStack:
            assert _stats_compiled() == before, f"run {run}: the call compiled again"
    if backend == "counting":
        assert counter.count >= 1, "none of the model's tensor work was compiled"


def test_twelve_layer_model_explain(fresh_ember):
    """One graph for the input projection, one shared by the 12 identical blocks (before the print), one for
    the head."""
    torch.manual_seed(0)
    model = PrintingStack(d=32, n=12)
    x = torch.randn(4, 32)
    with contextlib.redirect_stdout(io.StringIO()):
        res = ember.explain(model)(x)
    assert res.graph_count == 3, str(res)
    where = {r.user_stack[-1] for r in res.break_reasons}
    assert f"{MODELS_DIR}:{tag_lines(MODELS_DIR)['block12_print']}" in where, str(res)


def test_twelve_layer_model_fullgraph_names_the_print_line(fresh_ember):
    torch.manual_seed(0)
    compiled = ember.compile(PrintingStack(d=32, n=12), fullgraph=True)
    with pytest.raises(ember.Unsupported) as info:
        compiled(torch.randn(4, 32))
    tags = tag_lines(MODELS_DIR)
    assert info.value.user_stack[-2:] == [f"{MODELS_DIR}:{tags['stack12_call']}",
                                          f"{MODELS_DIR}:{tags['block12_print']}"], str(info.value)
