"""Grad-mode and autocast context managers inside the trace: their effect is recorded as graph nodes (so the
graph reproduces it) and applied to the trace's own state (so metadata stays exact)."""
from __future__ import annotations

import functools

import torch

from .. import rules as R
from ..sources import literal
from ..values import Const, MethodOf, Value
from .graph import location_meta
from .ops import record


def _enter_autocast(device_type, dtype, enabled, cache_enabled):
    ctx = torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    ctx.__enter__()
    return ctx


def _exit_autocast(ctx):
    ctx.__exit__(None, None, None)


class GradModeCtx(Value):
    """torch.no_grad() / enable_grad() / set_grad_enabled(b): ``mode`` is the grad mode inside."""
    __slots__ = ("mode", "prev", "cls")

    def __init__(self, mode: bool, cls: type, prev: bool | None = None):
        super().__init__(None)
        self.mode = mode
        self.prev = prev
        self.cls = cls

    def python_type(self):
        return self.cls


class AutocastCtx(Value):
    """torch.autocast(...) in the trace. ``handle`` is the graph node holding the real context object once
    entered; ``real`` is a context object entered before a graph break (its exit runs natively)."""
    __slots__ = ("device_type", "dtype", "enabled", "cache", "handle", "prev", "real")

    def __init__(self, device_type, dtype, enabled, cache, real=None, source=None):
        super().__init__(source)
        self.device_type, self.dtype, self.enabled, self.cache = device_type, dtype, enabled, cache
        self.handle = None
        self.prev = None
        self.real = real

    def python_type(self):
        return torch.autocast


def set_grad(d, f, mode: bool) -> None:
    st = d.torch
    if st.grad_enabled != mode:
        record(d, f, "call_function", torch._C._set_grad_enabled, [Const(mode)], {},
               meta_fn=lambda m: None)
        st.grad_enabled = mode


@R.GETATTR.register(GradModeCtx, AutocastCtx)
def _ctx_getattr(d, f, v, name):
    if name in ("__enter__", "__exit__", "clone"):
        return MethodOf(v, name)
    raise d.unsupported(f, f"{v.python_type().__name__}.{name} inside compiled code")


@R.METHOD.register(GradModeCtx)
def _grad_method(d, f, v: GradModeCtx, name, args, kwargs):
    if name == "__enter__":
        if v.prev is None:
            v.prev = d.torch.grad_enabled
        set_grad(d, f, v.mode)
        return Const(None)
    if name == "__exit__":
        set_grad(d, f, v.prev)
        return Const(False)
    return GradModeCtx(v.mode, v.cls)


class GradModeFn(Value):
    """``torch.no_grad()(fn)`` / ``@torch.enable_grad()`` on a function made or reached in the trace: calling
    it runs ``fn`` under the context's grad mode and restores the mode after, as torch's decorator does."""
    __slots__ = ("ctx", "fn")

    def __init__(self, ctx: GradModeCtx, fn: Value):
        super().__init__(None)
        self.ctx = ctx
        self.fn = fn

    def python_type(self):
        return type(_make_grad_fn_example)


def _make_grad_fn_example():
    pass


@R.CALL.register(GradModeCtx)
def _grad_ctx_call(d, f, v: GradModeCtx, args, kwargs):
    import inspect
    if len(args) != 1 or kwargs:
        raise d.unsupported(f, f"calling a {v.cls.__name__} object with {len(args)} arguments")
    fn = args[0]
    real = fn.as_python() if type(fn) is Const else None
    if inspect.isgeneratorfunction(real) or getattr(getattr(fn, "code", None), "co_flags", 0) & 0x20:
        raise d.unsupported(f, f"a {v.cls.__name__} decorator on a generator function")
    if v.cls is torch.set_grad_enabled and v.prev is not None:
        set_grad(d, f, v.prev)      # set_grad_enabled(m)(fn): the mode set at construction is undone
    return GradModeFn(GradModeCtx(v.mode, v.cls), fn)


@R.CALL.register(GradModeFn)
def _grad_fn_call(d, f, v: GradModeFn, args, kwargs):
    prev = d.torch.grad_enabled
    set_grad(d, f, v.ctx.mode)
    try:
        return d.call(f, v.fn, list(args), dict(kwargs))
    finally:
        set_grad(d, f, prev)


@R.METHOD.register(AutocastCtx)
def _autocast_method(d, f, v: AutocastCtx, name, args, kwargs):
    st = d.torch
    if v.real is not None:
        raise d.unsupported(f, "leaving an autocast region entered before a graph break",
                            "its exit runs natively; the code after it is compiled again")
    if name == "__enter__":
        v.prev = st.autocast.get(v.device_type)
        v.handle = st.graph.call_function(_enter_autocast, (v.device_type, v.dtype, v.enabled, v.cache))
        v.handle.meta.update(location_meta(f))
        st.n_calls += 1
        dt = v.dtype or (torch.get_autocast_dtype(v.device_type) if hasattr(torch, "get_autocast_dtype") else
                         (torch.bfloat16 if v.device_type == "cpu" else torch.float16))
        st.autocast[v.device_type] = (bool(v.enabled), dt)
        return v
    if name == "__exit__":
        n = st.graph.call_function(_exit_autocast, (v.handle,))
        n.meta.update(location_meta(f))
        st.n_calls += 1
        if v.prev is None:
            st.autocast.pop(v.device_type, None)
        else:
            st.autocast[v.device_type] = v.prev
        return Const(False)
    return AutocastCtx(v.device_type, v.dtype, v.enabled, v.cache)


def make_grad_ctx(d, f, cls, args, kwargs):
    if cls is torch.no_grad:
        return GradModeCtx(False, cls)
    if cls is torch.enable_grad:
        return GradModeCtx(True, cls)
    # set_grad_enabled(mode) takes effect at construction; exiting restores the previous mode
    mode = bool(d.as_python(f, args[0] if args else kwargs["mode"]))
    prev = d.torch.grad_enabled
    set_grad(d, f, mode)
    return GradModeCtx(mode, cls, prev)


def make_autocast(d, f, cls, args, kwargs):
    names = ["device_type", "dtype", "enabled", "cache_enabled"]
    vals = {"dtype": None, "enabled": True, "cache_enabled": None}
    if cls is not torch.autocast and cls is not getattr(torch.amp, "autocast", None):
        vals["device_type"] = "cuda" if "cuda" in cls.__module__ else "cpu"
        names = names[1:]
    for n, a in zip(names, args):
        vals[n] = d.as_python(f, a)
    for k, a in kwargs.items():
        vals[k] = d.as_python(f, a)
    return AutocastCtx(vals["device_type"], vals["dtype"], vals["enabled"], vals["cache_enabled"])


def ctx_classes() -> dict:
    out = {torch.no_grad: make_grad_ctx, torch.enable_grad: make_grad_ctx, torch.set_grad_enabled: make_grad_ctx,
           torch.autocast: make_autocast}
    for mod in ("torch.amp", "torch.cpu.amp", "torch.cuda.amp"):
        try:
            m = __import__(mod, fromlist=["autocast"])
            if hasattr(m, "autocast"):
                out[m.autocast] = make_autocast
        except ImportError:
            pass
    return out


class HandleVar(Value):
    """A non-tensor graph value (the real autocast object) the glue needs after the graph."""
    __slots__ = ("node",)

    def __init__(self, node):
        super().__init__(None)
        self.node = node


def _make_grad_ctx(cls, mode, prev):
    obj = cls.__new__(cls)
    obj.prev = bool(prev)
    if cls is torch.set_grad_enabled:
        obj.mode = mode
    return obj


@R.RECONSTRUCT.register(GradModeCtx)
def _grad_reconstruct(glue, v: GradModeCtx) -> str:
    prev = v.prev if v.prev is not None else torch.is_grad_enabled()
    return f"{glue.cg.bind(_make_grad_ctx, 'make_grad_ctx')}({glue.cg.bind(v.cls, v.cls.__name__)}, {v.mode}, {prev})"


@R.RECONSTRUCT.register(AutocastCtx)
def _autocast_reconstruct(glue, v: AutocastCtx) -> str:
    if v.source is not None:
        return v.source.expr(glue.cg)
    if v.handle is None:
        lit = functools.partial(literal, cg=glue.cg)       # user values: exact literals or bound (ember.emit)
        return (f"{glue.cg.bind(torch.autocast, 'autocast')}({lit(v.device_type)}, "
                f"dtype={glue.cg.bind(v.dtype, 'dtype')}, enabled={lit(v.enabled)}, "
                f"cache_enabled={lit(v.cache)})")
    return glue.output_ref(HandleVar(v.handle))


GRAD_CTX_TYPES = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)


def wrap_ctx(d, obj, source):
    """Context objects that existed before the call (handed over at a graph break)."""
    from ..guards import GuardSet  # noqa: F401  (typing only)
    t = type(obj)
    if isinstance(obj, GRAD_CTX_TYPES):
        # ``prev`` (the mode to restore) exists once the object was entered; a decorator's own context object
        # (``@torch.enable_grad()``) never is (each call enters a clone): its mode is read when entered here
        prev = getattr(obj, "prev", None)
        if source is not None:
            d.guards.type_match(source, t)
            from ..sources import AttrSource
            if prev is None:
                d.guards.add(f"not hasattr({source.expr(d.cg)}, 'prev')", f"{d.cg.plain(source)} was not entered")
            else:
                d.guards.equals(AttrSource(source, "prev"), bool(prev))
        mode = {torch.no_grad: False, torch.enable_grad: True}.get(t, getattr(obj, "mode", True))
        return GradModeCtx(mode, t, None if prev is None else bool(prev))
    if isinstance(obj, torch.autocast):
        if source is not None:
            d.guards.type_match(source, t)
        return AutocastCtx(obj.device, obj.fast_dtype, obj._enabled, obj._cache_enabled, real=obj, source=source)
    return None
