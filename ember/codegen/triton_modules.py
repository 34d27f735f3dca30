"""Kernel source as importable modules: ``load_module(src)`` imports Triton kernel source through the on-disk
cache (``$EMBER_CACHE_DIR/triton``). Below both ``triton.py`` (the backend) and ``triton_worker.py`` (the compile
worker), which each load kernels by it."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from ember import diskcache

_MODULES: dict[str, Any] = {}


def cache_dir() -> Path:
    from . import cache_root
    return cache_root() / "triton"


def load_module(src: str) -> Any:
    """Import kernel source through the on-disk cache (a ``diskcache`` store: written once, atomically, signed).

    The module runs ``src`` itself, not what the file holds (nor a ``__pycache__`` bytecode file): the file is
    there for Triton, which reads a kernel's source back through ``inspect``, and it holds ``src`` (checked)."""
    data = src.encode()
    h = hashlib.sha256(data).hexdigest()[:32]
    mod = _MODULES.get(h)
    if mod is not None:
        return mod
    store = diskcache.store_at(cache_dir(), scope=diskcache.root())
    fname = f"k{h}.py"
    path = store.entry(fname) if store.read(fname) == data else store.write(fname, data)
    name = f"ember_triton_k{h}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    exec(compile(src, str(path), "exec"), mod.__dict__)
    _MODULES[h] = mod
    return mod
