"""The on-disk cache (``ember.diskcache``) is safe to run code from and never makes a compile fail: a damaged or
planted entry is rejected and rebuilt (never loaded), an unsafe or unusable cache directory is replaced by a
private temporary one (one warning), concurrent processes compiling the same kernel both succeed, the size is
bounded (least recently used entries evicted) and a dead writer's temporary files are removed.

Every test that compiles checks the compiled result against eager on fresh random inputs. A "new process" is
simulated by dropping ember's in-memory state (compiled frames, loaded libraries, checked directories); the
concurrency test uses real processes. Tests run as root here: another user's files are made with ``chown``, and
a directory root cannot write to with ``chattr +i``."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import ember
from ember import diskcache
from ember.codegen import autotune, cpp_build
from ember.codegen import triton_modules as triton_backend

ROOT = Path(__file__).resolve().parents[2]
OPTS = {"cpu_backend": "cpp"}


def _fresh() -> None:
    """What a new process starts with: no compiled frames, no loaded libraries, no directories checked."""
    ember.reset()
    cpp_build._CACHES.clear()
    triton_backend._MODULES.clear()
    autotune._CHOICES.clear()
    diskcache.reset()


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(d))
    monkeypatch.delenv("EMBER_CACHE_MAX_BYTES", raising=False)
    _fresh()
    yield d
    _fresh()


def _fn(scale: float):
    return lambda x: (x.sin() * scale + x.cos()).sum(-1)


def _check(fn) -> None:
    """Compile ``fn`` (fresh) and compare it with eager on new random inputs."""
    x = torch.randn(5, 7)
    torch.testing.assert_close(ember.compile(fn, options=OPTS)(x), fn(x))


def _entries(d: Path, suffix: str = ".so") -> list[Path]:
    return sorted(p for p in (d / "cpp").glob(f"*{suffix}") if not p.name.startswith("."))


def _planted_so(tmp_path: Path, marker: Path) -> bytes:
    """A valid shared object whose constructor creates ``marker`` (what an attacker would plant)."""
    src = tmp_path / "evil.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void run(void) {\n'
                   f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}\n}}\n')
    subprocess.run([cpp_build.compiler(), "-x", "c", "-shared", "-fPIC", str(src), "-o", str(tmp_path / "evil.so")],
                   check=True)
    return (tmp_path / "evil.so").read_bytes()


def _truncate(so: Path, ctx: dict) -> None:
    so.write_bytes(so.read_bytes()[:len(so.read_bytes()) // 3])


def _empty(so: Path, ctx: dict) -> None:
    so.write_bytes(b"")


def _flip_byte(so: Path, ctx: dict) -> None:
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 0x40
    so.write_bytes(bytes(data))


def _garbage(so: Path, ctx: dict) -> None:
    so.write_bytes(os.urandom(4096))


def _planted(so: Path, ctx: dict) -> None:
    so.write_bytes(_planted_so(ctx["tmp"], ctx["marker"]))        # the signature left is the real entry's


def _planted_unsigned(so: Path, ctx: dict) -> None:
    so.write_bytes(_planted_so(ctx["tmp"], ctx["marker"]))
    so.with_name(so.name + ".sig").unlink()


def _planted_with_sha256(so: Path, ctx: dict) -> None:
    """A planted object with a plain sha256 of its content as its signature (no key: cannot be forged)."""
    import hashlib
    data = _planted_so(ctx["tmp"], ctx["marker"])
    so.write_bytes(data)
    so.with_name(so.name + ".sig").write_bytes(hashlib.sha256(data).hexdigest().encode())


def _no_signature(so: Path, ctx: dict) -> None:
    so.with_name(so.name + ".sig").unlink()


def _other_users(so: Path, ctx: dict) -> None:
    os.chown(so, 12345, 12345)                   # content and signature valid, the file someone else's


def _group_writable(so: Path, ctx: dict) -> None:
    os.chmod(so, 0o777)


DAMAGE = {"truncated": _truncate, "empty": _empty, "flipped_byte": _flip_byte, "garbage": _garbage,
          "planted_keeping_signature": _planted, "planted_unsigned": _planted_unsigned,
          "planted_with_plain_sha256": _planted_with_sha256, "signature_missing": _no_signature,
          "owned_by_another_user": _other_users, "writable_by_others": _group_writable}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_or_planted_shared_object_is_rebuilt_never_loaded(damage, cache, tmp_path) -> None:
    fn = _fn(1.5)
    _check(fn)
    (so,) = _entries(cache)
    good = so.read_bytes()
    marker = tmp_path / "constructor-ran"
    DAMAGE[damage](so, {"tmp": tmp_path, "marker": marker})
    _fresh()
    _check(fn)                                   # no OSError ("file too short"), no wrong values
    assert not marker.exists(), "a planted shared object was loaded"
    (so2,) = _entries(cache)
    assert so2 == so and diskcache.store_at(cache / "cpp").check(so.name)
    assert len(so.read_bytes()) == len(good)
    assert so.stat().st_uid == os.geteuid() and not so.stat().st_mode & 0o022      # replaced, not trusted
    _fresh()
    _check(fn)                                   # and the rebuilt entry is a hit again
    assert cpp_build.default_cache().compiler_runs == 0


def test_swapped_entries_with_their_signatures_are_rejected(cache) -> None:
    """Entry + signature of kernel A moved under kernel B's name: the signature binds the name."""
    fa, fb = _fn(2.0), _fn(3.0)
    _check(fa)
    (a,) = _entries(cache)
    _check(fb)
    (b,) = [p for p in _entries(cache) if p != a]
    for suffix in ("", ".sig"):
        shutil.copyfile(a.with_name(a.name + suffix), b.with_name(b.name + suffix))
    _fresh()
    _check(fb)
    assert cpp_build.default_cache().compiler_runs == 1


def test_entries_signed_by_another_key_are_rejected(cache) -> None:
    """A cache directory copied from elsewhere (its .key replaced): nothing in it is trusted."""
    fn = _fn(4.0)
    _check(fn)
    key = cache / "cpp" / ".key"
    key.unlink()
    _fresh()
    _check(fn)
    assert cpp_build.default_cache().compiler_runs == 1


def _evil_module(marker: Path) -> str:
    return f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\nVALUE = 666\n"


@pytest.mark.parametrize("damage", ["planted", "truncated", "signature_missing"])
def test_triton_kernel_module_is_verified_before_it_runs(damage, cache, tmp_path) -> None:
    src = f"VALUE = {torch.randint(1000, (1,)).item()}\n\n\ndef k():\n    return VALUE * 2\n"
    mod = triton_backend.load_module(src)
    (py,) = list((cache / "triton").glob("k*.py"))
    marker = tmp_path / "module-ran"
    if damage == "planted":
        py.write_text(_evil_module(marker))
    elif damage == "truncated":
        py.write_text(src[:len(src) // 2])
    else:
        py.with_name(py.name + ".sig").unlink()
    _fresh()
    again = triton_backend.load_module(src)
    assert again is not mod and again.k() == mod.k() and not marker.exists()
    assert py.read_text() == src and not list((cache / "triton").glob("__pycache__"))


def test_autotune_choice_is_verified(cache) -> None:
    autotune._save("somekey", {"choice": 1, "times": [2.0, 1.0]})
    _fresh()
    assert autotune._load("somekey") == 1
    (cache / "autotune" / "somekey.json").write_text('{"choice": 0}')
    _fresh()
    assert autotune._load("somekey") is None and not (cache / "autotune" / "somekey.json").exists()


def _immutable(d: Path) -> bool:
    """Make ``d`` unwritable even for root (``chattr +i``); False where that is not possible."""
    if os.geteuid() != 0:
        d.chmod(0o555)
        return True
    return shutil.which("chattr") is not None and subprocess.run(["chattr", "+i", str(d)],
                                                                 capture_output=True).returncode == 0


def _bad_mode(d: Path) -> Path:
    d.mkdir()
    d.chmod(0o777)
    return d


def _a_file(d: Path) -> Path:
    d.write_text("not a directory")
    return d


def _under_a_file(d: Path) -> Path:
    d.write_text("not a directory")
    return d / "sub" / "cache"


def _another_users(d: Path) -> Path:
    d.mkdir(mode=0o700)
    os.chown(d, 12345, 12345)
    return d


def _read_only(d: Path) -> Path:
    d.mkdir(mode=0o700)
    assert _immutable(d), "chattr +i unavailable"
    return d


def _read_only_parent(d: Path) -> Path:
    d.mkdir(mode=0o700)
    assert _immutable(d), "chattr +i unavailable"
    return d / "cache"


def _store_subdir_world_writable(d: Path) -> Path:
    (d / "cpp").mkdir(parents=True, mode=0o700)
    d.chmod(0o700)
    (d / "cpp").chmod(0o777)
    return d


BAD_DIRS = {"mode_0777": _bad_mode, "a_file": _a_file, "under_a_file": _under_a_file,
            "owned_by_another_user": _another_users, "read_only": _read_only,
            "read_only_parent": _read_only_parent, "store_subdir_0777": _store_subdir_world_writable}


@pytest.mark.parametrize("kind", list(BAD_DIRS))
def test_unusable_cache_dir_falls_back_to_a_private_one_with_one_warning(kind, tmp_path, monkeypatch) -> None:
    bad = tmp_path / "bad"
    configured = BAD_DIRS[kind](bad)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(configured))
    _fresh()
    try:
        before = sorted(p.name for p in bad.rglob("*")) if bad.is_dir() else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _check(_fn(5.0))
            _check(_fn(6.0))                     # a second compile: no second warning
        mine = [w for w in caught if issubclass(w.category, diskcache.CacheWarning)]
        assert len(mine) == 1, [str(w.message) for w in caught]
        msg = str(mine[0].message)
        assert str(configured) in msg and "EMBER_CACHE_DIR" in msg and mine[0].filename == __file__
        used = cpp_build.default_cache().dir
        assert not str(used).startswith(str(bad)) and used.stat().st_mode & 0o077 == 0
        assert used.stat().st_uid == os.geteuid() and list(used.glob("*.so"))
        if before is not None:                  # nothing written into the refused directory
            assert sorted(p.name for p in bad.rglob("*")) == before
    finally:
        if bad.is_dir() and os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(bad)], capture_output=True)


def test_new_cache_directories_are_private(cache) -> None:
    _check(_fn(7.0))
    for d in (cache, cache / "cpp"):
        assert d.stat().st_mode & 0o777 == 0o700
    assert (cache / "cpp" / ".key").stat().st_mode & 0o777 == 0o600


def test_size_limit_evicts_least_recently_used(cache, monkeypatch) -> None:
    store = diskcache.store("cpp")
    old = time.time() - 1000
    for i in range(6):                           # 6 x 100 kB of signed entries, used at increasing times
        store.write(f"old{i}.so", os.urandom(100_000))
        os.utime(store.entry(f"old{i}.so"), (old + i, old + i))
    assert store.read("old0.so") is not None     # a read makes old0 the most recently used
    monkeypatch.setenv("EMBER_CACHE_MAX_BYTES", "450000")
    _fresh()
    _check(_fn(8.0))                             # its writes are the process's first: the size is checked
    left = {p.name for p in (cache / "cpp").glob("old*.so")}
    assert "old0.so" in left and "old1.so" not in left and len(left) < 6
    total = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    assert total <= 450_000 and len([p for p in _entries(cache) if not p.name.startswith("old")]) == 1
    assert all(p.with_name(p.name + ".sig").exists() for p in (cache / "cpp").glob("old*.so"))
    assert not [p for p in (cache / "cpp").glob("old*.sig") if not p.with_name(p.name[:-4]).exists()]


def test_loads_never_scan_or_evict(cache, monkeypatch) -> None:
    _check(_fn(9.0))
    monkeypatch.setenv("EMBER_CACHE_MAX_BYTES", "1")
    _fresh()
    _check(_fn(9.0))                             # a warm start writes nothing: the limit is not checked
    assert len(_entries(cache)) == 1 and cpp_build.default_cache().compiler_runs == 0


def test_stale_temporary_files_are_removed(cache) -> None:
    d = cache / "cpp"
    d.mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    stale = [d / ".tmp-abc123.so", d / ("0" * 40 + ".k3j_x9q2.so"), d / ".0123abcd.4242.tmp", d / "gone.so.sig"]
    fresh = d / ".tmp-fresh.so"
    for p in stale + [fresh]:
        p.write_bytes(b"x" * 1000)
    old = time.time() - 7200
    for p in stale:
        os.utime(p, (old, old))
    _check(_fn(10.0))
    assert not any(p.exists() for p in stale) and fresh.exists()


_CONCURRENT = """
import os, sys, time, torch, ember
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.01)
fn = lambda x: (x.sin() * 11.0 + x.cos()).sum(-1)
x = torch.randn(5, 7)
torch.testing.assert_close(ember.compile(fn, options={"cpu_backend": "cpp"})(x), fn(x))
print("OK")
"""


def test_two_processes_compile_the_same_kernel_into_one_empty_cache(cache, tmp_path) -> None:
    go = tmp_path / "go"
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "EMBER_CACHE_DIR": str(cache), "EMBER_COMPILE_WORKERS": "0"}
    procs = [subprocess.Popen([sys.executable, "-c", _CONCURRENT, str(go)], cwd=str(ROOT), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(1.0)
    go.touch()
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "OK", err[-3000:]
    (so,) = _entries(cache)
    _fresh()
    assert diskcache.store_at(cache / "cpp").check(so.name)
    _check(lambda x: (x.sin() * 11.0 + x.cos()).sum(-1))
    assert cpp_build.default_cache().compiler_runs == 0


# A shared object this process loaded, whose cache entry is then rewritten in place (truncated, emptied,
# overwritten: another tool, or a test that damages an entry): the loaded file was the entry itself, so the
# process lost the pages it runs from and died of SIGBUS when it next called the kernel or at exit, when the
# loader ran the library's destructors (tests/runtime/test_cache_safety.py run alone ended with "Bus error").
# The loaded file is now a private, unlinked copy. Run in a child process: the failure kills the process.
_IN_PLACE = """
import os, sys, torch, ember
from pathlib import Path
fn = lambda x: (x.sin() * 2.5 + x.cos()).sum(-1)
if sys.argv[2] == "hit":        # a cache hit: the entry was built by an earlier process
    ember.compile(fn, options={"cpu_backend": "cpp"})(torch.randn(5, 7))
    ember.reset()
    from ember.codegen import cpp_build
    cpp_build._CACHES.clear()
f = ember.compile(fn, options={"cpu_backend": "cpp"})
x = torch.randn(5, 7)
torch.testing.assert_close(f(x), fn(x))
(so,) = [p for p in (Path(os.environ["EMBER_CACHE_DIR"]) / "cpp").glob("*.so") if not p.name.startswith(".")]
data = so.read_bytes()
with open(so, "r+b") as fh:     # in place: the same file, as ``truncate`` or ``cp`` over it would
    fh.truncate(0)
    fh.write({"truncated": data[:len(data) // 3], "empty": b"", "garbage": os.urandom(len(data))}[sys.argv[1]])
x = torch.randn(5, 7)
torch.testing.assert_close(f(x), fn(x))
print("ok")
"""


@pytest.mark.parametrize("damage,how", [("truncated", "built"), ("garbage", "built"), ("truncated", "hit"),
                                        ("empty", "hit")])
def test_loaded_shared_object_survives_its_entry_rewritten_in_place(damage, how, cache) -> None:
    env = {**os.environ, "EMBER_CACHE_DIR": str(cache), "EMBER_COMPILE_WORKERS": "0", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", _IN_PLACE, damage, how], env=env, capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert res.returncode == 0 and res.stdout.strip() == "ok", (res.returncode, res.stderr[-2000:])
