"""The IR verifiers (ember.loopir.verify, ember.decomp.verify) and the kernel compiler's named passes
(ember.codegen.passes): each verifier accepts what the pipeline builds and rejects IR broken in each way it
checks (table-driven mutations of real graphs); ``EMBER_LOGS=passes`` prints every pass's output."""
from __future__ import annotations

import copy
import dataclasses
import logging
import operator

import pytest
import sympy
import torch
import torch.fx as fx

import ember
from ember.autograd.aot import decompose_graph
from ember.autograd.trace import trace_aten
from ember.codegen.passes import PIPELINE, GraphCompile, run_pipeline
from ember.decomp.verify import PrimGraphError, verify_prim_graph
from ember.loopir import lower as lower_mod
from ember.loopir.expr import Load, var
from ember.loopir.ir import BufferRef, InputBuffer, Layout, Pointwise, Reduction
from ember.loopir.schedule import Kernel, schedule
from ember.loopir.verify import IRError, verify_graph, verify_schedule
from ember.options import make_options


def _program(x, w):
    h = torch.relu(x @ w + 1)
    return h.sum(-1), h * 2


def _prims():
    args = (torch.randn(8, 16), torch.randn(16, 4))
    return decompose_graph(trace_aten(_program, args, training=False).gm)


def _graph():
    return lower_mod.lower(_prims(), "graph")


def test_the_pipeline_output_passes_every_verifier():
    gm = _prims()
    verify_prim_graph(gm)
    graph = lower_mod.lower(gm, "graph")
    verify_graph(graph)
    verify_schedule(schedule(graph))


def _computed(graph, cls=Pointwise):
    return next(n for n in graph.nodes if isinstance(n, cls))


def _dup_name(g):
    n = _computed(g)
    g.nodes.append(dataclasses.replace(n))


def _read_before_def(g):
    n = _computed(g)
    g.nodes.remove(n)
    g.nodes.append(n)
    g.nodes.insert(len([m for m in g.nodes if isinstance(m, InputBuffer)]),
                   Pointwise("early", n.layout, n.ranges, Load(n.name, var("x", 0), n.dtype)))


def _stride_count(g):
    n = _computed(g)
    n.layout = Layout(n.layout.shape, n.layout.stride + (1,), n.layout.dtype, n.layout.device)


def _rank(g):
    n = _computed(g)
    n.ranges = n.ranges + (1,)


def _loop_var(g):
    n = _computed(g)
    src = next(m for m in g.nodes if isinstance(m, InputBuffer))
    n.body = Load(src.name, var("x", len(n.ranges) + 2), src.dtype)


def _reduce_type(g):
    _computed(g, Reduction).reduce_type = "median"


def _output(g):
    g.outputs = list(g.outputs) + [BufferRef("nowhere", g.outputs[0].layout)]


def _input_position(g):
    ins = [n for n in g.nodes if isinstance(n, InputBuffer)]
    ins[1].position = ins[0].position


GRAPH_BREAKS = {"duplicate name": _dup_name, "read before definition": _read_before_def,
                "strides per dim": _stride_count, "ranges per dim": _rank, "foreign loop variable": _loop_var,
                "reduction type": _reduce_type, "undefined output": _output, "input positions": _input_position}


@pytest.mark.parametrize("name", GRAPH_BREAKS)
def test_verify_graph_rejects(name):
    g = _graph()
    GRAPH_BREAKS[name](g)
    with pytest.raises(IRError, match="after lower"):
        verify_graph(g)


def _swap_steps(s):
    s.steps[0], s.steps[-1] = s.steps[-1], s.steps[0]


def _drop_step(s):
    k = next(i for i, st in enumerate(s.steps) if isinstance(st, Kernel))
    del s.steps[k]
    del s.frees[k]


def _early_free(s):
    last = max(i for i, st in enumerate(s.steps) if isinstance(st, Kernel))
    read = next(r for r in s.steps[last].reads if r not in {n.name for n in s.graph.nodes
                                                            if isinstance(n, InputBuffer)})
    s.frees[0].append(read)


def _free_output(s):
    s.frees[-1].append(next(iter(s.graph.output_names())))


def _double_store(s):
    k = next(st for st in s.steps if isinstance(st, Kernel))
    s.steps.append(copy.copy(k))
    s.frees.append([])


def _frees_length(s):
    s.frees.append([])


SCHEDULE_BREAKS = {"steps out of order": _swap_steps, "node in no step": _drop_step, "freed early": _early_free,
                   "output freed": _free_output, "stored twice": _double_store, "frees per step": _frees_length}


@pytest.mark.parametrize("name", SCHEDULE_BREAKS)
def test_verify_schedule_rejects(name):
    s = schedule(_graph())      # a matmul, then one kernel reading its result
    assert len(s.steps) >= 2 and isinstance(s.steps[-1], Kernel), s.python()
    SCHEDULE_BREAKS[name](s)
    with pytest.raises(IRError, match="after schedule"):
        verify_schedule(s)


def _method_node(gm):
    x = next(n for n in gm.graph.nodes if n.op == "placeholder")
    with gm.graph.inserting_after(x):
        gm.graph.call_method("relu", (x,))


def _torch_function(gm):
    x = next(n for n in gm.graph.nodes if n.op == "placeholder")
    with gm.graph.inserting_after(x):
        gm.graph.call_function(torch.relu, (x,))


def _unused_use_before_def(gm):
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    nodes[0].args = (nodes[-1],) + tuple(nodes[0].args[1:])


PRIM_BREAKS = {"call_method": _method_node, "non-prim function": _torch_function,
               "use before definition": _unused_use_before_def}


@pytest.mark.parametrize("name", PRIM_BREAKS)
def test_verify_prim_graph_rejects(name):
    gm = _prims()
    PRIM_BREAKS[name](gm)
    with pytest.raises(PrimGraphError):
        verify_prim_graph(gm)


def test_getitem_and_aten_externs_are_prim_graph_nodes():
    g = fx.Graph()
    x = g.placeholder("x")
    mx = g.call_function(torch.ops.aten.max.dim, (x, 0))
    g.output((g.call_function(operator.getitem, (mx, 0)),))
    verify_prim_graph(fx.GraphModule({}, g))


def test_every_pass_is_logged_by_name(caplog):
    ember.set_logs(passes=True)
    try:
        with caplog.at_level(logging.INFO, logger="ember"):
            fn = run_pipeline(GraphCompile(_prims(), "inference", make_options(None, {"verify_ir": True})))
    finally:
        ember.set_logs(passes=False)
    text = "\n".join(r.getMessage() for r in caplog.records)
    for p in PIPELINE:
        assert f"after {p.name}:" in text, p.name
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    got, want = fn(x, w), _program(x, w)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)


def test_a_verifier_failure_is_raised_not_hidden_by_the_symbolic_fallback(monkeypatch):
    """``compile_graph`` turns a stage's failure on a symbolic graph into ``SymbolicUnsupported`` (compile it
    static instead); a verifier's finding is a bug in ember and must surface."""
    import ember.codegen.passes as passes
    from ember.codegen import compile_graph

    def broken(st):
        st.graph.nodes.append(dataclasses.replace(_computed(st.graph)))
    real = passes._lower

    def lower_then_break(st):
        real(st)
        broken(st)
    monkeypatch.setattr(passes, "PIPELINE", tuple(dataclasses.replace(p, run=lower_then_break)
                                                 if p.name == "lower" else p for p in passes.PIPELINE))
    gm = _prims()
    gm.meta["ember_symbols"] = type("T", (), {"symbols": {sympy.Symbol("s0"): None}})()
    monkeypatch.setattr("ember.shapes.using", lambda table: __import__("contextlib").nullcontext())
    with pytest.raises(IRError):
        compile_graph(gm, "inference", make_options(None, {"verify_ir": True}))
