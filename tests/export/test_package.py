"""ember.aot_compile / ember.load_package: compiled packages equal eager in a fresh process that captures,
traces and compiles nothing; calls outside the constraints are refused; bad packages (other format or
versions, another device or CPU, missing, truncated, altered or hostile files) are refused with a clear message."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ember
from ember.deploy import package_format as F

from .test_export import CASES, ZOO, Mutates, _batch_dims, _close, _fresh_like, _with_batch, output_modules, zoo_model

ROOT = Path(__file__).resolve().parents[2]

FRESH = """
import sys, torch, ember
cases, refs = torch.load(sys.argv[2])
m = ember.load_package(sys.argv[1])
with torch.no_grad():
    for a, ref in zip(cases, refs):
        torch.testing.assert_close(torch.utils._pytree.tree_leaves(m(*a)), ref)
bad = [k for k in sys.modules if k.startswith(('ember.capture', 'ember.autograd', 'ember.loopir', 'ember.codegen.cpp.',
                                               'ember.codegen.wrapper', 'ember.codegen.triton'))]
assert not bad, bad
s = ember.stats()
assert not any(s.values()), s
assert s['traces'] == 0 and s['kernel_compiles'] == 0 and s['frames_compiled'] == 0
print('ok')
"""


def _package(ep, tmp_path, name="m.ember-pkg"):
    path = tmp_path / name
    assert ember.aot_compile(ep, path) == str(path)
    return path


@pytest.mark.parametrize("entry", ZOO, ids=[e.name for e in ZOO])
def test_zoo_package_equals_eager_in_a_fresh_process_that_compiles_nothing(entry, tmp_path):
    w, inp = zoo_model(entry, "cpu")
    ep = ember.export(w.model, inp.args, inp.kwargs, dynamic_shapes=_batch_dims(inp.args, ember.Dim("batch")))
    path = _package(ep, tmp_path)
    cases = [_with_batch(inp.args, b) for b in (2, 5, 9)]
    with torch.no_grad():
        refs = [w.model(*a) for a in cases]
    torch.save((cases, [torch.utils._pytree.tree_leaves(r) for r in refs]), tmp_path / "io.pt")
    code = "".join(f"import {m}\n" for m in output_modules(refs[0])) + FRESH
    out = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "io.pt")], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.parametrize("name,make,inputs", CASES[:-1], ids=[c[0] for c in CASES[:-1]])
def test_package_equals_eager_pytrees_constants_values(name, make, inputs, tmp_path):
    m = make()
    if isinstance(m, torch.nn.Module):
        m.eval()
    args, kwargs = inputs()
    ep = ember.export(m, args, kwargs)
    run = ember.load_package(_package(ep, tmp_path))
    for trial in range(2):
        a, k = (args, kwargs) if trial == 0 else _fresh_like(args, kwargs)
        with torch.no_grad():
            _close(run(*a, **k), m(*a, **k))


def test_package_writes_mutated_buffers_and_inputs_back(tmp_path):
    m, ref = Mutates(), Mutates()
    x, y = torch.randn(3), torch.randn(3)
    run = ember.load_package(_package(ember.export(m, (x, y.clone())), tmp_path))
    for _ in range(2):
        y1, y2 = y.clone(), y.clone()
        _close(run(x, y1), ref(x, y2))
        _close(y1, y2)
        assert run.steps.item() == ref.steps.item()
    assert ref.steps.item() == 2


class Pairs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x, y, z):
        return (self.lin(x).relu() + y).sum(1), torch.cat([x, z]).mean(0)


def _pairs_inputs(b, n):
    return torch.randn(b, 4), torch.randn(b, 3), torch.randn(n, 4)


BAD_CALLS = [       # (x, y, z, the ValueError's message): each outside the exported constraints
    (*_pairs_inputs(66, 3), r"dim 0 \(batch\) must be in \[2, 64\], got 66"),
    (torch.randn(6, 4, dtype=torch.float64), *_pairs_inputs(6, 3)[1:], "must be float32"),
    (torch.randn(6, 5), *_pairs_inputs(6, 3)[1:], "dim 1 must be 4"),
    (*_pairs_inputs(6, 1), r"\(n\) must be in \[2, inf\], got 1"),
    (torch.randn(6, 4), *_pairs_inputs(5, 3)[1:], "so they must be equal"),
]


def _export_pairs(m):
    b = ember.Dim("batch", min=2, max=64)
    return ember.export(m, _pairs_inputs(6, 3), dynamic_shapes={"x": {0: b}, "y": {0: b}, "z": {0: ember.Dim("n")}})


def test_dynamic_package_serves_every_size_and_refuses_calls_outside_the_constraints(tmp_path):
    m = Pairs()
    run = ember.load_package(_package(_export_pairs(m), tmp_path))
    for bs, ns in ((2, 2), (11, 7), (64, 3)):
        args = _pairs_inputs(bs, ns)
        with torch.no_grad():
            _close(run(*args), m(*args))
    for *args, msg in BAD_CALLS:
        with pytest.raises(ValueError, match=msg):
            run(*args)


# bad packages ----------------------------------------------------------------------------------------------
def _edit_manifest(path, **changes):
    man = json.loads((path / F.MANIFEST).read_text())
    man.update(changes)
    (path / F.MANIFEST).write_text(json.dumps(man))


def _rehash(path, rel):
    import hashlib
    man = json.loads((path / F.MANIFEST).read_text())
    man["files"][rel] = hashlib.sha256((path / rel).read_bytes()).hexdigest()
    (path / F.MANIFEST).write_text(json.dumps(man))


def _kernel(path):
    return next(p for p in sorted((path / F.KERNELS).iterdir()) if p.suffix == ".so")


def _flip(p, at=None):
    data = bytearray(p.read_bytes())
    i = len(data) // 2 if at is None else at
    data[i] ^= 0x40
    p.write_bytes(bytes(data))


def _truncate(p):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _hostile_wrapper(path, edit):
    prog = json.loads((path / F.PROGRAM).read_text())
    prog["wrapper"]["source"] = edit(prog["wrapper"]["source"], prog["wrapper"]["name"])
    (path / F.PROGRAM).write_text(json.dumps(prog))
    _rehash(path, F.PROGRAM)


def _inject(line):
    def edit(src, name):
        head, rest = src.split("\n", 1)
        return f"{head}\n    {line}\n{rest}"
    return edit


BAD_PACKAGES = [
    ("future_format", lambda p: _edit_manifest(p, format_version=F.FORMAT_VERSION + 1), "format version 2"),
    ("other_torch", lambda p: _edit_manifest(p, torch="1.0.0"), "built with torch 1.0.0"),
    ("other_ember", lambda p: _edit_manifest(p, ember="0.0.1"), "built with ember 0.0.1"),
    ("other_device_kind", lambda p: _edit_manifest(p, device="cuda", triton="0"),
     "built for CUDA and this process has no CUDA device" if not torch.cuda.is_available() else "triton"),
    ("other_cpu", lambda p: _edit_manifest(p, target="cpu-0000000000000000"), "built for another CPU"),
    ("not_a_package", lambda p: (p / F.MANIFEST).unlink(), "manifest.json is missing"),
    ("truncated_manifest", lambda p: _truncate(p / F.MANIFEST), "unreadable or truncated"),
    ("truncated_weights", lambda p: _truncate(p / F.WEIGHTS), "weights.bin does not match its SHA-256"),
    ("flipped_kernel_byte", lambda p: _flip(_kernel(p)), r"kernels/.*\.so does not match its SHA-256"),
    ("missing_kernel", lambda p: _kernel(p).unlink(), r"kernels/.*\.so is missing"),
    ("edited_program", lambda p: _flip(p / F.PROGRAM, 5), "program.json does not match its SHA-256"),
    ("path_outside", lambda p: _edit_manifest(p, files={"../x": "0", **json.loads(
        (p / F.MANIFEST).read_text())["files"]}), "outside the package"),
    ("wrapper_imports", lambda p: _hostile_wrapper(p, _inject("import os")), "Import is not allowed"),
    ("wrapper_dunder", lambda p: _hostile_wrapper(p, _inject("x = arg0.__class__")), "attribute '__class__'"),
    ("wrapper_builtin", lambda p: _hostile_wrapper(p, _inject("open('/tmp/x', 'w')")), "unknown name 'open'"),
    ("wrapper_eval", lambda p: _hostile_wrapper(p, _inject("torch.load('x')")), "torch.load is not a dtype"),
    ("wrapper_method", lambda p: _hostile_wrapper(p, _inject("arg0.fill_(0)")), "method 'fill_'"),
    ("wrapper_two_defs", lambda p: _hostile_wrapper(p, lambda s, n: s + "def other():\n    return 1\n"),
     "exactly one function"),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    torch.manual_seed(0)
    m = Pairs()
    return _package(_export_pairs(m), tmp_path_factory.mktemp("pkg")), m


@pytest.mark.parametrize("name,spoil,msg", BAD_PACKAGES, ids=[c[0] for c in BAD_PACKAGES])
def test_bad_packages_are_refused_with_a_clear_message(name, spoil, msg, built, tmp_path):
    import shutil
    src, m = built
    path = tmp_path / "copy.ember-pkg"
    shutil.copytree(src, path)
    args = _pairs_inputs(4, 3)
    _close(ember.load_package(path)(*args), m(*args))       # the copy loads before it is spoiled
    spoil(path)
    with pytest.raises(ember.deploy.package_load.PackageError, match=msg) as info:
        ember.load_package(path)
    assert str(path) in str(info.value)


def test_aot_compile_replaces_a_package_but_not_other_files(built, tmp_path):
    src, m = built
    ep = ember.export(m, _pairs_inputs(6, 3))
    target = tmp_path / "p"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not an ember package"):
        ember.aot_compile(ep, target)
    assert (target / "notes.txt").read_text() == "mine"
    again = _package(ep, tmp_path, "twice")
    _package(ep, tmp_path, "twice")
    args = _pairs_inputs(6, 3)
    _close(ember.load_package(again)(*args), m(*args))


def test_aot_compile_refuses_a_device_it_cannot_build_for():
    ep = ember.export(Pairs(), _pairs_inputs(6, 3))
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        ember.aot_compile(ep, "x", device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="needs a CUDA device"):
            ember.aot_compile(ep, "x", device="cuda")


def test_prim_implementations_copied_for_loading_agree_with_ember_decomp():
    from ember.decomp.core import PRIMS
    from ember.deploy.package_load import PRIM_IMPLS
    import ember.decomp  # noqa: F401
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5)
    for name, impl in PRIM_IMPLS.items():
        for extra in ((), (0.5, 2.0)):
            torch.testing.assert_close(impl(c, a, b, *extra), PRIMS[name].impl(c, a, b, *extra))


def test_stats_count_traces_and_kernel_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    ember.reset()
    ep = ember.export(copy.deepcopy(Pairs()), _pairs_inputs(6, 3))
    _package(ep, tmp_path)
    s = ember.stats()
    assert s["traces"] >= 1 and s["kernel_compiles"] >= 1, s
    ember.reset()
    assert ember.stats()["traces"] == ember.stats()["kernel_compiles"] == 0


def test_package_sees_new_weights_loaded_in_place(tmp_path):
    m = Pairs()
    run = ember.load_package(_package(_export_pairs(m), tmp_path))
    args = _pairs_inputs(5, 3)
    run(*args)          # the state list is read, then the weights change under it
    new = {k: torch.randn_like(v) for k, v in m.state_dict().items()}
    m.load_state_dict(new)
    run.load_state_dict(new)
    with torch.no_grad():
        _close(run(*args), m(*args))


# -- training-mode programs: the forward runs (batch statistics, running stats written back); no backward ------
class TrainBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.bn = torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)

    def forward(self, x, *, shift):
        return self.bn(self.lin(x) + shift).relu()


def _train_package(tmp_path):
    torch.manual_seed(0)
    m = TrainBN().train()
    ref = copy.deepcopy(m)
    ep = ember.export(m, (torch.randn(6, 4),), {"shift": torch.randn(3)},
                      dynamic_shapes={"x": {0: ember.Dim("batch")}, "shift": None})
    return ember.load_package(_package(ep, tmp_path)), ref


def test_training_mode_package_runs_the_forward_and_updates_running_stats(tmp_path):
    run, ref = _train_package(tmp_path)
    for b in (6, 3, 11):
        x, shift = torch.randn(b, 4), torch.randn(3)
        _close(run(x, shift=shift), ref(x, shift=shift).detach())   # grad mode on, nothing requires grad
        _close(run.bn.running_mean, ref.bn.running_mean)
        _close(run.bn.running_var, ref.bn.running_var)


NEEDS_GRAD = [      # a call whose outputs autograd would differentiate: refused, naming the tensor
    ("input", lambda run: ((torch.randn(5, 4, requires_grad=True),), {"shift": torch.randn(3)}), r"input args\[0\]"),
    ("kwarg", lambda run: ((torch.randn(5, 4),), {"shift": torch.randn(3, requires_grad=True)}),
     r"input kwargs\['shift'\]"),
    ("parameter", lambda run: _with_trainable_weight(run, (torch.randn(5, 4),), {"shift": torch.randn(3)}),
     "parameter lin.weight"),
]


def _with_trainable_weight(run, args, kwargs):
    run.lin.weight.requires_grad_(True)
    return args, kwargs


@pytest.mark.parametrize("name,call,what", NEEDS_GRAD, ids=[c[0] for c in NEEDS_GRAD])
def test_package_refuses_a_call_that_needs_a_backward(name, call, what, tmp_path):
    run, ref = _train_package(tmp_path)
    args, kwargs = call(run)
    with pytest.raises(RuntimeError, match=what + ".*forward only.*ember.compile.*torch.no_grad"):
        run(*args, **kwargs)
    with torch.no_grad():           # the same call without autograd runs
        _close(run(*args, **kwargs), ref(*args, **kwargs))


# -- ops ember runs as ATen calls (``aten_extern``: no decomposition for that case) inside a package -------------
_IDX = torch.tensor([0, 2, 1, 0, 2])
EXTERN_OPS = [
    ("scatter_reduce_amax", lambda x: torch.zeros(x.shape[0], 3).scatter_reduce(
        1, _IDX.expand(x.shape[0], 5), x, "amax", include_self=False)),
    ("index_reduce_prod", lambda x: torch.ones(3, 5).index_reduce(0, _IDX[:3], x[:3], "prod") * x.sum(0)),
    ("index_fill_0d", lambda x: x.sum().index_fill(0, torch.tensor(0), 2.0) + x),
]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name,fn", EXTERN_OPS, ids=[c[0] for c in EXTERN_OPS])
def test_package_runs_ops_called_as_aten_externs(name, fn, dynamic, tmp_path):
    spec = ({0: ember.Dim("batch")},) if dynamic else None
    run = ember.load_package(_package(ember.export(fn, (torch.randn(4, 5),), dynamic_shapes=spec, strict=False),
                                      tmp_path))
    for b in ((4, 7, 3) if dynamic else (4, 4)):
        x = torch.randn(b, 5)
        _close(run(x), fn(x))


# -- ATen calls whose argument parsing imports lazily, first made by the wrapper in a fresh process --------------
def _sdpa_scaled(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.3, is_causal=True)


def _sdpa_scale_bias_free(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q * 2, k, v, scale=0.5) + 1


FRESH_PROGRAMS = [("sdpa_scale_causal", _sdpa_scaled), ("sdpa_scale", _sdpa_scale_bias_free)]


@pytest.mark.parametrize("name,fn", FRESH_PROGRAMS, ids=[c[0] for c in FRESH_PROGRAMS])
def test_package_calls_aten_in_a_fresh_process(name, fn, tmp_path):
    qkv = tuple(torch.randn(3, 2, 8, 4) for _ in range(3))
    ep = ember.export(fn, qkv, dynamic_shapes=({0: ember.Dim("batch")},) * 3)
    path = _package(ep, tmp_path)
    cases = [tuple(_with_batch(qkv, b)) for b in (3, 2, 5)]
    torch.save((cases, [[fn(*a)] for a in cases]), tmp_path / "io.pt")
    out = subprocess.run([sys.executable, "-c", FRESH, str(path), str(tmp_path / "io.pt")], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.parametrize("n,parallel,checked,symbols", [(2, True, False, 0), (3, False, True, 1), (1, True, True, 2),
                                                        (0, False, False, 0)])
def test_kernel_callers_share_code_but_call_their_own_kernel(n, parallel, checked, symbols):
    """A graph's C++ kernel callers are made from one code object per signature (a graph-cache hit compiled one
    per kernel); each still calls its own kernel, with the buffers' pointers, the sizes and the thread count."""
    from ember.deploy.package_load import _cpp_caller
    from ember.codegen.cpp import IndexOutOfRange
    seen: list = []
    mk = lambda tag, rc: (lambda *a: seen.append((tag, a)) or rc)       # noqa: E731
    f, g = _cpp_caller(mk("f", 0), n, parallel, checked, symbols), _cpp_caller(mk("g", 1), n, parallel, checked,
                                                                             symbols)
    assert f.__code__ is g.__code__
    bufs = [torch.zeros(2) for _ in range(n)]
    f(*bufs, *range(7, 7 + symbols))
    want = tuple(b.data_ptr() for b in bufs) + tuple(range(7, 7 + symbols)) + \
        (torch.get_num_threads() if parallel else 1,)
    assert seen == [("f", want)]
    if checked:
        with pytest.raises(IndexOutOfRange):
            g(*bufs, *range(7, 7 + symbols))
    else:
        g(*bufs, *range(7, 7 + symbols))
    assert seen[-1] == ("g", want)


_OUT_TYPE_MODULE = '''
import dataclasses
import torch
import torch.utils._pytree as pytree


@dataclasses.dataclass
class Pair:
    a: torch.Tensor
    b: torch.Tensor


pytree.register_dataclass(Pair, serialized_type_name="pairmod_pkgtest.Pair")


class Net(torch.nn.Module):
    def forward(self, x):
        return Pair(x.sin(), x * 2)
'''


@pytest.mark.parametrize("import_first", [False, True])
def test_package_with_an_output_type_of_a_module_not_imported_names_the_module(import_first, tmp_path):
    (tmp_path / "pairmod_pkgtest.py").write_text(_OUT_TYPE_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        import pairmod_pkgtest as mod
        x = torch.randn(3, 4)
        path = _package(ember.export(mod.Net(), (x,)), tmp_path)
        saved = tmp_path / "m.ember"
        ember.save(ember.export(mod.Net(), (x,)), saved)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("pairmod_pkgtest", None)
    torch.save(x, tmp_path / "x.pt")
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + ("import pairmod_pkgtest\n" if import_first else "")
            + "import torch, ember\nx = torch.load(sys.argv[3])\n"
            "for load, p in ((ember.load_package, sys.argv[1]), (lambda p: ember.load(p).module(), sys.argv[2])):\n"
            "    try:\n        out = load(p)(x)\n    except ValueError as e:\n        print('refused:', e)\n"
            "    else:\n        torch.testing.assert_close(out.a, x.sin()); print('ok', type(out).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(saved), str(tmp_path / "x.pt")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    if import_first:
        assert lines == ["ok Pair", "ok Pair"]
    else:
        assert len(lines) == 2 and all(ln.startswith("refused:") and "pairmod_pkgtest.Pair" in ln
                                       and "import pairmod_pkgtest before" in ln for ln in lines), lines
