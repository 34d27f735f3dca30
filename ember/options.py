"""Compile options: one frozen, typed ``CompileOptions`` (part of every cache key) and the modes."""
from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class CompileOptions:
    cache_size_limit: int = 8            # entries per compiled frame before falling back to eager
    cpu_backend: str = "cpp"             # "cpp", "triton" (interpreted, for tests) or "python" (reference)
    cuda_graphs: bool = False            # mode reduce-overhead
    max_autotune: bool = False           # mode max-autotune
    coordinate_descent_tuning: bool = False
    epilogue_fusion: bool = True
    debug_graphs: bool = False           # keep every captured GraphModule on the cache entry
    aot_decompose: bool = False           # aot_eager: run ember's decompositions (ATen -> prims) on the graphs
    cudagraph_max_records: int = 8       # CUDA graphs recorded per compiled graph before it runs without one
    heuristics: Any = None               # ember.heuristics.Heuristics (or a dict of its fields); None: the defaults
    verify_ir: bool = False              # check each compile pass's output IR ($EMBER_VERIFY_IR=1; on in the tests)
    fallback_random: bool = False        # torch.compile's name; ember's random ops always match eager (see _doc)
    capture_scalar_outputs: bool | None = None     # .item()/float(t)/int(t): None: on under fullgraph=True only
    capture_dynamic_output_shape_ops: bool = True  # nonzero, x[mask], masked_select, unique: unbacked sizes
    weight_guard_rewrites: int = 4       # in-place rewrites per weight before its entry checks weights in full only

    _doc = {
        "cache_size_limit": "compiled entries kept per function before it runs eagerly",
        "cpu_backend": "code generator for CPU tensors: 'cpp' (C++/OpenMP), 'triton' (interpreted, for "
                       "tests) or 'python' (the reference kernel backend, slow)",
        "cuda_graphs": "record and replay CUDA graphs (reduce-overhead)",
        "max_autotune": "benchmark kernel configurations and matmul templates",
        "coordinate_descent_tuning": "accepted for torch.compile compatibility; not implemented yet (no effect)",
        "epilogue_fusion": "max-autotune: fuse the pointwise kernel after a matmul into its Triton templates",
        "debug_graphs": "keep captured graphs on cache entries for inspection",
        "capture_scalar_outputs": "capture .item() / int(t) / float(t) of a one-element tensor inside the graph "
                                  "(an unbacked symbolic int u0, or a float read at run time; torch._dynamo.config's "
                                  "name). Unset (None), as in torch.compile: on under fullgraph=True, where a break "
                                  "would be an error, off otherwise. A captured number that Python then uses as a "
                                  "number (range(n), print, a branch) only moves the graph break to that use; "
                                  "False: a graph break at .item() even under fullgraph=True",
        "capture_dynamic_output_shape_ops": "capture ops whose output size depends on tensor data (nonzero, "
                                            "x[mask], masked_select, unique) with an unbacked size (u0) read "
                                            "at run time; off: a graph break",
        "weight_guard_rewrites": "a compiled entry checks each module weight by identity and version counter, "
                                 "in full only when that changed; once its weights were found rewritten in place "
                                 "(an optimizer step) more than this many times each, it checks them in full only "
                                 "(0: always in full)",
        "aot_decompose": "aot_eager: decompose ATen ops into ember's primitives before running the graphs",
        "cudagraph_max_records": "CUDA graphs recorded per compiled graph (new shapes, input addresses, or "
                                 "outputs still waiting for backward) before it runs with plain launches",
        "heuristics": "the kernel compiler's tuning constants (ember.heuristics.Heuristics, or a dict of its "
                      "fields: fusion, reduction splits, tiling, parallelism, buffer reuse); None: the defaults",
        "verify_ir": "run the IR verifiers (prim graph, loop IR, schedule) after every kernel-compiler pass; "
                     "also switched on by $EMBER_VERIFY_IR=1 (the test suite does)",
        "fallback_random": "accepted for torch.compile compatibility; no effect, since ember always does what it "
                           "asks for: every random op (dropout, bernoulli, rand/randn and their _like forms, "
                           "randint, multinomial, normal_/uniform_/exponential_) calls ATen's kernel on torch's "
                           "global generator, in program order, on a tensor laid out as eager's, never an "
                           "in-kernel generator; so from the same seed a compiled call gives eager's random "
                           "values and leaves the generator (CPU, and CUDA's philox offset) where eager does. "
                           "The backward reuses the forward's masks; get_rng_state/set_rng_state/manual_seed "
                           "inside a compiled function are graph breaks",
    }


# torch.compile's names for knobs that are CompileOptions fields ("triton.cudagraphs" is torch's name for mode
# reduce-overhead's knob); accepted in ``options={...}``, stored under ember's name.
ALIASES: dict[str, str] = {"triton.cudagraphs": "cuda_graphs"}


MODES: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {"cuda_graphs": True},
    "max-autotune": {"max_autotune": True, "cuda_graphs": True},
    "max-autotune-no-cudagraphs": {"max_autotune": True},
}


def list_options() -> dict[str, str]:
    return {f.name: CompileOptions._doc.get(f.name, "") for f in fields(CompileOptions)}


def list_mode_options(mode: str | None = None) -> dict[str, Any]:
    """The options each mode sets (``{mode: {option: value}}``), or those of ``mode``; every one of them can also
    be set alone through ``options={...}``."""
    if mode is None:
        return {m: dict(v) for m, v in MODES.items()}
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    return dict(MODES[mode])


# accepted options that do nothing yet: setting one warns (a knob must work or say that it does not)
NOT_IMPLEMENTED = {"coordinate_descent_tuning": "ember's autotuning tries a fixed list of configurations"}


def make_options(mode: str | None, options: dict | None) -> CompileOptions:
    if mode is not None and options is not None:
        raise ValueError("Either mode or options can be specified, but both can't be specified at the same time.")
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"mode must be a str (one of {', '.join(MODES)}), not {type(mode).__name__}; "
                        "a dict of settings goes in options=... (see ember.list_options())")
    if mode is not None and mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    if options is not None and not isinstance(options, Mapping):
        as_mode = options.replace("_", "-") if isinstance(options, str) else None
        hint = f" ({options!r} looks like a mode: use mode={as_mode!r})" if as_mode in MODES else ""
        raise TypeError(f"options must be a dict of option name -> value (for example "
                        f"options={{'max_autotune': True}}), not {type(options).__name__}{hint}; "
                        "see ember.list_options() for the valid names")
    kv = dict(MODES[mode or "default"])
    valid = {f.name: f for f in fields(CompileOptions)}
    for k, v in (options or {}).items():
        if not isinstance(k, str):
            raise TypeError(f"option names must be str, got {k!r} ({type(k).__name__}); "
                            "see ember.list_options()")
        k = ALIASES.get(k, k)
        if k not in valid:
            raise ValueError(f"unknown option {k!r}; valid options: {', '.join(valid)} (see ember.list_options())")
        default = valid[k].default
        if default is not None and not isinstance(v, type(default)):
            raise ValueError(f"option {k!r} expects {type(default).__name__}, got {type(v).__name__}")
        if k == "heuristics":
            from ember.heuristics import from_dict
            v = from_dict(v)
        kv[k] = v
        if k in NOT_IMPLEMENTED and v:
            warnings.warn(f"ember: option {k!r} is accepted for torch.compile compatibility but has no effect yet "
                          f"({NOT_IMPLEMENTED[k]})", UserWarning, stacklevel=4)
    if kv.get("cpu_backend", "cpp") not in ("cpp", "triton", "python"):
        raise ValueError("option 'cpu_backend' must be 'cpp', 'triton' or 'python'")
    return dataclasses.replace(CompileOptions(), **kv)


@dataclass(frozen=True)
class CacheOptions:
    """The on-disk kernel cache's limits (``ember.diskcache``); process-wide, not part of a compile's key."""
    max_bytes: int = 2 << 30             # evict least-recently-used entries past this total ($EMBER_CACHE_MAX_BYTES)
    keep_fraction: float = 0.8           # an eviction removes entries until the total is this fraction of max_bytes
    check_fraction: float = 1 / 16       # the size is scanned on a process's first write, then after this
    #                                      fraction of max_bytes more was written (never on loads)
    temp_max_age_s: float = 3600.0       # a temporary file older than this is a dead writer's: removed on start


def cache_options() -> CacheOptions:
    """``CacheOptions`` with ``$EMBER_CACHE_MAX_BYTES`` applied (an unreadable value keeps the default, with a
    warning)."""
    raw = os.environ.get("EMBER_CACHE_MAX_BYTES", "").strip()
    if not raw:
        return CacheOptions()
    try:
        n = int(raw)
        if n <= 0:
            raise ValueError
    except ValueError:
        import warnings
        warnings.warn(f"ember: EMBER_CACHE_MAX_BYTES={raw!r} is not a positive byte count; using the default "
                      f"{CacheOptions.max_bytes}. Set it to an integer number of bytes, e.g. 2147483648.",
                      stacklevel=2)
        return CacheOptions()
    return CacheOptions(max_bytes=n)


@dataclass(frozen=True)
class CaptureLimits:
    """Capture's size limits (process-wide; a change of them changes what a trace records, not its result)."""
    numpy_constant_elements: int = 4096     # a NumPy array made from constants (np.full(3, 1.5), np.linspace)
    #                                         with at most this many elements is a literal of the graph: NumPy's
    #                                         own values; a larger one is computed by torch._numpy in the graph


CAPTURE_LIMITS = CaptureLimits()
