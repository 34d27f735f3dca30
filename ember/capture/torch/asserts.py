"""``assert <tensor>, "msg"`` captured without a graph break.

CPython compiles ``assert c, m`` to ``POP_JUMP_IF_TRUE ok; LOAD_ASSERTION_ERROR; [LOAD_CONST m; CALL]; RAISE``.
When the tested value is a one-element tensor and the message is a constant (or absent), the trace takes the
passing branch and notes a *runtime assertion*: the condition becomes a graph output, and the entry's glue
checks it right after the graph ran, raising ``AssertionError(m)`` before any of the trace's Python side effects
are replayed (frontend.build_entry). The graph computes the condition whatever the backend (C++, Triton), so the
check always runs.

Soundness: eager raises before anything after the assert happens. The glue's side effects already come after
the check; an in-place write to an *input's* storage recorded after a pending assertion would run inside the
graph before the check, so such an op breaks the graph instead (``check_no_mutation_after``), where the check
runs first.
"""
from __future__ import annotations

import torch

from ..values import Const

_JUMPS_IF_TRUE = ("POP_JUMP_IF_TRUE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE")
_CALLS = ("PRECALL", "CALL", "CALL_FUNCTION")


def assert_message(f):
    """When the instruction being run is an assert's jump: ``(True, msg)`` (msg None without a message),
    else ``(False, None)``. Only a constant message qualifies (a computed one may read tensor data)."""
    cur, instrs, ip = f.cur, f.instrs, f.ip
    if cur is None or cur.opname not in _JUMPS_IF_TRUE or ip >= len(instrs):
        return False, None
    if instrs[ip].opname != "LOAD_ASSERTION_ERROR":
        return False, None
    rest = [i for i in instrs[ip + 1:ip + 6] if i.opname not in ("PRECALL", "CACHE", "NOP")]
    if rest and rest[0].opname == "RAISE_VARARGS" and rest[0].arg == 1:
        return True, None
    if (len(rest) >= 3 and rest[0].opname == "LOAD_CONST" and rest[1].opname in _CALLS and rest[1].arg == 0
            and rest[2].opname == "RAISE_VARARGS" and rest[2].arg == 1):
        return True, rest[0].argval
    return False, None


def capture_assert(d, f, t) -> bool:
    """Record ``assert t`` as a runtime assertion when it can be (see the module docstring); False otherwise
    (the caller keeps its graph break)."""
    from .ops import record
    st = d.torch
    ok, msg = assert_message(f)
    if not ok or st.graph is not st.root or t.meta.numel() != 1 or t.meta.dim() > 1:
        return False
    if t.sym is not None and any(type(s) is not int for s in t.sym):
        return False
    cond = t if t.meta.dtype == torch.bool else record(d, f, "call_function", torch.ne, [t, Const(0)], {})
    d.runtime_asserts.append((cond, msg))
    return True


def check_no_mutation_after(d, f, tens, run) -> object:
    """Run ``run()`` (an op's meta kernel); if a runtime assertion is pending and the op wrote in place a tensor
    that shares storage with a graph input (what the caller would see although eager raised first), refuse it:
    a graph break there, so the assertion is checked first. Writes to the graph's own tensors are invisible
    when the assertion fails (outputs and replayed side effects come after the check), so they stay."""
    if not d.runtime_asserts:
        return run()
    before = [_version(t.meta) for t in tens]
    out = run()
    written = [t for t, v in zip(tens, before) if _version(t.meta) != v]
    if written and _storage_keys(written) & _storage_keys(d.torch.inputs):
        raise d.unsupported(f, "an input tensor written in place after an `assert` on a tensor in the same "
                               "graph (the assertion must be checked before the write, as eager does)",
                            "move the in-place op before the assert, or make it out of place")
    return out


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
