"""Backends: what runs a captured FX graph. A backend is ``backend(gm, example_inputs) -> callable``, the
torch.compile custom-backend contract. Named backends are made per compile from the options."""
from __future__ import annotations

from typing import Any, Callable

_REGISTRY: dict[str, Callable[[Any], Callable]] = {}
# the whole-graph cache (``ember.graphcache``, a layer above the backends) registers its factory here when
# ``ember.compile`` is first used: ``factory(gm, options, finish)`` -> a GraphCache, or None when it is off
GRAPH_CACHE: list[Callable[[Any, Any, Callable], Any]] = []


def register_backend(name: str | None = None, *, factory: bool = False):
    """``@ember.register_backend("mine")`` on a ``backend(gm, example_inputs)`` function. With
    ``factory=True`` the decorated function takes the CompileOptions and returns such a backend."""
    def deco(fn):
        key = name or fn.__name__
        _REGISTRY[key] = fn if factory else (lambda options, _fn=fn: _fn)
        return fn
    if callable(name):
        fn, name = name, None
        return deco(fn)
    return deco


def list_backends() -> list[str]:
    return sorted(_REGISTRY)


def lookup_backend(name: str, options: Any) -> Callable:
    if name not in _REGISTRY:
        raise ValueError(f"unknown backend {name!r}; available: {', '.join(list_backends())}")
    return _REGISTRY[name](options)


@register_backend("eager")
def eager(gm, example_inputs):
    """Run the captured FX graph as is."""
    return gm.forward


@register_backend("inductor")
def inductor(gm, example_inputs):
    """PyTorch's own Inductor on ember's captured graph (for comparison)."""
    from torch._inductor.compile_fx import compile_fx  # reference backend: allowed here only
    return compile_fx(gm, example_inputs)


def ember_backend(gm, example_inputs):
    """ember's default compiler as a torch.compile backend: ``torch.compile(m, backend=ember.backend)``."""
    from ..options import CompileOptions
    return _REGISTRY["ember"](CompileOptions())(gm, example_inputs)
from . import aot as _aot  # noqa: E402,F401  (registers "aot_eager")
from . import compiler as _compiler  # noqa: E402,F401  (registers "ember")
from . import cudagraphs as _cudagraphs  # noqa: E402,F401  (registers "cudagraphs")
