"""A convolution graph compiled with symbolic sizes gets the layout plan of the same graph compiled static
(ember.loopir.conv_layout, issue 33 part 4).

A ResNet-style network (stem convolution, batch norm, ReLU, max pool, residual blocks, a strided 1x1
shortcut) runs on the CPU's float32 channels-last rule with symbolic sizes: ``dynamic=True`` (batch and spatial
sizes symbolic), ``mark_dynamic`` of the batch, and automatic dynamic (a second batch size). For each, inference
and training: the symbolic graph compiles once for every size of the table, its values (and gradients and
running statistics) equal eager's at several sizes, and its loop graph is the static graph's at the hinted
sizes: every computed 4-D buffer in the same (channels-last) layout and written in the same memory order, the
same kernels (fusion decided at the hints), the same ATen calls (the max pool a kernel, not an ATen call with an NCHW argument); the wrapper hands the
convolutions their activations as allocated (no ``as_strided`` of a computed buffer), and nothing is copied into
another layout at run time (the backward takes the forward's channels-last saved activations as they are).
"""
from __future__ import annotations

from collections import Counter

import pytest
import sympy
import torch
from torch import nn

import ember
from ember.loopir import conv_layout
from ember.loopir.ir import Extern, Pointwise
from tests.loopir.test_conv_layout import _restrides


class Block(nn.Module):
    def __init__(self, cin: int, c: int, stride: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
        self.short = None if stride == 1 and cin == c else nn.Sequential(
            nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        return torch.relu(y + (x if self.short is None else self.short(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(Block(8, 8, 1), Block(8, 16, 2))
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def _pair(train: bool) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    a = Net()
    for m in a.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2)
    b = Net()
    b.load_state_dict(a.state_dict())
    return a.train(train), b.train(train)


# mode -> (dynamic=, mark the batch dynamic, input sizes (batch, height, width) of the calls)
MODES = {
    "dynamic_true": (True, False, [(2, 16, 16), (3, 15, 15), (5, 17, 14)]),
    "mark_batch": (False, True, [(2, 16, 16), (3, 16, 16), (5, 16, 16)]),
    "automatic": (None, False, [(2, 16, 16), (5, 16, 16), (3, 16, 16), (4, 16, 16)]),
}


def _lowered(monkeypatch) -> list:
    """(graph, symbol table or None, channels-last) of every graph lowered from now on."""
    from ember.loopir import lower as lower_mod
    seen: list = []
    real = lower_mod.Lowerer.run

    def run(self):
        g = real(self)
        seen.append((g, self.table, self.channels_last))
        return g
    monkeypatch.setattr(lower_mod.Lowerer, "run", run)
    return seen


def _scheduled(monkeypatch) -> dict:
    """graph name -> the schedule of the graph (its first one)."""
    import importlib
    sched_mod = importlib.import_module("ember.loopir.schedule")     # (the package exports a function of that name)
    seen: dict = {}
    real = sched_mod.schedule

    def schedule(graph, *a, **k):
        out = real(graph, *a, **k)
        seen.setdefault(graph.name, out)
        return out
    monkeypatch.setattr(sched_mod, "schedule", schedule)
    return seen


def _kernels(sched, table) -> Counter:
    """The kernels of a schedule: (x size, reduction size) at the hints and what each node computes."""
    from ember.loopir.schedule import Kernel
    from ember.loopir.ir import Reduction
    return Counter((_at_hints(k.xnumel, table), _at_hints(k.rnumel, table),
                    tuple(sorted(n.reduce_type if isinstance(n, Reduction) else type(n).__name__ for n in k.nodes)))
                   for k in sched.steps if isinstance(k, Kernel))


def _wrappers(monkeypatch) -> list:
    from ember.codegen import wrapper as wr
    sources: list = []
    real = wr.make_wrapper

    def make(*a, **k):
        fn = real(*a, **k)
        sources.append(fn.source)
        return fn
    monkeypatch.setattr(wr, "make_wrapper", make)
    return sources


def _at_hints(v, table):
    return table.hint(v) if table is not None and isinstance(v, sympy.Basic) else v


def _plan(graph, table) -> tuple[Counter, Counter]:
    """The layouts (at the hints) of the 4-D buffers the graph's kernels compute, each with the shape the kernel
    iterates (memory order for a permuted layout), and the ATen calls the graph makes."""
    lays: Counter = Counter()
    for n in graph.nodes:
        if isinstance(n, Pointwise) and len(n.layout.shape) == 4:
            lays[(tuple(_at_hints(v, table) for v in n.layout.shape),
                  tuple(_at_hints(v, table) for v in n.layout.stride),
                  tuple(_at_hints(v, table) for v in n.ranges))] += 1
    calls = Counter(n.op or str(n.target) for n in graph.nodes if isinstance(n, Extern))
    return lays, calls


def _run(model, ref, sizes, dynamic, mark, train):
    f = ember.compile(model, dynamic=dynamic)
    for b, h, w in sizes:
        x = torch.randn(b, 3, h, w)
        if mark:
            ember.mark_dynamic(x, 0)
        xr = x.clone()
        if train:
            x.requires_grad_(True)
            xr.requires_grad_(True)
        with torch.set_grad_enabled(train):
            got, want = f(x), ref(xr)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        if not train:
            continue
        g = torch.randn_like(want)
        got.backward(g)
        want.backward(g)
        torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-4)
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=5e-4, msg=name)
            p.grad = q.grad = None
        for c, d in zip(model.buffers(), ref.buffers()):
            torch.testing.assert_close(c, d, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("mode", list(MODES))
def test_symbolic_graph_has_the_static_layout_plan(mode, train, monkeypatch):
    _check_static_plan(mode, train, monkeypatch)


def test_symbolic_graph_hoists_per_channel_values_as_static(monkeypatch):
    """With the lowering of Triton kernels (small costly values a user broadcasts are stored once: a batch
    norm's per-channel rsqrt), a symbolic batch stores the same ones as the static graph (the users' sizes are
    weighed at the hints)."""
    from ember.loopir import lower as lower_mod
    real = lower_mod.Lowerer.__init__

    def init(self, *a, **k):
        real(self, *a, **k)
        self.hoists = lambda dev: True
    monkeypatch.setattr(lower_mod.Lowerer, "__init__", init)
    graphs = _check_static_plan("mark_batch", False, monkeypatch)
    for sg, tg in graphs:
        assert len(sg.hoisted) == len(tg.hoisted), (sg.name, sorted(sg.hoisted), sorted(tg.hoisted))
    assert any(tg.hoisted for _, tg in graphs)


def _check_static_plan(mode: str, train: bool, monkeypatch) -> list:
    """Compile the network with ``mode``'s symbolic sizes and static at its hints; check they get the same plan;
    return the (symbolic, static) loop graphs."""
    monkeypatch.setattr(conv_layout, "NHWC_WEIGHTS", {"cpu"})
    monkeypatch.setattr(conv_layout, "DTYPES", {"cpu": (torch.float32,)})
    dynamic, mark, sizes = MODES[mode]
    ember.reset()
    seen = _lowered(monkeypatch)
    scheds = _scheduled(monkeypatch)
    sources = _wrappers(monkeypatch)
    copies = _restrides(monkeypatch)
    _run(*_pair(train), sizes, dynamic, mark, train)
    symbolic = [(g, t) for g, t, cl in seen if t is not None]
    per_call = 2 if train else 1
    assert len(symbolic) == per_call, [g.name for g, _ in symbolic]      # one symbolic compile serves every size
    assert all(cl for _, _, cl in seen)
    assert not copies, copies       # saved activations reach the backward channels-last, as the forward stores them
    calls = [ln for src in sources for ln in src.splitlines() if "= extern" in ln]
    assert calls and not [ln for ln in calls if "as_strided(buf" in ln]
    hints = [symbolic[0][1].hint(s) for s in sorted(symbolic[0][1].symbols, key=str)]

    # the same network compiled static at the symbolic graph's hinted sizes
    first_symbolic = next(i for i, (_, t, _) in enumerate(seen) if t is not None) // per_call
    b, h, w = sizes[first_symbolic]
    del seen[:]
    sym_scheds = dict(scheds)
    scheds.clear()
    ember.reset()
    _run(*_pair(train), [(b, h, w)], False, False, train)
    static = [(g, t) for g, t, _ in seen]
    assert len(static) == per_call and all(t is None for _, t in static)
    for (sg, st), (tg, _) in zip(symbolic, static):
        (sl, sc), (tl, tc) = _plan(sg, st), _plan(tg, None)
        assert sl == tl, (sg.name, hints, "symbolic only:", sl - tl, "static only:", tl - sl)
        assert sc == tc, (sg.name, hints, sc, tc)
        # the same kernels (a training graph's per-channel sums with the channels-last gradient they read)
        sk, tk = _kernels(sym_scheds[sg.name], st), _kernels(scheds[tg.name], None)
        assert sk == tk, (sg.name, hints, "symbolic only:", sk - tk, "static only:", tk - sk)
    return [(sg, tg) for (sg, _), (tg, _) in zip(symbolic, static)]


# (kernel, stride, padding) of max and average pools whose padding after the input depends on the parity of a
# symbolic size, or never reaches past it (padding 0), or is over-estimated (padding < stride - 1)
POOLS = [(3, 2, 1), (2, 2, 0), (3, 3, 1), (5, 3, 2)]


class PoolNet(nn.Module):
    def __init__(self, k: int, s: int, p: int, avg: bool) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(4)
        self.pool = (nn.AvgPool2d if avg else nn.MaxPool2d)(k, s, p)

    def forward(self, x):
        return self.pool(torch.relu(self.bn(x))) * 2


@pytest.mark.parametrize("avg", [False, True], ids=["max", "avg"])
@pytest.mark.parametrize("pool", POOLS, ids=[f"k{k}s{s}p{p}" for k, s, p in POOLS])
def test_pools_and_batch_norm_stay_kernels_with_symbolic_sizes(pool, avg, monkeypatch):
    """Training batch norm (running variance's n / (n - 1), the backward's 1 / n) and pools over symbolic sizes
    decompose to kernels: one symbolic forward and backward serve every size (odd and even), with eager's
    values, gradients and running statistics, and no ATen call."""
    ember.reset()
    seen = _lowered(monkeypatch)
    torch.manual_seed(0)
    model, ref = PoolNet(*pool, avg), PoolNet(*pool, avg)
    ref.load_state_dict(model.state_dict())
    f = ember.compile(model, dynamic=True)
    for b, h, w in [(2, 12, 12), (3, 13, 11), (4, 10, 15)]:
        x = torch.randn(b, 4, h, w, requires_grad=True)
        xr = x.detach().clone().requires_grad_(True)
        got, want = f(x), ref(xr)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        g = torch.randn_like(want)
        got.backward(g)
        want.backward(g)
        torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
            p.grad = q.grad = None
        for c, d in zip(model.buffers(), ref.buffers()):
            torch.testing.assert_close(c, d, rtol=1e-5, atol=1e-5)
    assert len(seen) == 2 and all(t is not None for _, t, _ in seen), [g.name for g, _, _ in seen]
    calls = [(n.op, str(n.target)) for g, _, _ in seen for n in g.nodes if isinstance(n, Extern)]
    assert not calls, calls         # the network has nothing but kernels
