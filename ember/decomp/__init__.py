"""ember.decomp: ATen ops -> a closed set of primitives with shape/dtype rules (PrimTorch's role).

Input IR: ATen ops, ``torch.ops.aten.*`` OpOverloads with their (fake, meta or real) tensor arguments.
Output IR: calls of ember prims (``ember.decomp.prims``, table ``PRIMS``): pointwise unary/binary/ternary ops on
tensors of one shape and one dtype, ``convert_element_type`` casts, reductions over canonical dims with an
explicit dtype, view/movement prims, gather/scatter/index prims, RNG prims with explicit (seed, offset),
constants/iota, and extern prims (``mm``, ``bmm``, ``addmm``, ``convolution``, ``sdpa``, ``aten_extern``).

Invariants:
- Every prim has a reference implementation in torch ops and a meta rule over ``TensorMeta`` whose sizes may
  be sympy expressions; the meta rule's shape and dtype equal the reference's output.
- Pointwise prims never promote or broadcast: decompositions insert ``convert_element_type`` and
  ``broadcast_in_dim`` (torch's type-promotion rules live in ``helpers.result_type``).
- ``decompose(op, ...)`` never fails for a missing rule: the op becomes ``aten_extern`` and is counted in
  ``coverage_report()``.
- Decompositions are functional: no prim mutates its inputs.
"""
from __future__ import annotations

from . import prims
from .core import PRIMS, Prim, push_handler
from .meta import TensorMeta
from .registry import (DECOMPOSITIONS, MISSING, coverage_report, decompose, decomposed_ops, format_coverage,
                       has_decomposition, register_decomposition)
from . import decomp_pointwise, decomp_reduce, decomp_shape, decomp_nn, decomp_pool  # noqa: E402,F401  (fill the table)
from .interp import decomposition_graph, meta_decomposition, run_decomposition, trace_decomposition  # noqa: E402

__all__ = ["prims", "PRIMS", "Prim", "TensorMeta", "DECOMPOSITIONS", "MISSING", "coverage_report",
           "decompose", "decomposed_ops", "format_coverage", "has_decomposition", "register_decomposition",
           "push_handler", "run_decomposition", "meta_decomposition", "trace_decomposition", "decomposition_graph"]
