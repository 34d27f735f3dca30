"""Verified bytes as a file the dynamic loader can open: an anonymous in-memory file (``memfd_create``) on
Linux, so that what is loaded is exactly what was hashed, never a path on disk that may change between the
check and the load. The descriptors stay open for the process's life: the loader knows a library by its path,
and a reused ``/proc/self/fd/N`` would give back the library loaded before under that name."""
from __future__ import annotations

import os

_OPEN_FDS: list[int] = []


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
