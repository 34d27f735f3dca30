"""ember.export / ExportedProgram / ember.save / ember.load: differential against eager, and the bad cases
(corrupt, truncated, future-version and hostile files, inputs outside the exported specs, graph breaks)."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ember
from ember.bench.zoo import HANDWRITTEN
from ember.bench.zoo_hf import HF_ENTRIES

ROOT = Path(__file__).resolve().parents[2]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.bn = torch.nn.BatchNorm1d(3)

    def forward(self, x, scale=2.0):
        return {"y": self.bn(torch.relu(self.lin(x))) * scale, "n": x.shape[0]}


class WithConst(torch.nn.Module):
    def forward(self, x):
        return x + torch.tensor([1.0, 2.0, 3.0, 4.0]), [x.sum(), (x * 2,)]


class Mutates(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x, y):
        self.steps += 1
        y.mul_(2)
        return x.cos() + y


@dataclasses.dataclass
class Pair:
    a: torch.Tensor
    b: torch.Tensor


class DataclassIO(torch.nn.Module):
    def forward(self, p, k=1):
        return Pair(p.a * p.b, p.a + k), {"sum": (p.a - p.b).sum()}


class Opaque:
    def __init__(self, t):
        self.t = t


class ReturnsObject(torch.nn.Module):
    def forward(self, x):
        return Opaque(x + 1)


def _f(x, *, y):
    return torch.sin(x) @ y.T


def _pair(m1, m2, args, kwargs):
    """Two copies of the same state, so buffer updates can be compared."""
    return m1(*args, **kwargs), m2(*args, **kwargs)


def _clone(m):
    import copy
    return copy.deepcopy(m) if isinstance(m, torch.nn.Module) else m


def _close(a, b):
    fa, sa = torch.utils._pytree.tree_flatten(a)
    fb, sb = torch.utils._pytree.tree_flatten(b)
    assert sa == sb
    for x, y in zip(fa, fb):
        if isinstance(x, torch.Tensor):
            torch.testing.assert_close(x, y)
        else:
            assert x == y


CASES = [
    ("module_dict_out_buffers", lambda: Net(), lambda: ((torch.randn(5, 4),), {})),
    ("module_kwarg", lambda: Net(), lambda: ((torch.randn(5, 4),), {"scale": 3.0})),
    ("constants_nested_out", lambda: WithConst(), lambda: ((torch.randn(2, 4),), {})),
    ("function_kwargs", lambda: _f, lambda: ((torch.randn(3, 5),), {"y": torch.randn(2, 5)})),
    ("dataclass_in_out", lambda: DataclassIO(), lambda: ((Pair(torch.randn(3), torch.randn(3)),), {"k": 2})),
]


def test_outputs_that_are_not_pytrees_are_a_clear_error():
    with pytest.raises(ValueError, match="output.* is a Opaque"):
        ember.export(ReturnsObject(), (torch.randn(2),))


@pytest.mark.parametrize("name,make,inputs", CASES, ids=[c[0] for c in CASES])
def test_module_equals_eager(name, make, inputs, tmp_path):
    m = make()
    args, kwargs = inputs()
    ref_model = _clone(m)
    ep = ember.export(m, args, kwargs)
    assert isinstance(ep, ember.ExportedProgram)
    for trial in range(2):
        a, k = (args, kwargs) if trial == 0 else _fresh_like(args, kwargs)
        _close(ep.module()(*a, **k), ref_model(*a, **k))
    path = tmp_path / "m.ember"
    ember.save(ep, path)
    ep2 = ember.load(path)
    a, k = _fresh_like(args, kwargs)
    _close(ep2.module()(*a, **k), ep.module()(*a, **k))


def _fresh_like(args, kwargs):
    f = lambda v: torch.randn_like(v) if isinstance(v, torch.Tensor) and v.is_floating_point() else v  # noqa
    return torch.utils._pytree.tree_map(f, args), torch.utils._pytree.tree_map(f, kwargs)


def test_mutations_are_written_back():
    m, ref = Mutates(), Mutates()
    x, y = torch.randn(3), torch.randn(3)
    ep = ember.export(m, (x, y.clone()))
    assert m.steps.item() == 0        # exporting ran nothing on the model's state
    mod = ep.module()
    y1, y2 = y.clone(), y.clone()
    _close(mod(x, y1), ref(x, y2))
    _close(y1, y2)
    assert mod.steps.item() == ref.steps.item() == 1
    assert [s.kind for s in ep.output_specs] == ["user_output", "buffer_mutation", "user_input_mutation"]


def test_print_shows_graph_specs_and_state():
    text = str(ember.export(Net(), (torch.randn(5, 4),)))
    for want in ("parameter", "lin.weight", "buffer", "bn.running_mean", "user_input", "args[0]",
                 "float32[5, 4]", "buffer_mutation", "aten.addmm"):
        assert want in text, want


def test_run_decompositions_gives_prims_and_same_results(tmp_path):
    m = Net().eval()
    x = torch.randn(5, 4)
    ep = ember.export(m, (x,))
    dec = ep.run_decompositions()
    targets = {str(n.target) for n in dec.graph.nodes if n.op == "call_function"}
    assert any(t.startswith("prims.") for t in targets), targets
    assert "aten.relu.default" not in targets
    _close(dec.module()(x), m(x))
    ember.save(dec, tmp_path / "d.ember")
    _close(ember.load(tmp_path / "d.ember").module()(x), m(x))
    _close(ember.load(_saved(ep, tmp_path)).run_decompositions().module()(x), m(x))


def _saved(ep, tmp_path, name="m.ember"):
    path = tmp_path / name
    ember.save(ep, path)
    return path


# the zoo's models for the deployment tests: the hand-written ones, and GPT-2 and BERT where transformers is installed
ZOO = HANDWRITTEN + [e for e in HF_ENTRIES if e.name in ("gpt2", "bert")]


def zoo_model(entry, device):
    """``entry``'s quick workload on ``device`` in eval mode (skipped when its library is not installed)."""
    for mod in entry.requires:
        pytest.importorskip(mod)
    w = entry.build("quick", torch.device(device))
    w.model.eval()
    return w, w.make_inputs(0, torch.device(device))


def output_modules(out):
    """Modules a fresh process imports so the outputs' pytree types are registered (transformers' ModelOutput)."""
    return sorted({type(out).__module__} - {"builtins", "torch"})


def _batch_dims(args, dim):
    return tuple({0: dim} if isinstance(a, torch.Tensor) else None for a in args)


def _with_batch(args, b):
    """The inputs with batch ``b`` (rows repeated or cut), so every size has realistic values."""
    return tuple(a.repeat(-(-b // a.shape[0]), *([1] * (a.dim() - 1)))[:b] if isinstance(a, torch.Tensor) else a
                 for a in args)


@pytest.mark.parametrize("entry", ZOO, ids=[e.name for e in ZOO])
def test_zoo_models_with_dynamic_batch_roundtrip_in_a_fresh_process(entry, tmp_path):
    w, inp = zoo_model(entry, "cpu")
    ep = ember.export(w.model, inp.args, inp.kwargs, dynamic_shapes=_batch_dims(inp.args, ember.Dim("batch")))
    cases = [_with_batch(inp.args, b) for b in (2, 5, 9)]
    with torch.no_grad():
        refs = [w.model(*a) for a in cases]
        for a, ref in zip(cases, refs):
            _close(ep.module()(*a), ref)
    path = _saved(ep, tmp_path)
    torch.save((cases, [torch.utils._pytree.tree_leaves(r) for r in refs]), tmp_path / "io.pt")
    code = ("".join(f"import {m}\n" for m in output_modules(refs[0])) +
            "import sys, torch, ember; ep = ember.load(sys.argv[1]); cases, refs = torch.load(sys.argv[2]); m = ep.module()\n"
            "with torch.no_grad():\n"
            "    for a, ref in zip(cases, refs): torch.testing.assert_close(torch.utils._pytree.tree_leaves(m(*a)), ref)\n"
            "bad = [m for m in sys.modules if m.startswith(('ember.capture', 'ember.codegen', 'ember.loopir'))]\n"
            "assert not bad, bad; s = ember.stats(); assert not any(s.values()), s; print('ok')")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "io.pt")], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


class Halves(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x, y):
        h = self.lin(x).relu()
        return h.view(h.shape[0] // 2, -1).sum(1), torch.cat([x, y]).mean(0)


def test_dynamic_dims_serve_every_size_and_check_constraints(tmp_path):
    m = Halves()
    b = ember.Dim("batch", min=2, max=64)
    ep = ember.export(m, (torch.randn(6, 4), torch.randn(5, 4)),
                      dynamic_shapes={"x": {0: b}, "y": {0: ember.Dim("n")}})
    assert "batch: [2, 64]" in str(ep) and "n: [2, inf]" in str(ep)
    loaded = ember.load(_saved(ep, tmp_path)).module()
    for mod in (ep.module(), loaded):
        for bs, n in [(6, 5), (10, 3), (4, 7), (64, 2)]:
            x, y = torch.randn(bs, 4), torch.randn(n, 4)
            _close(mod(x, y), m(x, y))
        with pytest.raises(ValueError, match=r"dim 0 \(batch\) must be in \[2, 64\], got 66"):
            mod(torch.randn(66, 4), torch.randn(3, 4))
        with pytest.raises(ValueError, match="dim 0 .n. must be in"):
            mod(torch.randn(6, 4), torch.randn(1, 4))
        with pytest.raises(ValueError, match="exported constraint"):
            mod(torch.randn(5, 4), torch.randn(3, 4))          # view(2, -1) of 15 elements: eager raises too


def test_a_dim_shared_by_two_inputs_must_agree():
    f = lambda x, y: x + y        # noqa: E731
    b = ember.Dim("b")
    mod = ember.export(f, (torch.randn(3, 2), torch.randn(3, 2)), dynamic_shapes=({0: b}, {0: b})).module()
    _close(mod(torch.randn(5, 2), torch.ones(5, 2)).shape, torch.Size([5, 2]))
    with pytest.raises(ValueError, match="both Dim 'b'"):
        mod(torch.randn(5, 2), torch.randn(4, 2))


def test_a_dim_the_program_pins_is_an_error_naming_it():
    def f(x):
        return x.reshape(4, -1) if x.shape[0] == 4 else x
    with pytest.raises(ValueError, match="Dim 'batch' to be exactly 4"):
        ember.export(f, (torch.randn(4, 3),), dynamic_shapes={"x": {0: ember.Dim("batch")}}, strict=False)


def test_example_size_outside_a_dim_is_an_error():
    with pytest.raises(ValueError, match="sizes 0 and 1 are specialized"):
        ember.export(lambda x: x * 2, (torch.randn(1, 3),), dynamic_shapes={"x": {0: ember.Dim("b")}})


# -- inputs outside the exported specs --------------------------------------------------------------------
@pytest.mark.parametrize("bad,match", [
    ((torch.randn(6, 4),), "dim 0 must be 5"),
    ((torch.randn(5, 4, dtype=torch.float64),), "must be float32"),
    ((torch.randn(5, 4, 1),), "must be float32"),
    (([torch.randn(5, 4)],), "structure differs"),
])
def test_inputs_outside_the_specs_raise(bad, match):
    mod = ember.export(Net().eval(), (torch.randn(5, 4),)).module()
    with pytest.raises(ValueError, match=match):
        mod(*bad)


def test_non_tensor_inputs_are_checked():
    mod = ember.export(Net().eval(), (torch.randn(5, 4),), {"scale": 2.0}).module()
    with pytest.raises(ValueError, match="specialized"):
        mod(torch.randn(5, 4), scale=3.0)


# -- what cannot be exported ----------------------------------------------------------------------------
class Breaks(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:          # data-dependent branch
            return x + 1
        return x - 1


def test_graph_break_raises_unsupported_with_user_line():
    with pytest.raises(ember.Unsupported) as e:
        ember.export(Breaks(), (torch.randn(3),))
    assert "test_export.py" in str(e.value)


@pytest.mark.parametrize("spec,match", [
    ({"nope": {0: None}}, "not arguments"),
    ({"x": {3: "batch"}}, "expected ember.Dim"),
    ((None, None, None), "entries"),
])
def test_bad_dynamic_shapes_are_value_errors(spec, match):
    if isinstance(spec, dict) and "x" in spec:
        spec = {"x": {0: "batch"}}
    with pytest.raises(ValueError, match=match):
        ember.export(Net(), (torch.randn(5, 4),), dynamic_shapes=spec)


def test_dim_validates():
    with pytest.raises(ValueError):
        ember.Dim("bad name")
    with pytest.raises(ValueError):
        ember.Dim("b", min=5, max=2)


# -- bad files ----------------------------------------------------------------------------------------
def _file(tmp_path):
    return _saved(ember.export(Net().eval(), (torch.randn(5, 4),)), tmp_path)


def test_truncated_and_flipped_files_are_refused(tmp_path):
    path = _file(tmp_path)
    data = path.read_bytes()
    for i, broken in enumerate([data[:-10], data[: len(data) // 2],
                                data[:200] + bytes([data[200] ^ 1]) + data[201:],
                                data[:-40] + bytes([data[-40] ^ 0x80]) + data[-39:]]):
        p = tmp_path / f"b{i}.ember"
        p.write_bytes(broken)
        with pytest.raises(ValueError, match="truncated or corrupt"):
            ember.load(p)


def test_future_version_and_foreign_files_are_refused(tmp_path):
    data = _file(tmp_path).read_bytes()
    p = tmp_path / "future.ember"
    p.write_bytes(data.replace(b"EMBER-PROGRAM v1\n", b"EMBER-PROGRAM v2\n", 1))
    with pytest.raises(ValueError, match="format version 2"):
        ember.load(p)
    p.write_bytes(b"\x80\x04pickle")
    with pytest.raises(ValueError, match="not an ember program"):
        ember.load(p)


def _first_call(header):
    return next(r for r in header["graph"] if r["op"] == "call_function")


def _rewrite_header(path, edit):
    """Change the header and re-sign the file, as an attacker who knows the format could."""
    import hashlib
    import struct
    data = path.read_bytes()[:-32]
    line, _, rest = data.partition(b"\n")
    (n,) = struct.unpack("<Q", rest[:8])
    header = json.loads(rest[8:8 + n])
    edit(header)
    head = json.dumps(header).encode()
    body = line + b"\n" + struct.pack("<Q", len(head)) + head + rest[8 + n:]
    path.write_bytes(body + hashlib.sha256(body).digest())


@pytest.mark.parametrize("edit,match", [
    (lambda h: _first_call(h).__setitem__("target", "op:aten::system.default"), "unknown operation"),
    (lambda h: _first_call(h).__setitem__("target", "py:os.system"), "unknown operation"),
    (lambda h: _first_call(h).__setitem__("target", "op:load_library::x.default"), "unknown operation"),
    (lambda h: _first_call(h).__setitem__("target", "op:aten::add.__class__"), "unknown operation"),
    (lambda h: h["constants"].append({"dtype": "os.system", "shape": [1], "device": "cpu", "offset": 0,
                                      "nbytes": 1, "requires_grad": False}), "dtype"),
    (lambda h: h["state"][0][1].__setitem__("nbytes", 10 ** 9), "outside the file"),
])
def test_hostile_headers_are_refused(tmp_path, edit, match):
    path = _file(tmp_path)
    _rewrite_header(path, edit)
    with pytest.raises(ValueError, match=match):
        ember.load(path)


def test_node_names_from_the_file_never_reach_generated_code(tmp_path):
    path = _file(tmp_path)
    want = ember.load(path).module()(torch.ones(5, 4))
    evil = "x = __import__('os').system('echo pwned')  #"
    _rewrite_header(path, lambda h: [r.__setitem__("name", evil) for r in h["graph"]])
    ep = ember.load(path)
    assert "pwned" not in ep.graph_module.code
    _close(ep.module()(torch.ones(5, 4)), want)

