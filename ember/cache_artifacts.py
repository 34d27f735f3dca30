"""``ember.save_cache_artifacts()`` / ``ember.load_cache_artifacts(data)``: a warmed on-disk cache (C++ kernels,
Triton kernel modules, autotuning choices, whole compiled graphs) carried to another machine as one ``bytes``.

Format (plain data, no pickle): ``MAGIC``, the JSON header's length (8 bytes, little endian), the JSON header
(``format``, ``format_version``, the saving ember's version, and per entry its store directory relative to the
cache root, its name, its SHA-256, and where its bytes lie), then the entries' bytes. Saving reads each entry
through its store (``ember.diskcache.Store.read``: only entries whose signature verifies are saved). Loading
refuses another format version with ``CacheArtifactsError``, checks every entry's SHA-256 and bounds (a flipped
byte or a cut-short entry is skipped with a ``CacheWarning``, never written), and writes each good entry into
this machine's cache through ``Store.write`` (signed with this cache's own key). Nothing is run on load: the
entries are used as the cache's own would be, by the processes that compile later.

Entries carry their own keys (versions, compiler, processor): on a machine that differs they are simply never
looked up. Like the cache itself, artifacts are code (kernels): load only artifacts you trust.

Torch-free and stage-free (``ember.diskcache`` only).
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import warnings
from pathlib import Path

from . import diskcache, logs

FORMAT = "ember-cache-artifacts"
FORMAT_VERSION = 1
MAGIC = b"EMBER-CACHE-ARTIFACTS\0"


class CacheArtifactsError(ValueError):
    """``load_cache_artifacts`` cannot read this data at all (not ember's artifacts, another format version)."""


def _stores(root: Path) -> list[Path]:
    """The store directories under the cache root (those holding a signing key), sorted."""
    out = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if diskcache.KEY in names and Path(dirpath) != root:
            out.append(Path(dirpath))
    return sorted(out)


def _is_entry(name: str) -> bool:
    return not (name.startswith(".") or name.endswith(diskcache.SIG) or name.startswith(diskcache.TMP))


def save_cache_artifacts() -> bytes:
    """Every valid entry of this process's cache (``$EMBER_CACHE_DIR``) as one ``bytes`` for
    ``load_cache_artifacts`` on another machine."""
    import ember
    root = diskcache.root()
    entries, blobs, offset = [], [], 0
    for d in _stores(root):
        rel = d.relative_to(root).as_posix()
        store = diskcache.store_at(d, scope=root)
        for name in sorted(os.listdir(d)):
            if not _is_entry(name) or not (d / name).is_file():
                continue
            data = store.read(name)
            if data is None:        # invalid: deleted by the store, not carried
                continue
            entries.append({"store": rel, "name": name, "sha256": hashlib.sha256(data).hexdigest(),
                            "offset": offset, "nbytes": len(data)})
            blobs.append(data)
            offset += len(data)
    header = json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION, "ember": ember.__version__,
                         "entries": entries}).encode()
    logs.log("cache", f"ember cache: saved {len(entries)} entries ({offset} bytes) from {root}")
    return MAGIC + struct.pack("<Q", len(header)) + header + b"".join(blobs)


def _header(data: bytes) -> tuple[dict, int]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"ember.load_cache_artifacts: data must be the bytes ember.save_cache_artifacts() returned, "
                        f"not {type(data).__name__}")
    data = bytes(data)
    if not data.startswith(MAGIC):
        raise CacheArtifactsError("ember.load_cache_artifacts: the data is not ember cache artifacts (it does not "
                                  "start with what ember.save_cache_artifacts() writes)")
    start = len(MAGIC) + 8
    try:
        (n,) = struct.unpack_from("<Q", data, len(MAGIC))
        if start + n > len(data):
            raise ValueError("the header is cut short")
        header = json.loads(data[start:start + n])
    except (struct.error, ValueError) as e:
        raise CacheArtifactsError(f"ember.load_cache_artifacts: the artifacts' header is unreadable or truncated "
                                  f"({e}); save them again with ember.save_cache_artifacts()") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CacheArtifactsError("ember.load_cache_artifacts: the header is not an ember cache artifacts header")
    if header.get("format_version") != FORMAT_VERSION:
        raise CacheArtifactsError(
            f"ember.load_cache_artifacts: the artifacts have format version {header.get('format_version')!r} "
            f"(saved by ember {header.get('ember')}), this ember reads version {FORMAT_VERSION}; save them again "
            "with this ember's ember.save_cache_artifacts(), or load them with the ember that saved them")
    if not isinstance(header.get("entries"), list):
        raise CacheArtifactsError("ember.load_cache_artifacts: the header lists no entries")
    return header, start + n


def _safe(rel: str, name: str) -> bool:
    parts = rel.split("/")
    return (bool(rel) and not rel.startswith("/") and all(p and not p.startswith(".") for p in parts)
            and bool(name) and "/" not in name and "\\" not in name and _is_entry(name) and "\0" not in name)


def load_cache_artifacts(data: bytes) -> dict[str, int]:
    """Put the entries of ``data`` (from ``save_cache_artifacts``) into this process's cache; returns
    ``{"loaded": n, "rejected": m}``. An entry whose bytes do not match its SHA-256 (or lie outside the data)
    is rejected with a ``CacheWarning`` and not written."""
    header, start = _header(data)
    data = bytes(data)
    root = diskcache.root()
    loaded = rejected = 0
    for e in header["entries"]:
        try:
            rel, name, digest = str(e["store"]), str(e["name"]), str(e["sha256"])
            lo, n = int(e["offset"]), int(e["nbytes"])
        except (KeyError, TypeError, ValueError):
            rel, name, digest, lo, n = "?", "?", "", -1, -1
        blob = data[start + lo:start + lo + n] if lo >= 0 and n >= 0 else b""
        why = None
        if not _safe(rel, name):
            why = "its location is not a cache entry's"
        elif len(blob) != n or hashlib.sha256(blob).hexdigest() != digest:
            why = "its bytes do not match its SHA-256 (truncated, corrupt or altered)"
        if why:
            rejected += 1
            warnings.warn(f"ember.load_cache_artifacts: entry {rel}/{name}: {why}; not loaded (it is compiled again "
                          "where needed)", diskcache.CacheWarning, stacklevel=2)
            continue
        diskcache.store_at(root / rel, scope=root).write(name, blob)
        loaded += 1
    logs.log("cache", f"ember cache: loaded {loaded} entries into {root} ({rejected} rejected)")
    return {"loaded": loaded, "rejected": rejected}


__all__ = ["save_cache_artifacts", "load_cache_artifacts", "CacheArtifactsError", "FORMAT_VERSION"]
