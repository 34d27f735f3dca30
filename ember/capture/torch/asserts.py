"""``assert <tensor>, "msg"`` captured without a graph break.

CPython compiles ``assert c, m`` to ``POP_JUMP_IF_TRUE ok; LOAD_ASSERTION_ERROR; [LOAD_CONST m; CALL];
RAISE`` (``assert not c`` and ``assert c and d`` use a jump-if-false with the raise block on one side;
``assert_jump``). When the tested value is a one-element tensor and the message is a constant (or absent),
the trace takes the passing branch and notes a *runtime assertion*: the condition becomes a graph output,
and the entry's glue checks it right after the graph ran, raising ``AssertionError(m)`` before any of the
trace's Python side effects are replayed (frontend.build_entry). The graph computes the condition whatever
the backend (C++, Triton), so the check always runs.

Soundness: eager raises before anything after the assert happens. The glue's side effects already come after
the check; an in-place write to an *input's* storage recorded after a pending assertion would run inside the
graph before the check, and so would a random op's draw from the generator: such an op breaks the graph
instead (``check_no_mutation_after``), where the check runs first.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..values import Const

_JUMPS = {"POP_JUMP_IF_TRUE": True, "POP_JUMP_FORWARD_IF_TRUE": True, "POP_JUMP_BACKWARD_IF_TRUE": True,
          "POP_JUMP_IF_FALSE": False, "POP_JUMP_FORWARD_IF_FALSE": False, "POP_JUMP_BACKWARD_IF_FALSE": False}
_CALLS = ("PRECALL", "CALL", "CALL_FUNCTION")


def assert_jump(f):
    """When the instruction being run is a conditional jump with an assert's raise block on one side:
    ``(passing, msg)``, the truth value that skips the raise and the constant message (None without one);
    else None. ``assert c`` and ``assert not c`` fall through to the block, ``assert c and d`` jumps to it
    from ``c``; a computed message (it may read tensor data) does not qualify."""
    cur, instrs = f.cur, f.instrs
    jumps_if = _JUMPS.get(cur.opname) if cur is not None else None
    if jumps_if is None or cur.jump_target is None:
        return None
    for at, passing in ((f.ip, jumps_if), (cur.jump_target, not jumps_if)):
        ok, msg = _raise_block(instrs, at)
        if ok:
            return passing, msg
    return None


def _raise_block(instrs, at):
    """Whether ``instrs[at:]`` is ``LOAD_ASSERTION_ERROR [LOAD_CONST m; CALL 0] RAISE_VARARGS 1``, and m."""
    if at >= len(instrs) or instrs[at].opname != "LOAD_ASSERTION_ERROR":
        return False, None
    rest = [i for i in instrs[at + 1:at + 6] if i.opname not in ("PRECALL", "CACHE", "NOP")]
    if rest and rest[0].opname == "RAISE_VARARGS" and rest[0].arg == 1:
        return True, None
    if (len(rest) >= 3 and rest[0].opname == "LOAD_CONST" and rest[1].opname in _CALLS and rest[1].arg == 0
            and rest[2].opname == "RAISE_VARARGS" and rest[2].arg == 1):
        return True, rest[0].argval
    return False, None


def capture_assert(d, f, t, record):
    """Record the assert being run on ``t`` as a runtime assertion when it can be (see the module docstring):
    the truth value that passes it (the trace continues on that side), or None (the caller keeps its graph
    break). ``record`` is ops.record (passed in: ops imports this module)."""
    st = d.torch
    found = assert_jump(f)
    if found is None or st.graph is not st.root or t.meta.numel() != 1 or t.meta.dim() > 1:
        return None
    if t.sym is not None and any(type(s) is not int for s in t.sym):
        return None
    passing, msg = found
    if t.meta.dtype == torch.bool and passing:
        cond = t
    else:
        cond = record(d, f, "call_function", torch.ne if passing else torch.eq, [t, Const(0)], {})
    d.runtime_asserts.append((cond, msg, f.user_frames()))
    return passing


def check_no_mutation_after(d, f, tens, run) -> object:
    """Run ``run()`` (an op's meta kernel); if a runtime assertion is pending and the op wrote in place a
    tensor that shares storage with a graph input (what the caller would see although eager raised first), or
    drew from the random generator, refuse it: a graph break there, so the assertion is checked first. Writes
    to the graph's own tensors are invisible when the assertion fails (outputs and replayed side effects come
    after the check), so they stay."""
    if not d.runtime_asserts:
        return run()
    before = [_version(t.meta) for t in tens]
    with _SeededWatch() as watch:
        out = run()
    if watch.seeded:
        raise d.unsupported(f, "a random op after an `assert` on a tensor in the same graph (it would "
                               "advance the random generator although eager raised first)",
                            "draw the random values before the assert")
    written = [t for t, v in zip(tens, before) if _version(t.meta) != v]
    if written and _storage_keys(written) & _storage_keys(d.torch.inputs):
        raise d.unsupported(f, "an input tensor written in place after an `assert` on a tensor in the same "
                               "graph (the assertion must be checked before the write, as eager does)",
                            "move the in-place op before the assert, or make it out of place")
    return out


class _SeededWatch(TorchDispatchMode):
    """Notes whether an op ran an ATen op that draws from the random generator."""
    seeded = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            self.seeded = True
        return func(*args, **(kwargs or {}))


def _storage_keys(items) -> set:
    keys = set()
    for x in items:
        m = x[2].meta.get("example_value") if type(x) is tuple else x.meta
        if isinstance(m, torch.Tensor):
            try:
                keys.add(m.untyped_storage()._cdata)
            except (RuntimeError, NotImplementedError):
                keys.add(None)      # (no storage to compare: count it as the input's)
    return keys


def _version(m) -> int:
    try:
        return m._version
    except (RuntimeError, AttributeError):
        return -1
