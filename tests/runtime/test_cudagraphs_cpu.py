"""CUDA graph bookkeeping on the CPU: ``ember.runtime.cudagraphs`` with a fake ``CudaOps`` whose "graph" reruns
the function into the recorded (static) output tensors, so warm-up, static-input detection, placeholders, the
overwrite rule, protection of saved tensors, fallbacks and the pool sharing run without a GPU. The real thing
runs in tests/gpu/test_cudagraphs.py."""
from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ember  # noqa: E402
from ember import logs  # noqa: E402
from ember.options import CompileOptions, make_options  # noqa: E402
from ember.runtime import cudagraphs as cg  # noqa: E402


class FakeOps(cg.CudaOps):
    """Every CPU tensor is a "device" tensor unless tagged ``t._host = True``; a recording is (fn, inputs,
    static outputs) and a replay reruns fn and copies into the static outputs (fixed memory, as a graph)."""

    def __init__(self, invalidate: bool = True) -> None:
        self.records = self.replays = self.pools = 0
        self.invalidated: list[tuple[int, str]] = []
        self.fail = False
        self._can = invalidate

    def usable(self, t):
        return t.device.type == "cpu" and not getattr(t, "_host", False)

    def new_pool(self, device):
        self.pools += 1
        return object()

    def record(self, fn, inputs, pool, device):
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.records += 1
        # a capture runs nothing: what fn writes into its inputs is undone (the caller's replay writes it)
        before = [a.clone() if isinstance(a, torch.Tensor) else None for a in inputs]
        outs = tuple(t.clone() if isinstance(t, torch.Tensor) and not any(t is a for a in inputs) else t
                     for t in fn(*inputs))
        with torch.no_grad():
            for a, b in zip(inputs, before):
                if b is not None and not torch.equal(a, b):
                    a.copy_(b)
        # a graph reads raw addresses: keep views over storages that do not own (or keep alive) the inputs
        # (host tensors are read while recording: their values are baked in)
        raw = [a.clone() if getattr(a, "_host", False) else
               torch.empty((0,), dtype=a.dtype).set_(self.alias_storage(a.untyped_storage()), a.storage_offset(),
                                                     a.shape, a.stride()) if isinstance(a, torch.Tensor) else a
               for a in inputs]
        return (fn, raw, outs), outs

    def replay(self, graph):
        self.replays += 1
        fn, inputs, outs = graph
        for s, n in zip(outs, fn(*inputs)):
            if isinstance(s, torch.Tensor) and s is not n:
                s.copy_(n)

    def can_invalidate(self):
        return self._can

    def invalidate(self, weak, msg):
        self.invalidated.append((weak, msg))


@pytest.fixture
def hints(monkeypatch):
    got: list[str] = []
    real = logs.log
    monkeypatch.setattr(logs, "log", lambda kind, msg: got.append(msg) if kind == "perf_hints" else real(kind, msg))
    return got


def _graph(kind="inference", ops=None, fn=None, options=None, pool=None):
    ops = ops or FakeOps()
    pool = pool or cg.CudaGraphPool(ops)
    calls = []

    def default(w, x):
        calls.append(1)
        return ((x @ w).relu(), x.sum())
    return cg.cudagraphify(fn or default, kind, options, pool), ops, pool, calls


def test_warm_up_then_record_then_replay_with_fresh_values():
    w = torch.nn.Parameter(torch.randn(4, 3))
    g, ops, pool, calls = _graph()
    for i in range(5):
        x = torch.randn(2, 4)
        out = g(w, x)
        ref = ((x @ w).relu(), x.sum())
        assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])
    assert ops.records == 1 and ops.replays == 4 and ops.pools == 1
    rec = pool.recordings[0]
    assert list(rec.static_ptrs) == [0] and list(rec.placeholders) == [1]     # the parameter is read in place


def test_static_inputs_are_read_in_place_and_a_new_address_re_records():
    w = torch.nn.Parameter(torch.randn(4, 3))
    buf = torch.randn(2, 4)                       # the same object every call (a buffer): static by identity
    g, ops, pool, _ = _graph()
    for _ in range(3):
        g(w, buf)
    assert set(pool.recordings[0].static_ptrs) == {0, 1} and not pool.recordings[0].placeholders
    with torch.no_grad():
        w.mul_(2)                                 # in-place update (an optimizer step): seen by the replay
    assert torch.equal(g(w, buf)[0], (buf @ w).relu())
    w2 = torch.nn.Parameter(torch.randn(4, 3))   # another address: this recording cannot serve it
    assert torch.equal(g(w2, buf)[0], (buf @ w2).relu())
    assert ops.records == 2


def test_pool_outputs_feeding_another_graph_are_static():
    ops = FakeOps()
    pool = cg.CudaGraphPool(ops)
    a = cg.cudagraphify(lambda x: (x * 2, x + 1), "forward", None, pool)
    b = cg.cudagraphify(lambda s, t: (s * t,), "backward", None, pool)
    for _ in range(3):
        x = torch.randn(5)
        s, _ = a(x)
        t = torch.randn(5)
        (gx,) = b(s, t)
        assert torch.equal(gx, x * 2 * t)
    rb = pool.recordings[1]
    assert list(rb.static_ptrs) == [0] and list(rb.placeholders) == [1]
    assert pool.recordings[0].saved == {0}        # the backward was seen reading forward output storage 0


def test_holding_an_output_across_replays_is_invalidated():
    g, ops, pool, _ = _graph()
    w = torch.nn.Parameter(torch.randn(4, 3))
    g(w, torch.randn(2, 4))
    first = g(w, torch.randn(2, 4))               # recorded: handed out from the pool
    weak = pool.recordings[0].handout.weaks
    second = g(w, torch.randn(2, 4))
    assert [i for i, _ in ops.invalidated] == weak
    assert all("overwritten by a subsequent run" in m and "mark_step_begin" in m for _, m in ops.invalidated)
    assert first[0].data_ptr() == second[0].data_ptr()     # same pool memory, which is why it is invalidated
    del first, second
    ops.invalidated.clear()
    g(w, torch.randn(2, 4))                       # nothing held: nothing to invalidate
    g(w, torch.randn(2, 4))[0].sum()             # (a temporary dies before the next call)
    g(w, torch.randn(2, 4))
    assert ops.invalidated == []


def test_without_invalidation_outputs_are_copied_out():
    g, ops, pool, _ = _graph(ops=FakeOps(invalidate=False))
    w = torch.nn.Parameter(torch.randn(4, 3))
    g(w, torch.randn(2, 4))
    x1 = torch.randn(2, 4)
    first = g(w, x1)
    g(w, torch.randn(2, 4))
    assert torch.equal(first[0], (x1 @ w).relu())  # a copy: the replay did not touch it
    assert ops.records == 1


def test_replaying_a_graph_puts_only_itself_and_later_recordings_at_risk():
    ops = FakeOps()
    pool = cg.CudaGraphPool(ops)
    a = cg.cudagraphify(lambda x: (x + 1,), "inference", None, pool)
    b = cg.cudagraphify(lambda x: (x * 3,), "inference", None, pool)
    for _ in range(2):
        a(torch.randn(3))
        b(torch.randn(3))
    out_a = a(torch.randn(3))                     # A recorded before B: replaying B cannot write A's outputs
    out_b = b(torch.randn(3))
    assert ops.invalidated == []
    held = pool.recordings[0].handout.weaks + pool.recordings[1].handout.weaks
    a(torch.randn(3))                             # ...but replaying A may write B's (B reuses A's intermediates)
    assert sorted(w for w, _ in ops.invalidated) == sorted(held)
    assert len(pool.handles) == 1 and ops.pools == 1   # one pool shared by both graphs
    del out_a, out_b


def test_saved_tensors_of_a_pending_backward_are_never_overwritten():
    ops = FakeOps()
    pool = cg.CudaGraphPool(ops)
    fwd = cg.cudagraphify(lambda x: (x.sin(), x.cos()), "forward", None, pool)
    bwd = cg.cudagraphify(lambda saved, t: (saved * t,), "backward", None, pool)
    for _ in range(2):                            # warm-up, then recording of both
        x = torch.randn(4)
        out, saved = fwd(x)
        bwd(saved, torch.ones(4))
        del out, saved
    xa, xb = torch.randn(4), torch.randn(4)
    _, saved_a = fwd(xa)                          # two forwards before their backwards (same step)
    _, saved_b = fwd(xb)
    assert ops.invalidated == [] and ops.records == 3      # the second forward got its own recording
    assert torch.equal(bwd(saved_a, torch.ones(4))[0], xa.cos())
    assert torch.equal(bwd(saved_b, torch.ones(4))[0], xb.cos())
    del saved_a, saved_b
    n = ops.records
    for _ in range(3):                            # saved tensors freed: back to plain replays
        out, saved = fwd(torch.randn(4))
        bwd(saved, torch.ones(4))
        del saved
    assert ops.records == n


def test_live_gradients_are_never_overwritten():
    ops = FakeOps()
    pool = cg.CudaGraphPool(ops)
    bwd = cg.cudagraphify(lambda t: (t * 2,), "backward", None, pool)
    bwd(torch.randn(3))
    t1 = torch.randn(3)
    grad = bwd(t1)[0]                             # kept, as AccumulateGrad keeps a .grad
    t2 = torch.randn(3)
    grad2 = bwd(t2)[0]
    assert ops.invalidated == [] and ops.records == 2
    assert torch.equal(grad, t1 * 2) and torch.equal(grad2, t2 * 2)
    del grad, grad2
    bwd(torch.randn(3))
    assert ops.records == 2


def test_user_output_of_a_forward_does_not_block_once_backward_ran():
    ops = FakeOps()
    pool = cg.CudaGraphPool(ops)
    fwd = cg.cudagraphify(lambda x: (x.sin(), x.cos()), "forward", None, pool)
    bwd = cg.cudagraphify(lambda saved, t: (saved * t,), "backward", None, pool)
    loss = None
    for _ in range(6):
        loss, saved = fwd(torch.randn(4))         # the previous `loss` is alive during this call
        bwd(saved, torch.ones(4))
        del saved
    assert ops.records == 2                       # one forward, one backward recording
    assert ops.invalidated                        # the held `loss` of the previous step was invalidated


def test_mark_step_begin_releases_protection():
    ops = FakeOps()
    pool = cg.CudaGraphPool(ops)
    fwd = cg.cudagraphify(lambda x: (x.sin(),), "forward", None, pool)
    fwd(torch.randn(4))
    held = fwd(torch.randn(4))                    # recorded; no backward seen: all its outputs protected
    fwd(torch.randn(4))
    assert ops.records == 2
    cg.mark_step_begin()
    held = fwd(torch.randn(4))
    assert ops.records == 2 and ops.invalidated
    del held


def test_max_records_then_plain_launches(hints):
    opts = make_options(None, {"cudagraph_max_records": 2})
    g, ops, pool, calls = _graph(options=opts)
    w = torch.nn.Parameter(torch.randn(4, 3))
    for n in (2, 3, 5, 5, 5):
        for _ in range(2):
            x = torch.randn(n, 4)
            assert torch.equal(g(w, x)[0], (x @ w).relu())
    assert ops.records == 2
    assert any("cudagraph_max_records" in h for h in hints)


@pytest.mark.parametrize("case", ["host_input", "host_output", "mutation", "capture_fails"])
def test_fallbacks_run_plainly_with_a_hint(case, hints):
    ops = FakeOps()
    ops.fail = case == "capture_fails"

    def fn(w, x):
        if case == "mutation":
            x.add_(1)
        out = (x @ w).relu()
        if case == "host_output":
            out._host = True
        return (out,)
    g, ops, pool, _ = _graph(ops=ops, fn=fn)
    w = torch.nn.Parameter(torch.randn(4, 3))
    for _ in range(4):
        x = torch.randn(2, 4)
        if case == "host_input":
            x._host = True
        ref = (x + 1 if case == "mutation" else x) @ w
        assert torch.allclose(g(w, x)[0], ref.relu())
    assert ops.replays == 0
    # a mutated input that is a new tensor on every call: its signature runs plainly
    assert (g.disabled or g.bad_sigs) and any(("runs without CUDA graphs" in h) for h in hints), hints


def test_mutated_input_that_stays_the_same_tensor_is_recorded():
    """A cache buffer the graph writes in place, passed as the same tensor every call: recorded once, replayed,
    and every replay's write lands in the caller's tensor."""
    def fn(w, cache, x):
        cache.add_(x)
        return ((cache @ w).relu(),)
    g, ops, _, _ = _graph(fn=fn)
    w = torch.nn.Parameter(torch.randn(4, 3))
    cache, ref = torch.zeros(2, 4), torch.zeros(2, 4)
    for _ in range(5):
        x = torch.randn(2, 4)
        ref += x
        assert torch.allclose(g(w, cache, x)[0], (ref @ w).relu())
        assert torch.allclose(cache, ref)
    assert ops.records == 1 and ops.replays >= 3 and not g.disabled


def test_expanded_input_is_not_recorded(hints):
    g, ops, _, _ = _graph(fn=lambda w, x: ((x @ w),))
    w = torch.nn.Parameter(torch.randn(4, 3))
    for _ in range(3):
        x = torch.randn(1, 4).expand(5, 4)
        assert torch.equal(g(w, x)[0], x @ w)
    assert ops.records == 0 and any("overlaps itself" in h for h in hints)


def test_output_aliasing_a_copied_input_is_a_view_of_the_callers_tensor():
    g, ops, _, _ = _graph(fn=lambda x: (x, x[1:] * 2))
    for _ in range(3):
        x = torch.randn(4)
        a, b = g(x)
        assert a.data_ptr() == x.data_ptr() and torch.equal(b, x[1:] * 2)
    assert ops.records == 1


def test_dense_and_graph_on_cuda():
    assert cg._dense(torch.randn(3, 4)) and cg._dense(torch.randn(4, 3).t()) and cg._dense(torch.randn(1))
    assert not cg._dense(torch.randn(1, 4).expand(3, 4)) and not cg._dense(torch.randn(4, 4)[:, :2])
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    assert cg.graph_on_cuda(gm) is None
    next(iter(gm.graph.nodes)).meta["val"] = torch.empty(2, device="meta")
    assert cg.graph_on_cuda(gm) is False


# -- the backends, end to end on the CPU (fake graphs) ----------------------------------------------------------
@pytest.fixture
def fake_cuda(monkeypatch):
    made: list[FakeOps] = []

    class Ops(FakeOps):
        def __init__(self):
            super().__init__()
            made.append(self)
    monkeypatch.setattr(cg, "CudaOps", Ops)
    monkeypatch.setattr(cg, "graph_on_cuda", lambda g: True)
    return made


@pytest.mark.parametrize("backend", ["ember", "cudagraphs"])
def test_training_through_fake_graphs_equals_eager(backend, fake_cuda):
    from tests.models import mlp_factory
    ember.reset()
    model, make_batch = mlp_factory(0)
    ref, _ = mlp_factory(0)
    kw = {"mode": "reduce-overhead"} if backend == "ember" else {"backend": "cudagraphs"}
    if backend == "ember":
        kw = {"options": {"cuda_graphs": True, "cpu_backend": "python"}}
    compiled = ember.compile(model, **kw)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(5):
        x = make_batch(step).args[0]
        for m, o in ((compiled, opt), (ref, opt_ref)):
            o.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            o.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    (ops,) = fake_cuda                            # one pool for the whole compile
    assert ops.records == 2 and ops.replays >= 8   # forward and backward recorded, then replayed
    assert ops.pools == 1


def test_two_compiles_get_two_pools(fake_cuda):
    ember.reset()
    f = ember.compile(lambda x: (x * 2).sin(), backend="cudagraphs")
    g = ember.compile(lambda x: (x * 3).cos(), backend="cudagraphs")
    for _ in range(3):
        x = torch.randn(4)
        assert torch.allclose(f(x), (x * 2).sin()) and torch.allclose(g(x), (x * 3).cos())
    assert len(fake_cuda) == 2 and all(o.records == 1 for o in fake_cuda)


def test_cpu_graph_under_reduce_overhead_runs_plainly(hints):
    ember.reset()
    f = ember.compile(lambda x: (x * 2).sin(), mode="reduce-overhead", options=None)
    x = torch.randn(8)
    assert torch.allclose(f(x), (x * 2).sin())
    assert any("on the CPU" in h for h in hints)


# -- modes and options ---------------------------------------------------------------------------------------------
def test_list_mode_options_shows_what_each_mode_sets():
    modes = ember.list_mode_options()
    assert set(modes) == {"default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"}
    assert modes["reduce-overhead"] == {"cuda_graphs": True}
    assert modes["max-autotune"]["cuda_graphs"] and not modes["max-autotune-no-cudagraphs"].get("cuda_graphs")
    for mode, knobs in modes.items():
        opts = make_options(mode, None)
        assert all(getattr(opts, k) == v for k, v in knobs.items())
        assert make_options(None, knobs) == opts       # every mode is the sum of knobs settable alone
    with pytest.raises(ValueError, match="valid modes"):
        ember.list_mode_options("fast")


@pytest.mark.parametrize("name", [f.name for f in fields(CompileOptions)])
def test_each_knob_is_settable_alone(name):
    from ember.heuristics import Heuristics
    default = getattr(CompileOptions(), name)
    special = {"heuristics": Heuristics(max_kernel_nodes=3),     # knobs whose default is None
               "capture_scalar_outputs": True}
    value = special[name] if name in special else (not default) if isinstance(default, bool) else \
        "python" if isinstance(default, str) else default + 3
    opts = make_options(None, {name: value})
    assert getattr(opts, name) == value
    assert all(getattr(opts, f.name) == getattr(CompileOptions(), f.name) for f in fields(CompileOptions)
               if f.name != name)
    assert name in ember.list_options() and ember.list_options()[name]


def test_torch_knob_name_and_errors():
    assert make_options(None, {"triton.cudagraphs": True}).cuda_graphs
    with pytest.raises(ValueError, match="unknown option"):
        make_options(None, {"triton.cudagraph": True})
    with pytest.raises(ValueError):
        ember.compile(lambda x: x, mode="reduce-overhead", options={"cuda_graphs": True})


def _host(t: torch.Tensor) -> torch.Tensor:
    t._host = True
    return t


def test_host_scalars_key_recordings_and_come_back_as_copies():
    """0-dim host tensors (a wrapped scalar, attention's philox seed) are read while recording: a new value
    records again, the same value replays; host scalar outputs are handed out as copies of the recorded value."""
    def fn(w, x, s):
        return ((x @ w) * s.item(), _host(torch.tensor(7)))
    g, ops, _, _ = _graph(fn=fn)
    w = torch.nn.Parameter(torch.randn(4, 3))
    outs = []
    for v in (2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 2.0):
        x = torch.randn(2, 4)
        out, seed = g(w, x, _host(torch.tensor(v)))
        assert torch.allclose(out, (x @ w) * v) and seed.item() == 7
        outs.append(seed)
    assert ops.records == 2 and ops.replays == 5     # one recording per value; the last call replays the first
    assert len({id(s) for s in outs}) == len(outs)   # every call gets its own host tensor
    assert not g.disabled


def test_host_tensors_that_are_not_scalars_still_fall_back(hints):
    g, ops, _, _ = _graph(fn=lambda w, x: ((x @ w).relu(), _host(torch.ones(2))))
    w = torch.nn.Parameter(torch.randn(4, 3))
    for _ in range(3):
        g(w, torch.randn(2, 4))
    assert ops.records == 0 and g.disabled and "output 1 is a cpu tensor" in g.disabled


# A symbolic graph (dynamic shapes) takes every size, so a static input (read in place) can come back at the
# recorded address with another shape: each way here, a new size must record (or replay its own recording),
# never replay the recording of another size. Before, the fast path compared static inputs by address only.
def _pool_output_sliced(pool, n):
    """A producer graph's output (pool memory) read through a growing slice: same address, new shape."""
    if not hasattr(pool, "_src"):
        make = cg.cudagraphify(lambda x: (x * 2,), "inference", None, pool)
        for _ in range(3):
            pool._src = make(torch.arange(40.0).reshape(4, 10))[0]
    return pool._src[:, :n]


def _pool_output_reshaped(pool, n):
    """The same pool output viewed with other shapes of the same elements."""
    if not hasattr(pool, "_src"):
        make = cg.cudagraphify(lambda x: (x + 1,), "inference", None, pool)
        for _ in range(3):
            pool._src = make(torch.arange(24.0))[0]
    return pool._src.view({2: (2, 12), 3: (3, 8), 4: (4, 6), 6: (6, 4)}[n])


_BUF = torch.arange(60.0)


def _same_object_restrided(pool, n):
    """One tensor object (a buffer: static by identity) whose shape is changed in place between calls."""
    return _BUF.as_strided_((3, n), (n, 1))


SAME_ADDRESS = {"pool_output_sliced": (_pool_output_sliced, [3, 3, 3, 4, 4, 5, 3, 5, 6, 6]),
                "pool_output_reshaped": (_pool_output_reshaped, [2, 2, 2, 3, 3, 4, 2, 6, 6, 3]),
                "same_object_restrided": (_same_object_restrided, [3, 3, 3, 4, 4, 5, 3, 5, 6, 6])}


@pytest.mark.parametrize("name", sorted(SAME_ADDRESS))
def test_a_static_input_with_another_shape_never_replays_another_sizes_recording(name):
    make_input, sizes = SAME_ADDRESS[name]
    ops = FakeOps()
    pool = cg.CudaGraphPool(ops)
    use = cg.cudagraphify(lambda c: (c.sum(1), c * 3), "inference", None, pool)
    ptrs, shapes = set(), []
    for n in sizes:
        c = make_input(pool, n)
        ptrs.add(c.data_ptr())
        shapes.append(tuple(c.shape))
        want = (c.sum(1), c * 3)
        got = use(c)
        assert got[0].shape == want[0].shape and got[1].shape == want[1].shape, (n, got[1].shape)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), n
    assert len(ptrs) == 1                       # the premise: one address for every size
    # one recording per size seen twice (the first call of a size is its warm-up), each for its own size
    assert use.count == sum(shapes.count(sh) >= 2 for sh in set(shapes))
    assert all(r.sig[0][2] == sig[0][2] for sig, rs in use.records.items() for r in rs)


def test_a_graph_compiled_with_static_sizes_keys_static_inputs_by_address():
    g = torch.fx.symbolic_trace(lambda x: x * 2)
    assert cg.graph_static_shapes(g)
    assert not cg.graph_static_shapes(lambda x: x)      # not an FX graph: not known to be static
