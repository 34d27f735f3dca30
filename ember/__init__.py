"""ember: a from-scratch, pure-Python torch.compile.

``model = ember.compile(model)``. Importing ember is cheap: submodules (and torch) load on first use.
"""
from __future__ import annotations

from .errors import BackendCompilerFailed, EmberError, Unsupported
from .gcpause import no_full_collections as _no_full_collections
from .logs import set_logs

__version__ = "0.1.0"

_LAZY = {
    "compile": ("api", "compile"), "OptimizedModule": ("api", "OptimizedModule"), "disable": ("api", "disable"),
    "reset": ("api", "reset"), "stats": ("api", "stats"), "mark_dynamic": ("api", "mark_dynamic"),
    "mark_static": ("api", "mark_static"), "explain": ("explain", "explain"),
    "ExplainOutput": ("explain", "ExplainOutput"),
    "list_backends": ("backends", "list_backends"), "register_backend": ("backends", "register_backend"),
    "list_options": ("options", "list_options"), "list_mode_options": ("options", "list_mode_options"),
    "CompileOptions": ("options", "CompileOptions"), "backend": ("backends", "ember_backend"),
    "export": ("deploy", "export"), "ExportedProgram": ("deploy", "ExportedProgram"), "Dim": ("deploy", "Dim"),
    "save": ("deploy", "save"), "load": ("deploy", "load"),
    "aot_compile": ("deploy", "aot_compile"), "load_package": ("deploy", "load_package"),
    "save_cache_artifacts": ("cache_artifacts", "save_cache_artifacts"),
    "load_cache_artifacts": ("cache_artifacts", "load_cache_artifacts"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        mod, attr = _LAZY[name]
        with _no_full_collections():     # the pipeline's imports (sympy's among them): 0.1 s of full collections
            value = getattr(importlib.import_module(f".{mod}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ember' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["Unsupported", "BackendCompilerFailed", "EmberError", "set_logs", *_LAZY]
