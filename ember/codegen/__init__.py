"""Code generation: scheduled loop IR -> kernels (Triton for CUDA, C++/OpenMP for CPU, or the Python
reference backend) and the generated Python wrapper that runs them.

``compile_graph(gm, kind, options)`` is the kernel compiler AOT autograd calls for each final prim graph
(``aot_compile(..., compile_graph=...)``): the named passes of ``passes.PIPELINE`` (lower, schedule, plan
memory, combine, generate kernels, matmul templates, wrap), each one's output IR printed by ``EMBER_LOGS=passes``
and checked by the verifiers with ``verify_ir``. A graph the loop IR cannot represent runs as the FX graph (with a
perf hint).

With ``options.max_autotune`` the Triton kernels are ``autotune.Autotuned`` choices between configurations, and
CUDA matmuls become ``triton_mm.MatmulStep``s (templates with fused epilogues against cuBLAS). Autotuning lives
here rather than in ``ember.runtime`` (DESIGN.md's table) because the candidates are generated code and imports
go one way: the runtime package may import codegen, not the reverse.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch.fx as fx

from .passes import PIPELINE, GraphCompile, Pass, kernel_backend, run_pipeline

__all__ = ["compile_graph", "kernel_backend", "cache_root", "graph_symbols", "PIPELINE", "Pass", "GraphCompile",
           "run_pipeline"]


def cache_root() -> Path:
    """Where generated code and its artifacts are cached: ``$EMBER_CACHE_DIR``, default ``~/.cache/ember``, or a
    private temporary directory where that one is unsafe or unusable (``ember.diskcache.root``)."""
    from ember import diskcache
    return diskcache.root()


def graph_symbols(gm: fx.GraphModule) -> Any:
    """The graph's ``ember.shapes.SymbolTable`` when it has symbolic sizes, else None."""
    table = gm.meta.get("ember_symbols")
    return table if table is not None and table.symbols else None


def compile_graph(gm: fx.GraphModule, kind: str = "inference", options: Any = None) -> Callable[..., Any]:
    """The compiled callable of a prim graph. A graph with symbolic sizes (``gm.meta["ember_symbols"]``,
    docs/dynamic-contract.md) compiles once for every size the table's relations allow; where some stage cannot
    handle it, ``SymbolicUnsupported`` says why (the caller then compiles with static sizes)."""
    if graph_symbols(gm) is None:
        return _compile_graph(gm, kind, options)
    from ember.decomp.verify import PrimGraphError
    from ember.loopir.verify import IRError
    from ember.shapes import SymbolicUnsupported, using
    try:
        with using(graph_symbols(gm)):      # decisions on sizes go through the graph's table
            return _compile_graph(gm, kind, options)
    except (SymbolicUnsupported, IRError, PrimGraphError):   # a verifier's finding is a bug: never hidden
        raise
    except Exception as e:      # noqa: BLE001 - a stage met a symbolic size it cannot handle: compile static
        raise SymbolicUnsupported(f"ember.codegen: {kind} graph: {type(e).__name__}: {e}") from e


def _compile_graph(gm: fx.GraphModule, kind: str, options: Any) -> Callable[..., Any]:
    return run_pipeline(GraphCompile(gm, kind, options))
