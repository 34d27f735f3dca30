"""Run one generated program eagerly and under ``ember.compile`` and compare everything observable.

Each run loads the program's source into a fresh module namespace (so ``STATE`` and closures start clean),
calls it twice on fresh inputs (the second call checks the cached entry and its guards on new values),
optionally backpropagates through the outputs, and records outputs, inputs after the call (in-place side
effects), ``.grad`` of the inputs, printed text, ``STATE`` and the exception if any.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import io
import os
import signal
import tempfile

import torch

from .compare import compare_calls

CALLS = 2


class FuzzTimeout(BaseException):
    """Raised by the alarm in a program that runs too long (a BaseException so user-level excepts miss it)."""


@dataclasses.dataclass
class CallResult:
    out: object = None
    inputs: list = dataclasses.field(default_factory=list)
    grads: list = dataclasses.field(default_factory=list)
    stdout: str = ""
    state: list = dataclasses.field(default_factory=list)
    exc: BaseException | None = None
    stage: str = ""


# relative change of every input value for the conditioning check (``ill_conditioned``): about 2 ulp of float32
PERTURB = 2.0 ** -22


def make_inputs(specs, seed: int, perturb: float = 0.0) -> list:
    vals = []
    for i, spec in enumerate(specs):
        if spec[0] == "tensor":
            gen = torch.Generator().manual_seed(seed * 1009 + i)
            t = torch.randn(spec[2], generator=gen)
            if perturb:
                t = t * (1 + perturb * torch.randn(spec[2], generator=gen).sign())
            vals.append(t.requires_grad_(spec[3]))
        else:
            vals.append(spec[2])
    return vals


def resolve_backend(spec):
    """A backend name, a callable, or ``"module:attr"`` naming a callable (picklable for worker processes)."""
    if isinstance(spec, str) and ":" in spec:
        mod, attr = spec.split(":")
        return getattr(importlib.import_module(mod), attr)
    return spec


_SRC_DIR = None


def load(source: str) -> dict:
    global _SRC_DIR
    if _SRC_DIR is None:
        _SRC_DIR = tempfile.mkdtemp(prefix="ember-fuzz-")
    path = os.path.join(_SRC_DIR, f"prog_{abs(hash(source))}.py")
    with open(path, "w") as f:
        f.write(source)
    ns = {"__name__": "fuzz_program", "__file__": path}
    exec(compile(source, path, "exec"), ns)
    return ns


def snapshot(x):
    if isinstance(x, torch.Tensor):
        return ("T", x.detach().clone(), x.requires_grad, tuple(x.stride()))
    if isinstance(x, (list, tuple)):
        return type(x)(snapshot(v) for v in x) if type(x) in (list, tuple) else tuple(snapshot(v) for v in x)
    if isinstance(x, dict):
        return {k: snapshot(v) for k, v in x.items()}
    try:
        return copy.deepcopy(x)
    except Exception:
        return repr(x)


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)


def backprop(out, inputs) -> list:
    loss = None
    for i, t in enumerate(_tensors(out)):
        if t.requires_grad and t.is_floating_point():
            term = (t * (1 + 0.25 * i)).sum() + (t * t).sum() * 0.05
            loss = term if loss is None else loss + term
    if loss is not None:
        loss.backward()
    return [snapshot(x.grad) if isinstance(x, torch.Tensor) else None for x in inputs]


def _call(fn, ns, inputs, grad: bool) -> CallResult:
    res = CallResult()
    buf = io.StringIO()
    res.stage = "call"
    try:
        with contextlib.redirect_stdout(buf):
            out = fn(*inputs)
            res.out = snapshot(out)
            if grad:
                res.stage = "backward"
                res.grads = backprop(out, inputs)
    except FuzzTimeout:
        raise
    except Exception as e:      # the program's own exception (or ember's): compared by type
        res.exc = e
    res.stdout = buf.getvalue()
    res.inputs = [snapshot(x) for x in inputs]
    res.state = snapshot(ns["STATE"])
    return res


def run_program(prog, backend=None, perturb: float = 0.0) -> list[CallResult]:
    """``backend=None`` runs eagerly; else ``ember.compile(fn, backend=backend)`` after ``ember.reset()``.
    ``perturb``: every input value changed by that relative amount (``ill_conditioned``)."""
    ns = load(prog.source)
    fn = ns["fn"]
    if backend is not None:
        import ember
        ember.reset()
        fn = ember.compile(fn, backend=resolve_backend(backend))
    results = []
    for c in range(CALLS):
        r = _call(fn, ns, make_inputs(prog.inputs, prog.seed * 7 + c, perturb), prog.grad)
        results.append(r)
        if r.exc is not None:
            break
    return results


@contextlib.contextmanager
def alarm(seconds: float):
    def handler(signum, frame):
        raise FuzzTimeout(f"program ran longer than {seconds}s")
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def ill_conditioned(prog, ref, failure, memo: dict) -> bool:
    """Whether a wrong value is one eager shows itself when every input changes by about 2 ulp: the program's
    result is then ill-conditioned at the comparison's tolerance (fuzz seed 307386 iterates ``t * tanh(sin(t))``
    at t ~ 1e3, which turns a 1-ulp difference of sin into 0.27; eager float32 is 640 away from float64 there),
    and a compiled kernel's rounding, no less accurate than eager's, cannot be judged against eager's. Such
    a program counts as soft, not as a failure. A changed branch, print or exception is as much ill-conditioning
    as a changed value (the perturbed eager run differs in the same aspect)."""
    if failure is None or failure.kind != "wrong" or failure.aspect == "call count":
        return False
    if "run" not in memo:
        try:
            memo["run"] = run_program(prog, None, PERTURB)
        except Exception:           # the harness's own failure: no verdict, the failure stands
            memo["run"] = None
    if memo["run"] is None:
        return False
    moved, _ = compare_calls(ref, memo["run"])
    return moved is not None and moved.kind == "wrong" and moved.aspect == failure.aspect


def check(prog, backends, timeout: float = 60.0) -> dict:
    """Compare each backend with eager. Returns ``{backend: Failure | None}`` and the soft (stride) notes."""
    failures, soft = {}, {}
    try:
        with alarm(timeout):
            ref = run_program(prog)
    except FuzzTimeout:
        return {"failures": {}, "soft": {}, "eager_timeout": True, "eager_raised": "timeout"}
    ill: dict = {}
    for b in backends:
        try:
            with alarm(timeout):
                got = run_program(prog, b)
                failures[str(b)], soft[str(b)] = compare_calls(ref, got)
                if ill_conditioned(prog, ref, failures[str(b)], ill):
                    soft[str(b)] = [f"ill-conditioned: {failures[str(b)].detail}"]
                    failures[str(b)] = None
        except FuzzTimeout:
            from .compare import Failure
            failures[str(b)] = Failure("timeout", "timeout", f"over {timeout}s")
        except Exception as e:      # the harness's own compare/snapshot failed on an odd output
            from .compare import Failure
            failures[str(b)] = Failure("crash", f"harness {type(e).__name__}", str(e)[:200])
    return {"failures": failures, "soft": soft, "eager_timeout": False,
            "eager_raised": next((type(r.exc).__name__ for r in ref if r.exc is not None), None)}
