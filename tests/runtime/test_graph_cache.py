"""The whole-graph cache (``ember.graphcache``) and the cache artifacts (``ember.cache_artifacts``).

Fresh processes (``graph_cache_child.py``: inference, training, a dynamic batch, a size relation, an output view,
buffer mutation, graphs holding subgraphs (``torch.cond`` over a module, ``torch.func.vmap`` trained), two
differentiable outputs, each checked against eager on fresh random inputs): a cold process fills the cache, a warm one
runs no AOT autograd and compiles no kernel, and neither does a process whose empty cache was filled from the
cold one's ``save_cache_artifacts()``; two processes filling one cache at once both succeed. In this process:
a damaged entry (flipped byte, cut short, swapped, signed but malformed, another format version) is rebuilt,
and artifacts that are another format version or carry a damaged entry are refused.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
from ember import diskcache
from ember import graphcache
from ember.cache_artifacts import MAGIC, CacheArtifactsError
from ember.codegen import cpp_build

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("graph_cache_child.py")


def _start(cache: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    env.pop("EMBER_GRAPH_CACHE", None)
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT)


def _result(p: subprocess.Popen, key: str = "stats") -> Any:
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["failed"] == [], err[-3000:]
    return res[key]


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """A cold process's cache, its artifacts and its counters."""
    d = tmp_path_factory.mktemp("graph-cache")
    stats = _result(_start(d / "cache", "--save", str(d / "artifacts.bin")))
    return d / "cache", d / "artifacts.bin", stats


def _compiled_nothing(stats: dict, cold_stats: dict) -> None:
    assert stats["graph_cache_hits"] == cold_stats["graph_cache_misses"] > 0, stats
    assert stats["graph_cache_misses"] == 0 and stats["traces"] == 0 and stats["kernel_compiles"] == 0, stats


def test_cold_process_fills_the_whole_graph_cache(cold):
    _, _, stats = cold
    assert stats["graph_cache_misses"] >= 6 and stats["graph_cache_hits"] == 0 and stats["traces"] > 0, stats
    assert list((cold[0] / graphcache.STORE).glob("*.graph"))


def test_warm_process_equals_eager_and_skips_aot_lowering_and_codegen(cold):
    _compiled_nothing(_result(_start(cold[0])), cold[2])


@pytest.mark.parametrize("cases", ["mlp_infer,view_output", "mlp_train,batchnorm_train,two_outputs_all_used"])
def test_warm_process_imports_no_tracing_stack(cases, tmp_path):
    """A warm start (static graphs, inference and training, the whole-graph cache serving every one) imports
    none of AOT autograd's tracing stack (trace, fake tensors, functionalization, partitioning, decompositions:
    ~0.3 s of a nanoGPT warm start's imports on the 2-core CPU; ember.autograd.aot imported all of it); the
    cold process does, and both equal eager."""
    cold = _result(_start(tmp_path / "cache", "--cases", cases), "tracing_modules")
    warm = _start(tmp_path / "cache", "--cases", cases)
    assert cold and _result(warm, "tracing_modules") == []


@pytest.mark.parametrize("cases", ["mlp_infer", "view_output", "mlp_train,batchnorm_train", "two_outputs_all_used"])
def test_warm_process_imports_no_kernel_compiler_and_does_no_size_arithmetic(cases, tmp_path):
    """A warm start of static graphs imports neither the kernel compiler (loop IR, C++/Triton codegen, Triton,
    networkx) nor the parts of sympy its first arithmetic loads (sympy.tensor.tensor, sympy.combinatorics:
    ~50 ms; ember.shapes probed sympy's ``Mod`` fault on import, ``ember.shapes.sympy_mod``); the cold process
    imports them, and both equal eager."""
    cold = _result(_start(tmp_path / "cache", "--cases", cases), "compile_modules")
    warm = _start(tmp_path / "cache", "--cases", cases)
    assert "ember.loopir.lower" in cold and "sympy.combinatorics" in cold, cold
    assert _result(warm, "compile_modules") == []


def test_artifacts_warm_an_empty_cache_in_a_fresh_process(cold, tmp_path):
    _compiled_nothing(_result(_start(tmp_path / "empty", "--load", str(cold[1]))), cold[2])


def test_warm_process_builds_the_backward_variant_of_an_unused_output(tmp_path):
    """Two differentiable outputs, losses that use both, one or the other: the warm process hits the cached
    graph and stays equal to eager (no nan from the unused output's gradient)."""
    args = ("--cases", "two_outputs_some_unused")
    cold = _result(_start(tmp_path / "cache", *args))
    warm = _result(_start(tmp_path / "cache", *args))
    assert cold["graph_cache_misses"] == 1 and warm["graph_cache_hits"] == 1 and warm["graph_cache_misses"] == 0


def test_two_processes_filling_one_cache_at_once_both_succeed(tmp_path, monkeypatch):
    procs = [_start(tmp_path / "cache", "--cases", "mlp_train,size_relation") for _ in range(2)]
    stats = [_result(p) for p in procs]         # each equal to eager
    assert all(s["graph_cache_hits"] + s["graph_cache_misses"] >= 3 for s in stats), stats
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    diskcache.reset()
    try:
        names = [p.name for p in (tmp_path / "cache" / graphcache.STORE).glob("*.graph")]
        assert len(names) >= 3 and all(diskcache.store(graphcache.STORE).read(n) for n in names)
    finally:
        diskcache.reset()


# in this process -------------------------------------------------------------------------------------------
def _fresh() -> None:
    ember.reset()
    cpp_build._CACHES.clear()
    diskcache.reset()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBER_GRAPH_CACHE", raising=False)
    _fresh()
    yield tmp_path / "cache"
    _fresh()


def _program(scale: float):
    def f(x, w):
        return ((x @ w).tanh() * scale).sum(0)
    return f


def _run(scale: float = 2.0, mode: str | None = None) -> dict:
    """Compile and train-step ``_program(scale)`` as a new process would; check it against eager."""
    _fresh()
    f = _program(scale)
    x, w = torch.randn(5, 4), torch.randn(4, 3, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    out, ref = ember.compile(f, mode=mode)(x, w), f(x, w2)
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(w.grad, w2.grad)
    return ember.stats()


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / graphcache.STORE).glob("*.graph"), key=lambda p: p.stat().st_mtime_ns)


def _flip(p: Path, cache: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x40
    p.write_bytes(bytes(data))


def _truncate(p: Path, cache: Path) -> None:
    p.write_bytes(p.read_bytes()[:100])


def _swap(p: Path, cache: Path) -> None:
    _run(3.0)                   # another program's entry, valid under its own name
    other = [q for q in _entries(cache) if q != p][0]
    p.write_bytes(other.read_bytes())


def _signed_garbage(p: Path, cache: Path) -> None:
    diskcache.store(graphcache.STORE).write(p.name, graphcache.MAGIC + struct.pack("<Q", 2) + b"{]")


def _other_version(p: Path, cache: Path) -> None:
    data = p.read_bytes()
    start = len(graphcache.MAGIC) + 8
    (n,) = struct.unpack_from("<Q", data, len(graphcache.MAGIC))
    header = json.loads(data[start:start + n])
    header["version"] = graphcache.FORMAT_VERSION + 1
    head = json.dumps(header).encode()
    diskcache.store(graphcache.STORE).write(p.name, graphcache.MAGIC + struct.pack("<Q", len(head)) + head +
                                            data[start + n:])


DAMAGE = {"flipped_byte": _flip, "truncated": _truncate, "swapped": _swap, "signed_but_malformed": _signed_garbage,
          "other_format_version": _other_version}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_graph_entry_is_rebuilt_never_loaded(damage, cache):
    first = _run()
    assert first["graph_cache_misses"] == 1 and first["graph_cache_hits"] == 0
    (entry,) = _entries(cache)
    assert _run()["graph_cache_hits"] == 1          # valid: used
    DAMAGE[damage](entry, cache)
    again = _run()
    assert again["graph_cache_hits"] == 0 and again["graph_cache_misses"] == 1 and again["traces"] > 0, again
    after = _run()                                   # rebuilt and stored again
    assert after["graph_cache_hits"] == 1 and after["traces"] == 0, after


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune"])
def test_modes_are_cached_apart_and_hit(mode, cache):
    """CUDA graphs on (reduce-overhead): a cached CPU graph goes through the same finishing step as a compiled
    one; each mode has its own entries (the options are in the key)."""
    assert _run(mode=mode)["graph_cache_misses"] == 1
    s = _run(mode=mode)
    assert s["graph_cache_hits"] == 1 and s["traces"] == 0 and s["kernel_compiles"] == 0, s
    other = "default" if mode != "default" else "reduce-overhead"
    assert _run(mode=other)["graph_cache_misses"] == 1


def _two_outputs(x, y):
    return y / x, x * y * 2


def test_training_graph_with_an_unused_differentiable_output_stays_right(cache):
    """A loss that leaves ``y / x`` unused: eager never computes its gradient (``0 * (1/0)`` would be nan), and
    the compiled backward drops it; a warm process must do the same: its graph comes from the cache, and the
    backward variant without that output's tangent is built again (``graphcache.rebuild``)."""
    for _ in range(2):
        _fresh()
        x = torch.randn(4, 5)
        x[0] = 0.0
        ins = [x.clone().requires_grad_(), torch.randn(4, 5, requires_grad=True)]
        ref = [t.detach().clone().requires_grad_() for t in ins]
        ember.compile(_two_outputs)(*ins)[1].sum().backward()
        _two_outputs(*ref)[1].sum().backward()
        for a, b in zip(ins, ref):
            torch.testing.assert_close(a.grad, b.grad)
    assert ember.stats()["graph_cache_hits"] == 1


def test_an_entry_made_by_other_ember_source_is_not_used(cache, monkeypatch):
    """The key holds a hash of ember's source: a checkout one edit later compiles again."""
    assert _run()["graph_cache_misses"] == 1
    monkeypatch.setattr(graphcache, "source_hash", lambda: "ember after an edit")
    s = _run()
    assert s["graph_cache_misses"] == 1 and s["graph_cache_hits"] == 0, s


def test_graph_cache_off(cache, monkeypatch):
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    for _ in range(2):
        s = _run()
        assert s["graph_cache_hits"] == s["graph_cache_misses"] == 0 and s["traces"] > 0
    assert not _entries(cache)


# artifacts --------------------------------------------------------------------------------------------------
def _header(data: bytes) -> tuple[dict, int]:
    (n,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    return json.loads(data[start:start + n]), start + n


def _with_header(header: dict, blob: bytes) -> bytes:
    head = json.dumps(header).encode()
    return MAGIC + struct.pack("<Q", len(head)) + head + blob


def _saved(cache: Path) -> bytes:
    _run()
    return ember.save_cache_artifacts()


def _load_elsewhere(tmp_path: Path, monkeypatch, data: bytes) -> tuple[dict, list]:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "elsewhere"))
    _fresh()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ember.load_cache_artifacts(data)
    return out, [w for w in caught if issubclass(w.category, diskcache.CacheWarning)]


def test_artifacts_round_trip_in_process(cache, tmp_path, monkeypatch):
    data = _saved(cache)
    out, warned = _load_elsewhere(tmp_path, monkeypatch, data)
    assert out["rejected"] == 0 and out["loaded"] >= 2 and not warned       # a graph and its kernel
    s = _run()
    assert s["graph_cache_hits"] == 1 and s["traces"] == 0 and s["kernel_compiles"] == 0, s


@pytest.mark.parametrize("where", ["graph", "kernel"])
def test_artifacts_with_a_flipped_byte_reject_that_entry(where, cache, tmp_path, monkeypatch):
    data = _saved(cache)
    header, start = _header(data)
    e = [e for e in header["entries"] if e["name"].endswith(".graph" if where == "graph" else ".so")][0]
    bad = bytearray(data)
    bad[start + e["offset"] + e["nbytes"] // 2] ^= 0x01
    out, warned = _load_elsewhere(tmp_path, monkeypatch, bytes(bad))
    assert out["rejected"] == 1 and len(warned) == 1 and e["name"] in str(warned[0].message)
    assert "SHA-256" in str(warned[0].message)
    assert not (tmp_path / "elsewhere" / e["store"] / e["name"]).exists()
    s = _run()                                      # compiled again where needed, equal to eager
    assert s["graph_cache_hits"] == 0 and s["traces"] > 0


def test_truncated_artifacts_load_only_whole_entries(cache, tmp_path, monkeypatch):
    data = _saved(cache)
    out, warned = _load_elsewhere(tmp_path, monkeypatch, data[:-10])
    assert out["rejected"] >= 1 and len(warned) == out["rejected"]
    with pytest.raises(CacheArtifactsError, match="truncated"):
        ember.load_cache_artifacts(data[:len(MAGIC) + 20])


@pytest.mark.parametrize("version", [2, 0, "1"])
def test_artifacts_of_another_format_version_are_refused(version, cache):
    data = _saved(cache)
    header, start = _header(data)
    header["format_version"] = version
    with pytest.raises(CacheArtifactsError, match=f"format version {version!r}.*this ember reads version 1"):
        ember.load_cache_artifacts(_with_header(header, data[start:]))


def test_not_artifacts_are_refused(cache):
    with pytest.raises(CacheArtifactsError, match="not ember cache artifacts"):
        ember.load_cache_artifacts(b"PK\x03\x04 something else")
    with pytest.raises(TypeError):
        ember.load_cache_artifacts("a path")       # type: ignore[arg-type]


# the key of graphs that name submodules and attributes -------------------------------------------------------
def _graph_with(attr: str, value) -> "torch.fx.GraphModule":
    """``x + <attr>`` (a tensor, ``get_attr``) or ``<attr>(x)`` (a submodule, ``call_module``)."""
    import torch.fx as fx
    root = torch.nn.Module()
    g = fx.Graph()
    x = g.placeholder("x")
    if isinstance(value, torch.Tensor):
        root.register_buffer(attr, value)
        out = g.call_function(torch.add, (x, g.get_attr(attr)))
    else:
        root.add_module(attr, value)
        out = g.call_module(attr, (x,))
    g.output(out)
    return fx.GraphModule(root, g)


def _sub(scale: float, hop=None) -> "torch.fx.GraphModule":
    sub = torch.fx.symbolic_trace(lambda a: a * scale)
    if hop is not None:
        sub.ember_hop = hop
    return sub


KEY_CHANGES = {     # name: (graph, the same graph with something the code does not show changed)
    "constant_bytes": (lambda: _graph_with("c", torch.ones(3)), lambda: _graph_with("c", torch.full((3,), 2.0))),
    "constant_dtype": (lambda: _graph_with("c", torch.ones(3)), lambda: _graph_with("c", torch.ones(3).double())),
    "subgraph_code": (lambda: _graph_with("b", _sub(2.0)), lambda: _graph_with("b", _sub(3.0))),
    "subgraph_attribute": (lambda: _graph_with("b", _sub(2.0, ("vmap", (("in_dims", 0),)))),
                           lambda: _graph_with("b", _sub(2.0, ("vmap", (("in_dims", 1),))))),
}


@pytest.mark.parametrize("name", list(KEY_CHANGES))
def test_key_shows_what_get_attr_names(name):
    """A graph naming a constant tensor or a subgraph is cached (it used to be refused) under a key that changes
    with the constant's bytes or dtype, the subgraph's code, and the attributes capture set on the subgraph."""
    a, b = KEY_CHANGES[name]
    opts = ember.options.CompileOptions()
    ka, kb = graphcache.static_text(a(), opts), graphcache.static_text(b(), opts)
    assert ka != kb and graphcache.static_text(a(), opts) == ka


def test_key_refuses_an_attribute_it_cannot_show():
    sub = _sub(2.0, hop=object())
    with pytest.raises(graphcache.NotCacheable, match="attribute ember_hop of type object"):
        graphcache.static_text(_graph_with("b", sub), ember.options.CompileOptions())
    with pytest.raises(graphcache.NotCacheable, match="calls a submodule"):
        graphcache.static_text(_graph_with("m", torch.nn.Linear(3, 3)), ember.options.CompileOptions())
