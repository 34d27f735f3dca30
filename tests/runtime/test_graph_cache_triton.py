"""The whole-graph cache for graphs of Triton kernels (``ember.graphcache.kernels``), in fresh processes.

``graph_cache_triton_child.py`` compiles a table with the Triton backend on CPU tensors under Triton's
interpreter (pointwise and reductions, a matmul with its backward, an MLP trained, a dynamic batch with kernels
over size symbols), each checked against eager on fresh random inputs. A cold process fills the cache; a warm one
hits every graph and runs no AOT autograd, lowering or code generation, and so does a process whose empty cache
was filled from the cold one's ``save_cache_artifacts()``; a tampered entry is rebuilt, never loaded. Under max-autotune the choice each autotuned kernel made is part of the entry: a warm process whose
autotune store is gone runs the chosen kernels and times nothing, whichever kind of candidate won (the ATen
matmul with its epilogue kernel, the heuristic configuration, or a Triton matmul template / the looped form of a
wide reduction).
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ember import graphcache

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("graph_cache_triton_child.py")


def _child(cache: Path, *args: str) -> dict:
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    env.pop("EMBER_GRAPH_CACHE", None)
    p = subprocess.run([sys.executable, str(CHILD), *args], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["failed"] == [], p.stderr[-3000:]
    return res["stats"]


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / graphcache.STORE).glob("*.graph"))


def _header(p: Path) -> dict:
    data = p.read_bytes()
    (n,) = struct.unpack_from("<Q", data, len(graphcache.MAGIC))
    start = len(graphcache.MAGIC) + 8
    return json.loads(data[start:start + n])


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    cache = tmp_path_factory.mktemp("triton-graph-cache") / "cache"
    stats = _child(cache)
    assert stats["graph_cache_misses"] >= 6 and stats["graph_cache_hits"] == 0, stats
    return cache, stats


def _hit_everything(stats: dict, cold_stats: dict) -> None:
    assert stats["graph_cache_hits"] == cold_stats["graph_cache_misses"], stats
    assert stats["graph_cache_misses"] == 0 and stats["traces"] == 0 and stats["kernel_compiles"] == 0, stats


def test_cold_process_stores_triton_graphs_with_their_kernel_sources(cold):
    cache, _ = cold
    kinds = set()
    for p in _entries(cache):
        for g in _header(p)["graphs"].values():
            kinds |= {r["kind"] for r in g["objects"]}
            assert all("@triton.jit" in r["source"] for r in g["objects"] if r["kind"] == "triton")
    assert {"triton", "first"} <= kinds, kinds
    symbolic = [r for p in _entries(cache) for g in _header(p)["graphs"].values() for r in g["objects"]
                if r.get("symbols")]
    assert symbolic and all(r["grid_expr"] for r in symbolic)        # the dynamic batch's kernels


def test_warm_process_hits_every_triton_graph(cold):
    _hit_everything(_child(cold[0]), cold[1])


def test_artifacts_carry_triton_graphs_to_an_empty_cache(tmp_path):
    """``save_cache_artifacts`` after a cold process, loaded into an empty cache: every graph hits."""
    args = ("--cases", "matmul_train,dynamic_batch")
    cold = _child(tmp_path / "cold", *args, "--save", str(tmp_path / "artifacts.bin"))
    _hit_everything(_child(tmp_path / "empty", *args, "--load", str(tmp_path / "artifacts.bin")), cold)


@pytest.mark.parametrize("damage", ["flipped_byte", "truncated"])
def test_tampered_triton_entry_is_rebuilt(damage, cold, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(cold[0], cache)
    for p in _entries(cache):
        data = bytearray(p.read_bytes())
        if damage == "flipped_byte":
            data[len(data) // 2] ^= 0x20
        p.write_bytes(bytes(data) if damage == "flipped_byte" else bytes(data[:len(data) // 3]))
    args = ("--cases", "matmul_train,dynamic_batch")
    again = _child(cache, *args)            # equal to eager: nothing of a damaged entry was run
    assert again["graph_cache_hits"] == 0 and again["graph_cache_misses"] == 3 and again["traces"] == 3, again
    after = _child(cache, *args)             # rebuilt and stored again
    assert after["graph_cache_hits"] == 3 and after["traces"] == 0, after


@pytest.mark.parametrize("choice", ["first", "last"])
def test_autotuned_choice_is_part_of_the_entry(choice, tmp_path):
    cache = tmp_path / "cache"
    cases = ("--cases", "matmul_train,softmax_infer,wide_softmax_infer")
    cold = _child(cache, "--autotune", "--choice", choice, *cases)
    records = [r for p in _entries(cache) for g in _header(p)["graphs"].values() for r in g["objects"]
               if r["kind"] == "autotuned"]
    assert records and all(r["choice"] == (0 if choice == "first" else len(r["choices"]) - 1) for r in records)
    kinds = {r["kind"] for p in _entries(cache) for g in _header(p)["graphs"].values() for r in g["objects"]}
    want = {"fallback", "triton"} if choice == "first" else {"template", "reordered"}
    assert want <= kinds, kinds
    shutil.rmtree(cache / "autotune")        # the choices now live only in the entries
    warm = _child(cache, "--autotune", *cases)
    _hit_everything(warm, cold)
    assert not list((cache / "autotune").glob("*.json"))         # nothing was timed (a tuning records itself)
