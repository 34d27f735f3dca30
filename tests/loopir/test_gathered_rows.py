"""Reductions over gathered rows whose kept dims all have size 1 (``x[idx]`` with one index, then a row-wise
softmax, log-softmax, layer norm or sum): the lowering (``lowerings._gathered_rows_stored``) stores the per
reduced point gather as its own node, whose loop variables must not capture the reduction's kept (size-1)
variables: once they did, the index tensor and the row's max were read at the reduced point (``idx[rindex]``:
out of bounds). Compiled values and gradients equal eager's on every CPU backend, with one gathered row and
several, rows of length 1 to 7, and the gathered dim first or last."""
from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.autograd.aot import aot_compile
from ember.codegen import compile_graph
from ember.options import CompileOptions

from .backends import CPU_BACKENDS

BACKENDS = CPU_BACKENDS + (["triton"] if importlib.util.find_spec("triton") else [])

OPS = {
    "log_softmax": lambda r, d: torch.log_softmax(r, d),
    "softmax": lambda r, d: torch.softmax(r, d),
    "layer_norm": lambda r, d: F.layer_norm(r, (r.shape[1],)) if d == 1 else F.layer_norm(r.mT, (r.shape[0],)),
    "sum": lambda r, d: r.sum(d),
    "logsumexp": lambda r, d: torch.logsumexp(r, d),
    "centered_sum": lambda r, d: (r - r.amax(d, keepdim=True)).exp().sum(d),
}

# (op, index values, row length, gathered dim: 0 gathers rows and reduces dim 1, 1 gathers columns and reduces
# dim 0); rows of length 1..7, one index (negative too) and several
CASES = [
    ("log_softmax", [-1], 5, 0), ("log_softmax", [1], 1, 0), ("log_softmax", [0, 2], 4, 0),
    ("log_softmax", [-2], 3, 1), ("softmax", [2], 7, 0), ("softmax", [-1], 2, 1), ("softmax", [2, 0, 1], 6, 0),
    ("layer_norm", [-1], 6, 0), ("layer_norm", [0], 3, 1), ("layer_norm", [1, 1], 5, 0),
    ("sum", [-1], 4, 0), ("sum", [0, 2], 7, 1), ("logsumexp", [1], 2, 0), ("logsumexp", [-3], 7, 1),
    ("centered_sum", [-1], 5, 0), ("centered_sum", [2], 1, 1),
]


def _fn(op, dim):
    def f(x, idx):
        r = x[idx] if dim == 0 else x[:, idx]
        return OPS[op](r, 1 if dim == 0 else 0)
    return f


def _inputs(n, dim, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((3, n) if dim == 0 else (n, 3), generator=g, requires_grad=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op,index,n,dim", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-d{c[3]}" for c in CASES])
def test_gathered_rows_match_eager(op, index, n, dim, backend):
    f = _fn(op, dim)
    idx = torch.tensor(index)
    ember.reset()
    cf = ember.compile(f, options={"cpu_backend": backend})
    for seed in (0, 1):       # fresh inputs: the second call runs the cached kernels
        x = _inputs(n, dim, seed)
        got, want = cf(x, idx), f(x, idx)
        torch.testing.assert_close(got, want)
        g = torch.randn(want.shape, generator=torch.Generator().manual_seed(seed + 7))
        torch.testing.assert_close(torch.autograd.grad(got, x, g)[0], torch.autograd.grad(want, x, g)[0])


def _node_loads_in_bounds(graph):
    """Each node's loads, over its own loop ranges, stay inside the buffer they read (index linear in the
    node's variables and nonnegative coefficients: the gathers' data-dependent parts are left out)."""
    import sympy

    from ember.loopir.expr import loads, rvars, xvars
    sizes = {n.name: n.layout for n in graph.nodes if hasattr(n, "layout")}
    for node in graph.nodes:
        body = getattr(node, "body", None)
        if body is None:
            continue
        syms = xvars(len(node.ranges)) + rvars(len(getattr(node, "reduction_ranges", ())))
        extent = dict(zip(syms, list(node.ranges) + list(getattr(node, "reduction_ranges", ()))))
        for ld in loads(body):
            lay = sizes.get(ld.buf)
            if lay is None or not isinstance(ld.index, (int, sympy.Basic)) or ld.mask is not None:
                continue
            index = sympy.sympify(ld.index)
            top = sympy.sympify(index.xreplace({s: sympy.Integer(extent[s] - 1)
                                                for s in index.free_symbols if s in extent}))
            if top.is_Integer:
                room = 1 + sum((d - 1) * s for d, s in zip(lay.shape, lay.stride) if d)
                assert int(top) < room, f"{node.name} loads {ld.buf}[{ld.index}] past its {room} elements"


@pytest.mark.parametrize("op,index,n,dim", CASES[:8], ids=[f"{c[0]}-{c[1]}-{c[2]}-d{c[3]}" for c in CASES[:8]])
def test_stored_gathers_read_inside_their_buffers(op, index, n, dim):
    """Structural: every lowered node's loads of constant-offset indices stay inside the buffer, so a size-1
    dim's variable never runs over the reduced points (in any backend's kernel)."""
    graphs = []

    def hook(gr, kind):
        graphs.append(gr)
        return compile_graph(gr, kind, CompileOptions(cpu_backend="python"))
    idx = torch.tensor(index)
    f = _fn(op, dim)
    x = _inputs(n, dim, 0).detach()
    aot_compile(torch.fx.symbolic_trace(lambda x: f(x, idx)), [x], decompose=True, compile_graph=hook)(x)
    from ember.loopir.lower import lower
    for gr in graphs:
        _node_loads_in_bounds(lower(gr))
