"""The public API: ``ember.compile`` and friends (documented in docs/api.md)."""
from __future__ import annotations

import functools
import inspect
import types
import warnings
import weakref
from typing import Any, Callable

import torch
from torch.utils.hooks import RemovableHandle

from . import counters, logs
from .backends import lookup_backend
from .capture.frontend import STATS, FrameCache, compile_function, new_session
from .capture.torch import plugins_factory
from .capture.torch.plugin import is_torch_op
from .errors import Unsupported
from .graphcache import register as _register_graph_cache
from .options import CompileOptions, make_options

_register_graph_cache()      # the ember backend's whole-graph cache (ember.backends.GRAPH_CACHE)

# every live compile session, for ``reset()``; weak, so that a compiled function the user drops is freed with
# the tensors and objects its entries captured
_ALL_SESSIONS: weakref.WeakSet = weakref.WeakSet()


def _backend_callable(backend: Any, options: CompileOptions) -> tuple[Callable, str]:
    if isinstance(backend, str):
        return lookup_backend(backend, options), backend
    if callable(backend):
        return backend, getattr(backend, "__name__", type(backend).__name__)
    raise ValueError(f"backend must be a name from ember.list_backends() or a callable, not {type(backend).__name__}")


class _Config:
    def __init__(self, fullgraph, dynamic, backend, mode, options):
        if dynamic not in (None, True, False):
            raise ValueError("dynamic must be None, True or False")
        if not isinstance(fullgraph, bool):
            raise ValueError("fullgraph must be a bool")
        self.options = make_options(mode, options)
        self.backend_fn, self.backend_name = _backend_callable(backend, self.options)
        self.fullgraph, self.dynamic, self.mode, self.backend = fullgraph, dynamic, mode, backend
        self.raw_options = options

        self.session = new_session(plugins_factory(self.backend_fn, self.backend_name, self.options, dynamic),
                                   fullgraph=fullgraph, limit=self.options.cache_size_limit, options=self.options)
        _ALL_SESSIONS.add(self.session)

    def frame_cache(self, fn: types.FunctionType, name: str | None = None) -> FrameCache:
        return compile_function(self.session, fn, name)


def compile(model: Any = None, *, fullgraph: bool = False, dynamic: bool | None = None, backend: Any = "ember",
            mode: str | None = None, options: dict | None = None, disable: bool = False):
    """Compile a function, bound method or nn.Module (see API.md). Without ``model``: a decorator."""
    cfg = _Config(fullgraph, dynamic, backend, mode, options)
    if model is None:
        return lambda m: _compile(m, cfg, disable)
    return _compile(model, cfg, disable)


def _compile(model: Any, cfg: _Config, disable: bool):
    if disable:
        return model
    if isinstance(model, torch.nn.Module):
        return OptimizedModule(model, cfg)
    if isinstance(model, types.MethodType) and type(model.__func__) is types.FunctionType:
        return types.MethodType(cfg.frame_cache(model.__func__).dispatch, model.__self__)
    if type(model) is types.FunctionType and is_torch_op(model):
        # a torch function (``F.relu``) is one op of the graph wherever code calls it: compiled as a call of
        # it, not by tracing its own code (torch-function dispatch checks and all)
        return _compile_function(_calling(model), cfg)
    if type(model) is types.FunctionType:
        return _compile_function(model, cfg)
    if callable(model) and type(getattr(type(model), "__call__", None)) is types.FunctionType:
        return types.MethodType(cfg.frame_cache(type(model).__call__).dispatch, model)
    if callable(model) and not isinstance(model, type):
        # a callable without Python code of its own (``torch.sin``, a ``functools.partial``, a builtin bound
        # method): compiled as a Python function that calls it, as torch.compile does
        return _compile_function(_calling(model), cfg)
    raise TypeError(f"ember.compile expects a function, a bound method or an nn.Module (or another callable), "
                    f"got {type(model).__name__}")


def _compile_function(model: types.FunctionType, cfg: _Config) -> Callable:
    inner = model.__dict__.get("__ember_cache__")
    if inner is not None and inner.fn is not None:
        model = inner.fn        # compiling a compiled function compiles its original (the outer wins)
    cache = cfg.frame_cache(model)
    disp = cache.dispatch
    functools.update_wrapper(disp, model)
    disp.__ember_cache__ = cache
    # what torch.compile's own wrappers carry: PyTorch's tools that take a compiled function
    # (torch._dynamo.export, torch.compile of it, torch.compiler.disable) unwrap it to the original
    # instead of tracing ember's dispatcher
    disp._torchdynamo_orig_callable = model
    disp._torchdynamo_wrapper_id = id(disp)
    return disp


def _calling(target: Callable) -> types.FunctionType:
    """A Python function that calls ``target``, named after it (its module and qualname stay ember's)."""
    def call(*args, **kwargs):
        return target(*args, **kwargs)
    functools.update_wrapper(call, target, assigned=("__name__", "__doc__"), updated=())
    return call


class OptimizedModule(torch.nn.Module):
    """A compiled nn.Module. It shares everything with the original (``_orig_mod``): parameters, buffers,
    submodules, ``state_dict()`` keys, train/eval; calling it runs the compiled ``forward``."""

    _OWN = frozenset(("_orig_mod", "_ember_cfg", "_ember_cache", "_ember_call", "_ember_key", "_ember_calls",
                      "_ember_hook_seen"))

    def __init__(self, mod: torch.nn.Module, cfg: _Config):
        super().__init__()
        self.__dict__["_orig_mod"] = mod
        self.__dict__["_ember_cfg"] = cfg
        self.__dict__["_ember_calls"] = {}        # entry function -> (cache, bound dispatcher)
        # `training` is the original's: reads and writes go through to it
        self.__dict__.pop("training", None)
        self._ember_select(mod)

    def _ember_select(self, mod: torch.nn.Module):
        """Compile (once per entry function) what calling ``mod`` runs now: an instance-level ``forward``, a
        ``__call__`` override, the hook-running ``_call_impl`` while the module has hooks, or the class's
        ``forward``. Re-selected on a call that finds an instance ``forward`` assigned or deleted, another
        ``forward`` or ``__call__`` on the class (patched, or the module's class swapped), or a hook handle made
        anywhere since (``RemovableHandle.next_id`` moved): eager would run what changed."""
        d = self.__dict__
        d["_ember_hook_seen"] = RemovableHandle.next_id
        fwd, call = mod.__dict__.get("forward"), type(mod).__call__
        fn, bound = _module_target(mod, fwd, call)
        calls = d["_ember_calls"]
        hit = calls.get(id(fn))
        if hit is None or hit[0] is not fn:
            if bound:
                cache = d["_ember_cfg"].frame_cache(fn, name=f"{type(mod).__name__}.{fn.__name__}")
                run = types.MethodType(cache.dispatch, mod)
            else:                               # a static forward, or a plain function set as `forward`
                run = _compile(fn, d["_ember_cfg"], False)
                cache = getattr(getattr(run, "__func__", run), "__ember_cache__", None)
            hit = calls[id(fn)] = (fn, cache, run)
        _, d["_ember_cache"], d["_ember_call"] = hit
        d["_ember_key"] = (fwd, call, type(mod).forward)

    def __call__(self, /, *args, **kwargs):
        d = self.__dict__
        mod = d["_orig_mod"]
        key = d["_ember_key"]
        if RemovableHandle.next_id != d["_ember_hook_seen"] or mod.__dict__.get("forward") is not key[0] \
                or type(mod).__call__ is not key[1] or type(mod).forward is not key[2]:
            self._ember_select(mod)
        return d["_ember_call"](*args, **kwargs)

    def forward(self, /, *args, **kwargs):
        return self.__call__(*args, **kwargs)

    def __setattr__(self, name: str, value):
        # the wrapper shares its state with the original: attribute writes land there
        if name in OptimizedModule._OWN:
            self.__dict__[name] = value
        else:
            setattr(self.__dict__["_orig_mod"], name, value)

    def __delattr__(self, name: str):
        delattr(self.__dict__["_orig_mod"], name)

    def __getattr__(self, name: str):
        if name in OptimizedModule._OWN:
            try:
                return self.__dict__[name]
            except KeyError:
                raise AttributeError(name) from None
        return getattr(self.__dict__["_orig_mod"], name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._orig_mod)))

    # Python looks protocol methods up on the type, past __getattr__: forward them so a compiled ModuleList,
    # Sequential or ModuleDict is falsy when empty, has a len, iterates, indexes and tests membership as the
    # original (a module without them raises the same TypeError)
    def __bool__(self):
        return bool(self._orig_mod)

    def __len__(self):
        return len(self._orig_mod)

    def __iter__(self):
        return iter(self._orig_mod)

    def __getitem__(self, key):
        return self._orig_mod[key]

    def __contains__(self, key):
        return key in self._orig_mod

    # state and structure are the original module's
    def state_dict(self, *args, **kwargs):
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        return self._orig_mod.load_state_dict(*args, **kwargs)

    def _named_members(self, *args, **kwargs):
        return self._orig_mod._named_members(*args, **kwargs)

    def named_parameters(self, *args, **kwargs):
        return self._orig_mod.named_parameters(*args, **kwargs)

    def named_buffers(self, *args, **kwargs):
        return self._orig_mod.named_buffers(*args, **kwargs)

    def named_children(self):
        return self._orig_mod.named_children()

    def named_modules(self, *args, **kwargs):
        return self._orig_mod.named_modules(*args, **kwargs)

    def train(self, mode: bool = True):
        self._orig_mod.train(mode)
        return self

    def _apply(self, fn, *args, **kwargs):
        self._orig_mod._apply(fn, *args, **kwargs)
        return self

    def zero_grad(self, set_to_none: bool = True):
        self._orig_mod.zero_grad(set_to_none)

    def __reduce_ex__(self, protocol):
        cfg = self._ember_cfg
        if not isinstance(cfg.backend, str):
            raise TypeError("cannot pickle an ember OptimizedModule compiled with a callable backend; "
                            "save `compiled._orig_mod` (or its state_dict()) instead")
        return (_restore_module, (self._orig_mod, cfg.fullgraph, cfg.dynamic, cfg.backend, cfg.mode,
                                  cfg.raw_options))

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r})"


def _module_target(mod: torch.nn.Module, fwd: Any, call: Any) -> tuple[Callable, bool]:
    """What calling ``mod`` runs, and whether it takes ``mod`` as its first argument."""
    if call is not torch.nn.Module.__call__ or _module_has_hooks(mod):
        return (call if type(call) is types.FunctionType else torch.nn.Module._call_impl), True
    if fwd is None:
        if isinstance(inspect.getattr_static(type(mod), "forward"), staticmethod):
            return type(mod).forward, False
        return type(mod).forward, True
    if type(fwd) is types.MethodType and fwd.__self__ is mod and type(fwd.__func__) is types.FunctionType:
        return fwd.__func__, True
    return fwd, False


def _restore_module(mod, fullgraph, dynamic, backend, mode, options):
    return compile(mod, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode, options=options)


def _module_has_hooks(m: torch.nn.Module) -> bool:
    from .capture.torch.modules import _has_hooks
    return _has_hooks(m)


def disable(fn: Callable = None, recursive: bool = True):
    """``fn`` always runs eagerly, also when called from compiled code (where the call is a graph break).
    ``recursive=False`` (torch.compile: compile what ``fn`` calls) is not supported: it warns and runs ``fn`` and
    its callees eagerly, as ``recursive=True`` does."""
    if fn is None:
        return lambda f: disable(f, recursive)
    if not recursive:
        warnings.warn("ember.disable(recursive=False) is not supported yet: the function and everything it calls "
                      "run eagerly (as with recursive=True)", UserWarning, stacklevel=2)

    @functools.wraps(fn)
    def eager(*args, **kwargs):
        return fn(*args, **kwargs)
    eager.__ember_disable__ = True
    return eager


def reset() -> None:
    """Drop every compiled entry, guard and counter."""
    for s in list(_ALL_SESSIONS):
        for c in s.caches:
            c.entries.clear()
            c._entry_fns.clear()
            c._movable.clear()
            c.native = False
        s.resumes.clear()
        s.callees.clear()
    _ALL_SESSIONS.clear()
    STATS.reset()
    counters.reset()


def stats() -> dict[str, int]:
    """Capture's counts, cache hits, and the ATen traces and kernel compiles below capture (``ember.counters``)."""
    return {**STATS.snapshot(), **counters.snapshot()}


def mark_dynamic(t: torch.Tensor, dim: int | list[int], min: int | None = None, max: int | None = None) -> None:
    """Make ``t``'s ``dim`` symbolic on the first call (range ``[max(min, 2), max]``, checked by the guards)."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    if min is not None and max is not None and min > max:
        raise ValueError(f"ember.mark_dynamic: min={min} is larger than max={max}")
    dims = [d % t.dim() if t.dim() else d for d in dims]
    t._ember_dynamic = set(getattr(t, "_ember_dynamic", set())) | set(dims)
    ranges = dict(getattr(t, "_ember_dynamic_ranges", {}))
    for d in dims:
        ranges[d] = (min, max)
    t._ember_dynamic_ranges = ranges


def mark_static(t: torch.Tensor, dim: int | list[int]) -> None:
    dims = [dim] if isinstance(dim, int) else list(dim)
    dims = [d % t.dim() if t.dim() else d for d in dims]
    t._ember_static = set(getattr(t, "_ember_static", set())) | set(dims)


_ = (Unsupported, logs)
