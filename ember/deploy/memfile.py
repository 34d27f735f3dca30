"""Verified bytes as a file the dynamic loader can open, and that is this process's own: an anonymous in-memory
file (``memfd_create``) on Linux, so that what is loaded is exactly what was hashed, never a path on disk that may
change between the check and the load. The descriptors stay open for the process's life: the loader knows a
library by its path, and a reused ``/proc/self/fd/N`` would give back the library loaded before under that name.

Where there are no memory files, ``load_private`` writes the bytes to a new temporary file and unlinks it once
loaded (as ``codegen.cpp_build`` does for the kernel cache): the loader never maps a package's or a cache entry's
own file, which another process may truncate or rewrite in place (the mapped pages would be lost: SIGBUS at the
next kernel call, or at exit when the loader runs the library's destructors)."""
from __future__ import annotations

import os
import tempfile
from typing import Callable, TypeVar

_OPEN_FDS: list[int] = []
T = TypeVar("T")


def memory_file(data: bytes, name: str) -> str | None:
    """A path that reads ``data``, or None where the platform has no memory files."""
    if not hasattr(os, "memfd_create"):
        return None
    fd = os.memfd_create(name, getattr(os, "MFD_CLOEXEC", 0))
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(data)
    except BaseException:
        os.close(fd)
        raise
    _OPEN_FDS.append(fd)
    return f"/proc/self/fd/{fd}"


def load_private(data: bytes, name: str, load: Callable[[str], T]) -> T:
    """``load(path)`` on a path that reads ``data`` and that no one else has: a memory file, or else a new
    temporary file (mode 0600), unlinked once loaded (the mapping keeps it alive; each path is new)."""
    mem = memory_file(data, name)
    if mem is not None:
        return load(mem)
    fd, tmp = tempfile.mkstemp(prefix="ember-", suffix=os.path.splitext(name)[1] or ".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return load(tmp)
    finally:
        os.unlink(tmp)
