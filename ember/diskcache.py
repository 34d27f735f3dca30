"""The on-disk cache every ember artifact goes through (C++ shared objects and sources, Triton kernel modules,
autotuning choices): where it lives, who may have written it, and how big it may grow.

A cache entry is code this process will run (a ``.so`` is ``dlopen``ed, a ``.py`` is executed), so nothing is
trusted by its name:

- **Directories are private.** The root (``$EMBER_CACHE_DIR``, default ``~/.cache/ember``) and each store
  below it are created 0700; an existing one must be owned by this user and not writable by group or others.
  One that fails (owned by someone else, mode 0777, a file in its place, not creatable, not writable) is not
  used: the process warns once for it and uses a private temporary directory (``tempfile.mkdtemp``, removed
  at exit) instead, so compiling keeps working.
- **Entries are signed.** ``Store.write``/``Store.commit`` record ``<name>.sig`` next to an entry: an HMAC-SHA256,
  under the store's secret key (``.key``, 32 random bytes, mode 0600), of the entry's name and the sha256 of its
  content. ``Store.read`` checks the entry's owner and mode and the signature before returning the content; a
  truncated, corrupt, planted or renamed entry (or one without a signature) is deleted and read as missing,
  so the caller rebuilds it. Binding the name means swapping two valid entries fails too, and the key means a
  pair planted together is only possible for someone who can read the owner's private files.
- **Writes are atomic.** Content goes to a temporary ``.tmp-*`` file in the same directory, then the signature
  is renamed into place, then the entry: a reader sees the old pair, the new pair, or a mismatch (read as
  missing); never a partial file. Two processes building the same entry both succeed (each uses what it
  built) and the last rename wins. Temporary files a killed process left are removed when a store is first
  opened (those older than ``CacheOptions.temp_max_age_s``).
- **The size is bounded.** After a process's first write and then after every ``check_fraction`` of the limit
  written, the store's tree is scanned; past ``CacheOptions.max_bytes`` (``$EMBER_CACHE_MAX_BYTES``, default
  2 GiB) the least recently used entries (a read refreshes an entry's mtime) are deleted. Loads never scan.

Torch-free; imported by ``ember.codegen`` (the stages import it, it imports no stage).
"""
from __future__ import annotations

import atexit
import hashlib
import hmac
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import warnings
from pathlib import Path

from ember import logs
from ember.options import cache_options

SIG = ".sig"
TMP = ".tmp-"
KEY = ".key"
# temporary files of ember versions before this module: mkstemp's ``<key>.XXXXXXXX.so`` and ``.<name>.<pid>.tmp``
_LEGACY_TMP = re.compile(r"^[0-9a-f]{40}\.[a-z0-9_]{8}\.so$|\.tmp$")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class CacheWarning(UserWarning):
    """An on-disk cache directory could not be used safely; a private temporary one is used instead."""


def _euid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def _unsafe(st: os.stat_result) -> str | None:
    """Why a file or directory with status ``st`` cannot be trusted: another user's, or writable by others."""
    uid = _euid()
    if uid is not None and st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & 0o022:
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _claim(d: Path) -> str | None:
    """Create ``d`` (0700) or check the existing one; None when this process may use it, else why not."""
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        return "is not a directory"
    except OSError as e:
        return f"cannot be created ({e.strerror or e})"
    try:
        st = os.stat(d)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    problem = _unsafe(st)
    if problem:
        return problem
    try:
        _probe(d)
    except OSError as e:
        return f"is not writable ({e.strerror or e})"
    return None


def _probe(d: Path) -> None:
    fd, p = tempfile.mkstemp(prefix=TMP, dir=d)
    os.close(fd)
    os.unlink(p)


_FALLBACK: list[Path] = []
_WARNED: set[str] = set()


def _fallback() -> Path:
    """This process's private temporary cache root (created 0700 by mkdtemp, removed at exit)."""
    if not _FALLBACK:
        d = Path(tempfile.mkdtemp(prefix="ember-cache-"))
        atexit.register(shutil.rmtree, d, ignore_errors=True)
        _FALLBACK.append(d)
    return _FALLBACK[0]


def _warn(d: Path, problem: str, instead: Path) -> None:
    if str(d) in _WARNED:
        return
    _WARNED.add(str(d))
    msg = (f"ember: the cache directory {d} {problem}; ember does not use it (cached kernels are code it "
           f"runs) and caches in the private temporary directory {instead} for this process instead. Set "
           f"EMBER_CACHE_DIR to a directory you own that others cannot write (mode 0700), or remove {d} "
           "and let ember create it.")
    filename, lineno = _user_frame()
    warnings.warn_explicit(msg, CacheWarning, filename, lineno)


def _user_frame() -> tuple[str, int]:
    """The innermost caller outside ember and its generated code (where the warning points)."""
    here = str(Path(__file__).resolve().parent)
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith((here, "<")):
        f = f.f_back  # type: ignore[assignment]
    return (f.f_code.co_filename, f.f_lineno) if f is not None else ("<ember>", 0)


def configured_root() -> Path:
    root = os.environ.get("EMBER_CACHE_DIR")
    if root:
        return Path(root)
    try:
        return Path.home() / ".cache" / "ember"
    except (KeyError, RuntimeError):      # no $HOME and no password entry: this process's private directory
        return _fallback()


_ROOTS: dict[str, Path] = {}


def root() -> Path:
    """The cache root this process uses: ``$EMBER_CACHE_DIR`` (default ``~/.cache/ember``) when it is safe to,
    else a private temporary directory (with one warning)."""
    conf = configured_root()
    r = _ROOTS.get(str(conf))
    if r is None:
        problem = _claim(conf)
        r = conf
        if problem:
            r = _fallback()
            _warn(conf, problem, r)
        _ROOTS[str(conf)] = r
    return r


_STORES: dict[Path, "Store"] = {}


def store(name: str) -> "Store":
    """The store ``name`` (``cpp``, ``triton``, ``autotune``) under the cache root."""
    return store_at(root() / name, scope=root())


def store_at(path: str | os.PathLike, scope: Path | None = None) -> "Store":
    """The store in directory ``path`` (checked, created, its stale temporary files removed once per process);
    ``scope`` is the tree whose size it bounds (default: the directory itself)."""
    path = Path(path)
    s = _STORES.get(path)
    if s is None:
        problem = _claim(path)
        d = path
        if problem:
            d = _fallback() / "stores" / hashlib.sha256(str(path).encode()).hexdigest()[:16]
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            _warn(path, problem, d)
            scope = d
        s = Store(d, scope or d)
        _STORES[path] = s
    return s


class Store:
    """One cache directory of signed entries (see the module docstring)."""

    def __init__(self, path: Path, scope: Path) -> None:
        self.path, self.scope = path, scope
        self.secret = _secret(path)
        _clean_temps(path, cache_options().temp_max_age_s)

    def entry(self, name: str) -> Path:
        return self.path / name

    def read(self, name: str) -> bytes | None:
        """The verified content of entry ``name``; None when it is missing, or invalid (then it is deleted)."""
        path = self.path / name
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as e:
            return self._reject(name, f"cannot be opened ({e.strerror or e})")
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            problem = _unsafe(st) if stat.S_ISREG(st.st_mode) else "is not a regular file"
            if problem:
                return self._reject(name, "it " + problem)
            data = f.read()
        try:
            sig = (self.path / (name + SIG)).read_bytes()
        except OSError:
            return self._reject(name, "it has no signature (not written by ember, or its write was cut short)")
        if not hmac.compare_digest(sig, self._sign(name, data)):
            return self._reject(name, "its content does not match its signature (truncated, corrupt or replaced)")
        try:
            os.utime(path)              # least recently used = oldest mtime
        except OSError:
            pass
        return data

    def check(self, name: str) -> bool:
        """Whether entry ``name`` exists and verifies (an invalid one is deleted)."""
        return self.read(name) is not None

    def write(self, name: str, data: bytes) -> Path:
        """Store ``data`` as entry ``name``, atomically, with its signature."""
        fd, tmp = tempfile.mkstemp(prefix=TMP, suffix="-" + name, dir=self.path)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return self._publish(Path(tmp), name, data)

    def temp(self, suffix: str) -> Path:
        """A new temporary file in this store for another program to write (then ``commit`` it)."""
        fd, tmp = tempfile.mkstemp(prefix=TMP, suffix=suffix, dir=self.path)
        os.close(fd)
        return Path(tmp)

    def commit(self, tmp: Path, name: str) -> Path:
        """Make the finished temporary file ``tmp`` entry ``name`` (signed, renamed atomically)."""
        return self._publish(tmp, name, tmp.read_bytes())

    def discard(self, name: str) -> None:
        for p in (self.path / name, self.path / (name + SIG)):
            try:
                p.unlink()
            except OSError:
                pass

    def _publish(self, tmp: Path, name: str, data: bytes) -> Path:
        fd, sig_tmp = tempfile.mkstemp(prefix=TMP, suffix="-" + name + SIG, dir=self.path)
        with os.fdopen(fd, "wb") as f:
            f.write(self._sign(name, data))
        # the signature first: a reader between the two renames sees the old entry with the new signature (a
        # mismatch, read as missing), never an unsigned new entry it would delete under a concurrent writer
        os.replace(sig_tmp, self.path / (name + SIG))
        os.replace(tmp, self.path / name)
        _account(self.scope, len(data), self.path / name)
        return self.path / name

    def _sign(self, name: str, data: bytes) -> bytes:
        msg = name.encode() + b"\0" + hashlib.sha256(data).digest()
        return hmac.new(self.secret, msg, hashlib.sha256).hexdigest().encode()

    def _reject(self, name: str, why: str) -> None:
        logs.log("cache", f"ember cache: {self.path / name}: {why}; deleted, rebuilding it")
        self.discard(name)
        return None


def _secret(d: Path) -> bytes:
    """The store's signing key, created on first use (0600, linked into place so concurrent creators agree)."""
    path = d / KEY
    for _ in range(3):
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
        except FileNotFoundError:
            tmp = tempfile.mkstemp(prefix=TMP, dir=d)
            os.write(tmp[0], os.urandom(32))
            os.close(tmp[0])
            try:
                os.link(tmp[1], path)
            except FileExistsError:
                pass
            os.unlink(tmp[1])
            continue
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            key = f.read()
        if len(key) == 32 and not _unsafe(st) and not st.st_mode & 0o077:
            return key
        # unreadable by the rules (someone else's, readable by others, cut short): a new key; every entry
        # signed with the old one reads as invalid and is rebuilt
        logs.log("cache", f"ember cache: replacing the signing key {path} (not private or not 32 bytes)")
        os.unlink(path)
    raise OSError(f"ember: cannot create the cache signing key {path}")


def _clean_temps(d: Path, max_age: float) -> None:
    """Remove temporary files older than ``max_age`` seconds (a killed writer's) and orphaned signatures."""
    now = time.time()
    try:
        names = os.listdir(d)
    except OSError:
        return
    present = set(names)
    for n in names:
        stale = n.startswith(TMP) or _LEGACY_TMP.search(n) is not None
        orphan = n.endswith(SIG) and n[:-len(SIG)] not in present
        if stale or orphan:
            try:
                if now - os.lstat(d / n).st_mtime > max_age:
                    os.unlink(d / n)
            except OSError:
                pass


_WRITTEN: dict[Path, int] = {}      # bytes written under a scope since its last size check (absent: none yet)


def _account(scope: Path, n: int, written_now: Path) -> None:
    opts = cache_options()
    written = _WRITTEN.get(scope)
    if written is not None and written + n < opts.max_bytes * opts.check_fraction:
        _WRITTEN[scope] = written + n
        return
    _WRITTEN[scope] = 0
    evict(scope, opts.max_bytes, opts.keep_fraction, keep=written_now)


def evict(scope: Path, max_bytes: int, keep_fraction: float = 0.8, keep: Path | None = None) -> int:
    """Past ``max_bytes`` under ``scope``, delete the least recently used entries (with their signatures) until
    ``keep_fraction`` of it is left, never ``keep`` (the entry just written); returns the bytes deleted."""
    entries: list[tuple[float, int, Path]] = []        # (mtime, size with signature, path)
    total = 0
    for dirpath, _, names in os.walk(scope):
        present = set(names)
        for n in names:
            p = Path(dirpath) / n
            try:
                st = os.lstat(p)
            except OSError:
                continue
            total += st.st_size
            if n == KEY or n.startswith(TMP) or n.endswith(SIG) and n[:-len(SIG)] in present or p == keep:
                continue
            sig_size = 0
            if n + SIG in present:
                try:
                    sig_size = os.lstat(p.with_name(n + SIG)).st_size
                except OSError:
                    pass
            entries.append((st.st_mtime, st.st_size + sig_size, p))
    if total <= max_bytes:
        return 0
    freed = 0
    target = total - max_bytes * keep_fraction
    for _, size, p in sorted(entries, key=lambda e: e[0]):
        if freed >= target:
            break
        for q in (p, p.with_name(p.name + SIG)):
            try:
                q.unlink()
            except OSError:
                pass
        freed += size
    logs.log("cache", f"ember cache: {scope} held {total} bytes (limit {max_bytes}); evicted {freed} bytes of "
                      "least recently used entries")
    return freed


def reset() -> None:
    """Forget which directories this process checked (tests; the next use checks them again)."""
    _ROOTS.clear()
    _STORES.clear()
    _WRITTEN.clear()
    _WARNED.clear()


__all__ = ["CacheWarning", "Store", "configured_root", "evict", "reset", "root", "store", "store_at"]
