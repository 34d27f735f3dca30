"""Capture: a symbolic interpreter of CPython 3.11-3.13 bytecode (the TorchDynamo analogue).

Input: a Python function (code object + live argument values). Output: FX graphs of tensor work (built by the
torch plugin in ``ember.capture.torch``), the guards the trace relied on, and the glue: Python source that
checks the guards, runs the graphs and replays side effects. The interpreter core (every module of this
package outside ``torch/``) imports no torch.
"""
from __future__ import annotations

from . import opcodes_core as _core  # noqa: F401  (registers handlers)
from . import opcodes_flow as _flow  # noqa: F401
from . import opcodes_match as _match  # noqa: F401
from . import opcodes_groups as _groups  # noqa: F401
from . import containers as _containers  # noqa: F401  (registers value rules)
from . import objects as _objects  # noqa: F401
from . import truth_len as _truth_len  # noqa: F401
from . import setattrs as _setattrs  # noqa: F401
from . import class_attrs as _class_attrs  # noqa: F401
from . import builtins_sym as _builtins_sym  # noqa: F401
from . import stdlib_sym as _stdlib_sym  # noqa: F401
from .concrete import run_concrete
from .registry import UNSUPPORTED, handled_opnames


def unsupported_opnames() -> set[str]:
    return set(UNSUPPORTED)


def __getattr__(name):
    if name in ("symbolic_call", "compile_python"):
        from . import frontend
        return getattr(frontend, name)
    raise AttributeError(name)


__all__ = ["run_concrete", "handled_opnames", "unsupported_opnames", "symbolic_call", "compile_python"]
