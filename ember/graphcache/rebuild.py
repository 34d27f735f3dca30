"""Training graphs with several differentiable outputs, read from the whole-graph cache.

A call whose loss leaves some differentiable outputs unused runs a backward *variant*: the backward's FX graph
without what depends on the absent tangents alone (``ember.autograd.tangents``), compiled at that call. The
full backward with zero tangents is not the same (``0 * inf = nan`` where eager never computes that branch), and
an entry holds compiled wrappers, not the backward's FX graph.

So a hit's ``CompiledGraphs`` is a ``LazyBackward``: its ``bwd_graph`` is made only when a variant is first
needed, by building the graph again (AOT autograd and the kernel compiler, as a cold process does) on empty
tensors with the metadata of the call that hit. The forward that ran is the cached one, so the rebuilt
forward must be the same program (its saved values then are too): the wrapper sources are compared, and a
difference is an error rather than a backward that reads the saved values wrongly. Only static graphs whose
tensor inputs are distinct, non-view tensors qualify (``Rebuilder.of`` says why not).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch

from ember.autograd.runtime import CompiledGraphs

from . import NotCacheable


class Rebuilder:
    """Builds the graph again from its call's metadata: ``(built, sources)``, sources being the wrapper sources
    of the forward and backward the build compiled."""

    def __init__(self, build: Callable[[list], Any], metas: list, record: Callable[[Callable[[], Any]], list]):
        self.build, self.metas, self.record = build, metas, record

    @staticmethod
    def of(real: Any, args: Sequence[Any], binder: Any, record: Callable) -> "Rebuilder":
        """``NotCacheable`` where the graph cannot be built again from metadata alone."""
        if binder is not None:
            raise NotCacheable("symbolic sizes (the backward variants of a dynamic graph are not rebuilt)")
        if not (isinstance(real, functools.partial) and len(real.args) == 7 and not real.keywords):
            raise NotCacheable("AOT autograd's build cannot be repeated on other inputs")
        metas = []
        storages = set()
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                if a._is_view() or a.storage_offset() or a.untyped_storage().data_ptr() in storages:
                    raise NotCacheable(f"input {i} is a view or shares memory with another input")
                storages.add(a.untyped_storage().data_ptr())
                metas.append(("T", tuple(a.shape), a.stride(), a.dtype, a.device, a.requires_grad))
            else:
                metas.append(("V", a))
        func, head, tail = real.func, real.args[:2], real.args[3:]
        return Rebuilder(lambda fresh: func(*head, fresh, *tail), metas, record)

    def __call__(self) -> tuple[Any, list]:
        fresh = []
        for m in self.metas:
            if m[0] == "V":
                fresh.append(m[1])
                continue
            _, shape, stride, dtype, device, rg = m
            t = torch.empty_strided(shape, stride, dtype=dtype, device=device)
            fresh.append(t.requires_grad_() if rg else t)
        with torch.enable_grad():
            (built, _), sources = self.record(lambda: self.build(fresh))
        return built, sources


def _named_apart(sources: list) -> list:
    """The sources with each wrapper's own name (``forward_3``: a per-process count) replaced."""
    import re
    out = []
    for name, src in sources:
        out.append(re.sub(rf"\b{re.escape(str(name))}(?![0-9])", "G", str(src)))
    return out


class LazyBackward(CompiledGraphs):
    """``CompiledGraphs`` whose ``bwd_graph`` (for backward variants) is rebuilt at its first use."""

    def __init__(self, *args: Any, rebuild: Rebuilder, sources: list, **kwargs: Any) -> None:
        self._rebuild, self._sources, self._bwd_graph = rebuild, sources, None
        super().__init__(*args, **kwargs)

    @property
    def bwd_graph(self) -> Any:      # type: ignore[override]
        if self._bwd_graph is None and self._rebuild is not None:
            rebuild, self._rebuild = self._rebuild, None
            built, sources = rebuild()
            if _named_apart(sources) != _named_apart(self._sources):
                raise RuntimeError(
                    "ember graph cache: this training graph's backward, compiled again for a loss that leaves some "
                    "outputs unused, does not match the cached forward that ran (a graph cache entry from another "
                    "build of ember?); set EMBER_GRAPH_CACHE=0 or clear EMBER_CACHE_DIR")
            self._bwd_graph, self.compile_bwd = built.bwd_graph, built.compile_bwd
        return self._bwd_graph

    @bwd_graph.setter
    def bwd_graph(self, v: Any) -> None:
        self._bwd_graph = v


__all__ = ["Rebuilder", "LazyBackward"]
