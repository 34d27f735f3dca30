"""ember's signed cache manager for Triton's binary cache: what Triton writes is signed; an altered, truncated,
planted or unsigned file reads as absent (Triton rebuilds it); groups with a bad member are rebuilt whole."""
from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("triton")

from ember import diskcache  # noqa: E402
from ember.codegen import triton_cache  # noqa: E402


@pytest.fixture
def manager(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "ember"))
    diskcache.reset()
    yield lambda key="k1": triton_cache.SignedCacheManager(key)
    diskcache.reset()


def test_written_files_read_back(manager):
    m = manager()
    p = m.put(b"\x7fELF cubin", "kernel.cubin")
    assert open(p, "rb").read() == b"\x7fELF cubin"
    assert m.get_file("kernel.cubin") == p
    assert m.put("text", "kernel.json", binary=False) == m.get_file("kernel.json")
    assert manager().get_file("kernel.cubin") == p          # another manager (process) of the same key


@pytest.mark.parametrize("tamper", ["flip", "truncate", "replace", "unsigned"])
def test_tampered_files_read_as_absent(manager, tamper):
    m = manager()
    m.put(b"0123456789" * 10, "launcher.so")
    p = str(m._store.entry("launcher.so"))      # the entry (put and get_file hand out private copies of a .so)
    data = open(p, "rb").read()
    if tamper == "flip":
        data = data[:5] + bytes([data[5] ^ 1]) + data[6:]
    elif tamper == "truncate":
        data = data[:50]
    elif tamper == "replace":
        data = b"planted"
    with open(p, "wb") as f:
        f.write(data)
    if tamper == "unsigned":
        os.unlink(p + diskcache.SIG)
    assert m.get_file("launcher.so") is None
    assert not m.has_file("launcher.so")
    assert m.get_file("launcher.so") is None and not os.path.exists(p)    # deleted: Triton compiles it again


def test_planted_file_without_a_signature_is_ignored(manager):
    m = manager()
    with open(os.path.join(m.cache_dir, "evil.so"), "wb") as f:
        f.write(b"code")
    assert m.get_file("evil.so") is None


def test_groups_check_every_member(manager, tmp_path):
    m = manager()
    a = m.put(b"a", "k.cubin")
    b = m.put(b"b", "k.json")
    m.put_group("k.json", {"k.cubin": a, "k.json": b})
    assert m.get_group("k.json") == {"k.cubin": a, "k.json": b}
    with open(a, "wb") as f:
        f.write(b"x")
    assert m.get_group("k.json") is None
    outside = tmp_path / "elsewhere.cubin"
    outside.write_bytes(b"a")
    m.put("", "dummy")
    m.put(json.dumps({"child_paths": {"k.cubin": str(outside)}}), "__grp__g2.json", binary=False)
    assert m.get_group("g2.json") is None


def test_shared_writable_directory_is_not_used(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "ember"))
    diskcache.reset()
    with pytest.warns(diskcache.CacheWarning):
        m = triton_cache.SignedCacheManager("k9")
        m.put(b"x", "a.cubin")
    assert not str(m.cache_dir).startswith(str(shared))
    diskcache.reset()


def test_install_respects_a_user_manager(monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "mine:Manager")
    triton_cache.install()
    assert os.environ["TRITON_CACHE_MANAGER"] == "mine:Manager"
    monkeypatch.delenv("TRITON_CACHE_MANAGER")
    triton_cache.install()
    assert os.environ["TRITON_CACHE_MANAGER"] == triton_cache.MANAGER
    from triton import knobs
    assert knobs.cache.manager_class is triton_cache.SignedCacheManager
