"""Triton's own binary cache, signed: ``SignedCacheManager`` is the cache manager ember installs for Triton
(``TRITON_CACHE_MANAGER``, unless the user chose one).

Triton keeps what it compiles (cubins, PTX, metadata, and the C launcher ``.so`` it ``dlopen``s) under
``TRITON_CACHE_DIR``, and by default trusts any file found there by name. Under this manager each cache
directory is an ``ember.diskcache`` store: every file Triton writes is signed with the store's private key, and
a file that is missing its signature, altered, truncated or planted reads as absent, so Triton compiles it
again instead of loading it. A directory that is not private (another user can write it) is not used: the
store falls back to a private temporary directory, with one warning (``diskcache.CacheWarning``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, Optional

from triton.runtime.cache import FileCacheManager

from ember import diskcache

MANAGER = "ember.codegen.triton_cache:SignedCacheManager"


class SignedCacheManager(FileCacheManager):
    """``FileCacheManager`` whose files are written and checked through a signed ``diskcache`` store."""

    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override, dump)
        self._store = None
        if not (override or dump) and self.cache_dir:
            self._store = _store_for(Path(self.cache_dir))
            self.cache_dir = str(self._store.path)

    def has_file(self, filename) -> bool:
        if self._store is None:
            return super().has_file(filename)
        return self._store.check(filename)

    def get_file(self, filename) -> Optional[str]:
        if self._store is None:
            return super().get_file(filename)
        if _shared_object(filename):
            data = self._store.read(filename)
            return None if data is None else _private_copy(filename, data)
        return str(self._store.entry(filename)) if self._store.check(filename) else None

    def get_group(self, filename: str) -> Optional[Dict[str, str]]:
        if self._store is None:
            return super().get_group(filename)
        data = self._store.read(f"__grp__{filename}")
        if data is None:
            return None
        try:
            children = json.loads(data).get("child_paths")
        except (ValueError, AttributeError):
            return None
        if not isinstance(children, dict):
            return None
        result = {}
        for child, path in children.items():
            name = os.path.basename(str(path))
            if os.path.dirname(os.path.abspath(str(path))) != os.path.abspath(self.cache_dir) \
                    or not self._store.check(name):
                return None       # one child outside the store or invalid: the whole group is rebuilt
            result[child] = str(self._store.entry(name))
        return result

    def put(self, data, filename, binary=True) -> str:
        if self._store is None:
            return super().put(data, filename, binary)
        raw = data if isinstance(data, bytes) else str(data).encode()
        path = str(self._store.write(filename, raw))
        return _private_copy(filename, raw) if _shared_object(filename) else path


# Triton loads the launcher module it gets from get_file (or put) by path, right away. A path into the store would
# be mapped by the process, and an entry truncated or rewritten in place while it runs (by a tool, another
# process, a test damaging an entry) would take away the pages it runs from (SIGBUS or garbage code at the next
# launch or at exit); and a check followed by a load by path leaves a window. A shared object is handed out as
# a private copy of the verified bytes instead: a new file (its name kept: the loader goes by the suffix) in a
# directory of this process's own, removed at exit (the loaded mappings outlive the files).
_PRIVATE: list = []


def _shared_object(filename: str) -> bool:
    return str(filename).endswith((".so", ".pyd", ".dylib"))


def _private_copy(filename: str, data: bytes) -> str:
    import atexit
    import shutil
    import tempfile
    if not _PRIVATE:
        d = tempfile.mkdtemp(prefix="ember-triton-")
        atexit.register(shutil.rmtree, d, True)
        _PRIVATE.append(d)
    sub = tempfile.mkdtemp(dir=_PRIVATE[0])         # each copy a new path: the loader knows a module by it
    path = os.path.join(sub, os.path.basename(str(filename)))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _store_for(d: Path) -> "diskcache.Store":
    """The store for Triton's cache directory ``d`` (``<TRITON_CACHE_DIR>/<key>``). Triton's root must be
    private too (whoever can write it can swap ``d``); if it is not, the key's files go to a store under
    ember's own cache root instead, with one warning."""
    problem = diskcache._claim(d.parent)
    if problem:
        instead = diskcache.root() / "triton-bin" / d.name
        diskcache._warn(d.parent, problem, instead)
        d = instead
    return diskcache.store_at(d, scope=d.parent)


def install() -> None:
    """Make Triton (in this process and in the workers it starts) use ``SignedCacheManager``, unless the user
    set ``TRITON_CACHE_MANAGER`` to a manager of their own."""
    os.environ.setdefault("TRITON_CACHE_MANAGER", MANAGER)
