"""The kernel compiler's tuning constants: one typed, frozen ``Heuristics`` object.

Every threshold that decides how ember fuses, splits, tiles, parallelizes or reuses memory is a field here, with
the measurement that chose it. The passes read the active object through ``heuristics()``; a compile takes its
heuristics from ``CompileOptions.heuristics`` (``ember.compile(model, options={"heuristics": {"max_kernel_nodes":
32}}``), so they are part of the options (and of any cache key built from them), and an experiment varies them
without patching modules. ``using(h)`` or ``override(**fields)`` make other values active for a block; tests may
patch ``DEFAULT``. The active object is per thread (a context variable): kernel sources are generated in the
thread that compiles the graph.
Torch-free: any stage may import it.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator


@dataclass(frozen=True)
class Heuristics:
    """Tuning constants of the kernel compiler (see the module docstring); grouped by the module that uses them."""
    # -- split reductions (loopir.lowerings) -----------------------------------------------------
    # A GPU reduction with few outputs and long rows runs on few programs; it is split in two: partial results
    # over chunks of the row (many programs), then a short reduction of the partials.
    split_min_rnumel: int = 8192
    split_max_xnumel: int = 1024
    split_target_programs: int = 2048
    split_min_chunk: int = 1024
    # An outer reduction (the kept dim contiguous: a per-channel sum over NHWC rows, a bias gradient over tokens) is
    # tiled 64 outputs wide, so it needs 64 times the partial rows for as many programs; it is split from shorter
    # rows and wider outputs on, into shorter chunks.
    split_target_outer: int = 32768
    outer_tile: int = 64
    outer_min_programs: int = 256
    outer_min_rnumel: int = 2048
    outer_min_chunk: int = 256
    # CPU outer sums of rows at least this long are split for accuracy (``_accuracy_split``), in chunks of at
    # least accurate_min_chunk points. From 4096 and 1024 (issue 31): NHWC batch statistics over 2048-4095 points
    # stayed 10-40x less accurate than eager (relative 1.6e-6 against 4e-8 at 2048 points), enough to flip a ReLU
    # at -1.6e-6 in a RegNet-Y and move 45 gradients by up to 3.6; split, 2-6x eager's. Not lower yet: rows of
    # 256-2047 points are as inaccurate, but splitting them loses the per-channel sums kernel that stores a
    # batch norm backward's output gradient (tests/codegen/test_derived_placement.py)
    accurate_min_rnumel: int = 2048
    accurate_min_chunk: int = 32

    # -- recompute or store (loopir.lower) -------------------------------------------------------
    # a pointwise value used more than once is recomputed by each user unless it has an expensive op, reads more
    # than reuse_reads buffers, has at least reuse_ops ops, or goes to several ATen calls: recomputing a few flops
    # from the inputs costs less than a memory pass (a store and a load per user), and index arithmetic
    # (iota-based positions, window bounds), which reads nothing, is always recomputed
    reuse_reads: int = 4
    reuse_ops: int = 24
    # ... or when reuse_many_users users would each recompute it from reuse_many_full buffers of its size: every
    # kernel holding a user reads all of them, where a stored value costs one store and one load per user (a
    # residual block's output gradient, (g1 + g2) * (out > 0), feeds a batch norm's two sums, its input gradient and
    # the residual path: three kernels reading three full buffers each, against one store and three loads)
    reuse_many_users: int = 3
    reuse_many_full: int = 3
    # a small value computing a COSTLY_OPS or EXPENSIVE_OPS op from a buffer is stored when a user broadcasts it
    # over at least hoist_fraction times its points (expr.py): computing a batch norm's per-channel mean and rsqrt(var /
    # n + eps) once per element (two IEEE divisions and a rsqrt) made its normalize kernels on the H100 run at 2.4
    # TB/s against 2.9 TB/s for Inductor's, which loads them (bench/results/2026-11-26-h100-j (in git history))
    hoist_max_numel: int = 1 << 16
    # any value whose body grew beyond this many ops is realized (bounds the size of inlined bodies)
    max_inline_ops: int = 200

    # -- hoisting (loopir.expr) ------------------------------------------------------------------
    hoist_fraction: int = 8

    # -- fusion (loopir.schedule) ----------------------------------------------------------------
    max_kernel_nodes: int = 64
    horizontal_max_numel: int = 1 << 16  # independent pointwise kernels up to this size fuse horizontally
    tiny_numel: int = 1 << 12  # ... and those up to this size join any earlier one of their shape (_tiny)
    horizontal_max_points: int = 1 << 20  # ... while buffers x points stays below this (past it, more memory streams
    # than a core's prefetchers follow only divide the bandwidth)
    # With ``spread`` (GPU kernels, where independent kernels launch together as combo kernels, ``loopir.combo``):
    # a kernel's programs run on many cores at once, and independent work joined into one kernel runs in sequence in
    # each program, so horizontal joins of pointwise nodes stop at this many buffer points and this many buffers
    # (streams) per program. An Adam-like update over 120 float32 tensors on an H100 took 245 us in 56 kernels, 77 us
    # as 5 combo kernels while 36 updates of 256 points still shared one program (bench/adam_shapes.py (in git history),
    # results in
    # bench/results/2026-11-26-h100-k (in git history)); the same bytes in one tensor take 23 us.
    spread_max_points: int = 1 << 16
    spread_max_streams: int = 16
    # A node of more than horizontal_max_numel points joins a kernel for reading the same input only when that input
    # has at least 1/shared_read_fraction of its points: sharing a small one (an attention's [batch, keys] padding
    # mask, a norm's weight) saves nothing, and the joined kernel holds two unrelated computations at once. The
    # handwritten encoder's attention backward on an H100 took the previous layer's probabilities, recomputed in
    # float32 and bf16, into the softmax backward's kernel for the mask they both read: 425 us per layer, against
    # 140 us for the softmax backward alone (bench/results/2026-11-25-h100-i/uprof_encoder.log.gz (in git history)) and about as
    # much for the recomputation, a pass over the same bytes.
    shared_read_fraction: int = 8
    row_tiled_min: int = 4096
    row_tiled_cpu_min: int = 16

    # -- combo kernels (loopir.combo) ------------------------------------------------------------
    combo_max_parts: int = 128  # each part is a branch of the kernel (parts doing the same work share a function)
    combo_max_args: int = 500  # kernel parameters (pointers): CUDA's 4 KB hold 512, Triton adds two of its own
    combo_max_numel: int = 1 << 20  # larger kernels take longer than a launch gap by far: nothing to gain

    # -- rematerialization (loopir.remat) --------------------------------------------------------
    remat_max_ops: int = 24
    remat_small_fraction: int = 8  # a buffer this many times smaller than the value may be read in addition

    # -- Welford splits (loopir.welford) ---------------------------------------------------------
    welford_min_split_fraction: int = 2  # a divisor split count at least 1/2 of the heuristic's, else shifted sums of squares

    # -- convolutions (loopir.conv_patchify, conv_layout) ----------------------------------------
    patchify_min_kernel: int = 2  # 1x1 stride-1 convolutions are plain matmuls that cuDNN/oneDNN run well
    channels_last_min_convs: int = 4

    # -- matmul alignment (loopir.matmul_align) --------------------------------------------------
    align_min_macs: int = 1 << 24  # smaller products: the copies would cost more than the faster kernel saves

    # -- buffer reuse in the wrapper (codegen.wrapper) -------------------------------------------
    wrapper_reuse_window: int = 16
    wrapper_reuse_max_bytes: int = 8 << 20  # larger buffers go back to the allocator: their kernels dwarf an allocation's cost,
    # and memory held for a later buffer raises the peak

    # -- matmul templates (codegen.triton_mm) ----------------------------------------------------
    mm_group_m: int = 8

    # -- autotuning (codegen.autotune) -----------------------------------------------------------
    autotune_reps: int = 7  # timed samples per candidate (median), in interleaved rounds, after one warm-up
    autotune_min_time_s: float = 5e-4  # each sample repeats the call until it lasts at least this long

    # -- C++ kernels (codegen.cpp, cpp_colred) ---------------------------------------------------
    cpp_parallel_min_work: int = 1 << 16  # elements (x * r) below which a kernel runs on the calling thread
    cpp_parallel_min_x: int = 16  # fewer outer points than this (and than 4 per thread): parallelize the
    # reduction loops instead (one fork per loop per row: costly for few rows)
    cpp_tile: int = 64  # outer points per block when a reduction vectorizes over x
    cpp_scratch_room: int = 64 * 1024  # bytes of a stashed row per thread: within L2, and well within a thread's stack
    cpp_kernels_per_unit: int = 12  # a graph with more kernels than this compiles in several units, in parallel
    cpp_flat_serial_max: int = 1 << 20  # points of a flat reduction run on one thread (no split of the run yet)
    # floating-point sums add a row in blocks of about sqrt(steps) steps, at least this many (codegen.cpp_cascade):
    # a row of at most this many steps (vectors, or points in scalar loops) runs as one block, with no loop nest
    cpp_sum_block: int = 16

    # -- Triton kernels (codegen.triton_gen) -----------------------------------------------------
    triton_persistent_max: int = 4096  # largest power-of-two row a persistent reduction keeps in registers
    triton_outer_persistent_max: int = 128  # rows with non-contiguous reduced points: keep XBLOCK wide instead
    triton_tile: int = 4096  # XBLOCK * RBLOCK of a persistent reduction
    triton_wide_rows_min_x: int = 1024  # looped inner reductions of at least this many rows ...
    triton_wide_rows_min_r: int = 16384  # ... this long take a row per program, 4096 points per step


DEFAULT = Heuristics()      # what a compile without ``options["heuristics"]`` uses (tests may patch it)
_ACTIVE: contextvars.ContextVar[Heuristics | None] = contextvars.ContextVar("ember_heuristics", default=None)


def heuristics() -> Heuristics:
    """The active heuristics: those of the compile running in this thread (``using``), else ``DEFAULT``."""
    h = _ACTIVE.get()
    return DEFAULT if h is None else h


@contextlib.contextmanager
def using(h: Heuristics | None) -> Iterator[Heuristics]:
    """Make ``h`` the active heuristics for the block (``None`` keeps the active ones)."""
    if h is None:
        yield heuristics()
        return
    token = _ACTIVE.set(h)
    try:
        yield h
    finally:
        _ACTIVE.reset(token)


def override(**fields: Any) -> Any:
    """``with override(row_tiled_min=64): ...``: the active heuristics with ``fields`` changed."""
    return using(dataclasses.replace(heuristics(), **fields))


def from_dict(value: Any) -> Heuristics | None:
    """``CompileOptions.heuristics`` from what a user passes: a ``Heuristics``, a dict of fields, or None."""
    if value is None or isinstance(value, Heuristics):
        return value
    if isinstance(value, dict):
        known = {f.name for f in dataclasses.fields(Heuristics)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"ember: unknown heuristics {unknown}; known: {', '.join(sorted(known))}")
        return dataclasses.replace(Heuristics(), **value)
    raise TypeError(f"ember: options['heuristics'] must be a dict of fields or ember.heuristics.Heuristics, "
                    f"not {type(value).__name__}")
