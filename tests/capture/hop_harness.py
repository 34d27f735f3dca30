"""The differential check of the higher-order-operator tables (test_func_transforms.py, test_control_flow_hop.py).

A ``Program`` has ``make()`` returning the callable to compile (a function or an nn.Module) and ``inputs(i)``
returning the arguments of call ``i`` (fresh random tensors; ``i`` may flip a predicate's sign). ``check``
compiles it with ember, calls it ``calls`` times, and requires on every call values equal eager's, gradients
equal eager's (inputs that require grad and parameters, for a random cotangent), no graph break, no fallback
to eager, no recompile, and no more graphs than torch.compile compiles for the same calls.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_leaves

import ember


@dataclass(frozen=True)
class Program:
    name: str
    make: Callable[[], Any]
    inputs: Callable[[int], tuple]
    calls: int = 2
    sizes_vary: bool = False        # inputs(i) has other sizes on each call (automatic dynamic recompiles once)


def table() -> tuple[list[Program], Callable]:
    programs: list[Program] = []

    def program(inputs: Callable[[int], tuple], calls: int = 2, sizes_vary: bool = False):
        def deco(fn):
            programs.append(Program(fn.__name__, fn, inputs, calls, sizes_vary))
            return fn
        return deco
    return programs, program


def _same(a: Any, b: Any) -> None:
    la, lb = tree_leaves(a), tree_leaves(b)
    assert len(la) == len(lb), (a, b)
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5, equal_nan=True)
        else:
            assert x == y, (x, y)


def _grads(fn: Any, args: tuple, seed: int) -> tuple[Any, list]:
    out = fn(*args)
    wrt = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    if isinstance(fn, torch.nn.Module):
        wrt += [p for p in fn.parameters() if p.requires_grad]
    outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    if not wrt or not outs or not torch.is_grad_enabled():
        return out, []
    g = torch.Generator().manual_seed(seed)
    loss = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outs)
    return out, list(torch.autograd.grad(loss, wrt, allow_unused=True))


def _copy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    if isinstance(x, (tuple, list)):
        return type(x)(_copy(y) for y in x)
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    return x


def check(prog: Program, backend: str, dynamic: bool | None = None, symbolic: bool | None = None) -> None:
    """``dynamic=True``: every input size is symbolic from the first call (the graph is traced over symbols),
    compared with torch.compile(dynamic=True). ``symbolic``: True requires a graph with symbolic sizes (where
    an input has a dim of 2 or more), False requires none (a known gap, compiled with static sizes). A
    program whose sizes vary under ``dynamic=None`` may recompile (automatic dynamic), as torch.compile does:
    its graph count is still bounded by torch.compile's."""
    ember.reset()
    torch.manual_seed(0)
    model = prog.make()
    compiled = ember.compile(model, backend=backend, dynamic=dynamic)
    for i in range(prog.calls):
        torch.manual_seed(100 + i)
        args = prog.inputs(i)
        want, want_g = _grads(model, _copy(args), i)
        got, got_g = _grads(compiled, _copy(args), i)
        _same(got, want)
        assert len(got_g) == len(want_g)
        for a, b in zip(got_g, want_g):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    stats = ember.stats()
    assert stats["graph_breaks"] == 0, ember.explain(model)(*prog.inputs(0)).break_reasons
    assert stats["fallbacks_to_eager"] == 0, stats
    assert stats["recompiles"] == 0 or (prog.sizes_vary and dynamic is None), stats
    assert 1 <= stats["graphs_compiled"] <= torch_graph_count(prog, dynamic), stats
    sizable = any(isinstance(a, torch.Tensor) and any(n >= 2 for n in a.shape) for a in tree_leaves(prog.inputs(0)))
    if symbolic is not None and sizable:
        assert (stats["symbolic_graphs"] >= 1) == symbolic, stats


@functools.lru_cache(maxsize=None)
def _torch_count(prog: Program, dynamic: bool | None = None) -> int:
    import torch._dynamo
    torch._dynamo.reset()
    n = [0]

    def counting(gm, example_inputs):
        n[0] += 1
        return gm.forward
    torch.manual_seed(0)
    c = torch.compile(prog.make(), backend=counting, dynamic=dynamic)
    try:
        for i in range(prog.calls):
            torch.manual_seed(100 + i)
            _grads(c, _copy(prog.inputs(i)), i)
    except Exception:       # noqa: BLE001 - torch.compile cannot compile it with these options
        n[0] = -1
    torch._dynamo.reset()
    return n[0]


def torch_graph_count(prog: Program, dynamic: bool | None = None) -> int:
    """How many graphs torch.compile (with the same ``dynamic``) compiles for the program's calls; where it
    fails with that option (``torch.cond`` under ``vmap`` with symbolic sizes), its count with the default."""
    n = _torch_count(prog, dynamic)
    return n if n >= 0 or dynamic is None else _torch_count(prog, None)
