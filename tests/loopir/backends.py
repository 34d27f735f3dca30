"""Which CPU kernel backends the loop IR tests run: the Python reference always, C++ when a compiler is
present, Triton (interpreted) when triton is installed."""
from __future__ import annotations

import importlib.util
import shutil

CPU_BACKENDS = ["python"]
if shutil.which("g++") or shutil.which("c++"):
    try:
        importlib.util.find_spec("ember.codegen.cpp")
        import ember.codegen.cpp  # noqa: F401
        CPU_BACKENDS.append("cpp")
    except ImportError:
        pass
