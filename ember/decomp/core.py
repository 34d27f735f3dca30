"""The prim object, the prim table and the handler stack that decides what calling a prim does.

A ``Prim`` has a name, a reference implementation in torch ops (``impl``) and a meta rule (``meta``) over
``TensorMeta``. Calling a prim dispatches to the innermost handler: by default the reference implementation
(so decompositions run eagerly on real tensors); ``ember.decomp.interp`` pushes handlers that check meta
rules against the reference, propagate metadata only, or record a prim graph.

The handler stack is per thread: a handler belongs to the trace that pushed it, and two threads compiling at
once (each recording its own prim graph) must not see each other's recorder.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

Handler = Callable[["Prim", tuple, dict], Any]

PRIMS: dict[str, "Prim"] = {}


class Prim:
    """One primitive: ``impl`` runs it on tensors, ``meta`` computes its output metadata."""

    def __init__(self, name: str, impl: Callable[..., Any], meta: Callable[..., Any], kind: str,
                 tags: frozenset = frozenset()) -> None:
        self.name, self.impl, self.meta, self.kind, self.tags = name, impl, meta, kind, tags
        # FX prints call_function targets by module and name.
        self.__name__ = self.__qualname__ = name
        self.__module__ = "ember.decomp.prims"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _STACK.handlers[-1](self, args, kwargs)

    def __repr__(self) -> str:
        return f"prims.{self.name}"


def register_prim(name: str, impl: Callable, meta: Callable, kind: str, tags: tuple = ()) -> Prim:
    if name in PRIMS:
        raise ValueError(f"ember.decomp: prim {name!r} registered twice")
    p = Prim(name, impl, meta, kind, frozenset(tags))
    PRIMS[name] = p
    return p


def is_impure_node(node: Any) -> bool:
    """``torch.fx.Graph.eliminate_dead_code``'s test, knowing prims: a node must run even when nothing reads
    its result if FX deems it impure (mutations, ATen RNG ops) or it calls a ``stateful`` prim, one that draws
    from torch's generator (``bernoulli``, ``native_dropout_mask``, ``rng_seed``): dropping it would leave the
    generator behind eager's, and every later random number of the program would differ."""
    if node.op == "call_function" and isinstance(node.target, Prim):
        return "stateful" in node.target.tags
    return node.is_impure()


def eager_handler(prim: Prim, args: tuple, kwargs: dict) -> Any:
    return prim.impl(*args, **kwargs)


class _Stack(threading.local):
    """The calling thread's handler stack (``__init__`` runs once per thread, on its first use)."""

    def __init__(self) -> None:
        self.handlers: list[Handler] = [eager_handler]


_STACK = _Stack()


@contextlib.contextmanager
def push_handler(h: Handler) -> Iterator[None]:
    handlers = _STACK.handlers
    handlers.append(h)
    try:
        yield
    finally:
        handlers.pop()
