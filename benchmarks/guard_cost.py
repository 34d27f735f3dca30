"""Host cost of a cached call's guards and glue for a module with as many weights as a ResNet-50: 53 blocks of
a 1x1 convolution and a batch norm (318 parameters and buffers), in eval mode under ``no_grad``, compiled with a
backend whose graph does nothing, so each call is the generated glue alone: its guard clauses, then the graph's
inputs pulled from the module.

    python benchmarks/guard_cost.py [--blocks 53] [--resnet] [--compare]
    PYTHONPATH=<transformers> python benchmarks/guard_cost.py --decode gpt2|llama [--calls 2000]

Prints microseconds per call (the best and the median of 15 batches, in this thread's CPU time: this host's
noise only adds) and how many guard clauses the entry checks (``ember.explain(...).guards``).

``--compare``: also torch.compile (dynamic=None) of the same module with the same do-nothing backend, timed in
this process after ember's: its whole cached call (Dynamo's C++ guards and its wrapper) against ember's.

``--decode``: one decode step of the zoo's GPT-2 or Llama (its "quick" config) with a ``DynamicCache``, through
ember.compile and torch.compile (dynamic=None; each warmed on cache lengths 8 to 12 so the length is symbolic).
Both use a backend that runs its FX graph until the timed phase, then returns that run's outputs: a timed call
is guards, glue and the write-back of the cache, nothing else. Each timed call is followed by putting the
cache's tensors of length L back (timed alone and subtracted), so that every call sees the same contiguous
cache of length L, as a decode loop's torch.cat leaves it. Prints µs per call
for each and the guard clauses of the entry that served it (ember: generated clauses; torch.compile: the leaf
guards of its guard manager tree)."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # this checkout's ember, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 block, module for module (conv1/bn1 ... downsample), at small widths."""

    def __init__(self, c: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
        self.conv3, self.bn3 = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet50Like(nn.Module):
    """torchvision's ResNet-50 layout (stem, 3-4-6-3 bottlenecks with downsample branches, pooled head): the
    same modules, attributes and 320 parameters and buffers as the real one, at width 4."""

    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, c, 7, 2, 3, bias=False), nn.BatchNorm2d(c)
        self.relu, self.maxpool = nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        for i, n in enumerate((3, 4, 6, 3)):
            stride = 1 if i == 0 else 2
            down = nn.Sequential(nn.Conv2d(c, c, 1, stride, bias=False), nn.BatchNorm2d(c))
            setattr(self, f"layer{i + 1}", nn.Sequential(Bottleneck(c, stride, down),
                                                         *[Bottleneck(c) for _ in range(n - 1)]))
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# -- decode step (--decode) ------------------------------------------------------------------------------
class _Frozen:
    """A torch.compile-contract backend: each graph runs as FX until ``freeze()``, then returns the outputs of
    its last run (a timed call costs the wrapper alone: guards, glue, write-back)."""

    def __init__(self) -> None:
        self.frozen = False

    def freeze(self) -> None:
        self.frozen = True

    def __call__(self, gm, example_inputs):
        last: list = [None]

        def run(*args):
            if self.frozen and last[0] is not None:
                return last[0]
            last[0] = gm(*args)
            return last[0]
        return run


def _decode_model(name: str):
    import transformers
    from ember.bench.zoo_hf import HF_ENTRIES
    c = dict(next(e for e in HF_ENTRIES if e.name == name).configs["quick"])
    for k in ("batch", "seq", "tgt"):
        c.pop(k, None)
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(**c)
        return transformers.GPT2LMHeadModel(cfg).eval(), cfg
    cfg = transformers.LlamaConfig(**c)
    return transformers.LlamaForCausalLM(cfg).eval(), cfg


def _dynamo_guard_count(code) -> int:
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    def leaves(m) -> int:
        return len(m.get_leaf_guards()) + sum(leaves(c) for c in m.get_child_managers())
    entries = _debug_get_cache_entry_list(code)
    return leaves(entries[0].guard_manager.root) if entries else -1


def _ember_guard_count(f) -> int:
    from ember.explain import _session_caches
    caches = _session_caches(f)
    hit = caches[0]._entry_fns[0]       # the entry that served the last call (a hit moves it to the front)
    return sum(len(e.guards) for c in caches for e in c.entries if e.fn is hit)


def _time_calls(step, calls: int) -> tuple[float, float]:
    """(best, median) µs per call over 15 batches, in this thread's CPU time: the host is shared, and a
    cached call with a graph that does nothing runs on this thread alone."""
    times = []
    for _ in range(15):
        t = time.thread_time()
        for _ in range(calls):
            step()
        times.append((time.thread_time() - t) / calls * 1e6)
    return min(times), statistics.median(times)


def decode(name: str, calls: int, length: int = 12) -> None:
    import ember
    import torch._dynamo
    from transformers import DynamicCache
    m, cfg = _decode_model(name)
    tok = torch.randint(0, cfg.vocab_size, (1, 1))
    rows = {}
    for engine in ("ember", "torch.compile"):
        ember.reset()
        torch._dynamo.reset()
        backend = _Frozen()
        f = (ember.compile(m, backend=backend) if engine == "ember"
             else torch.compile(m, backend=backend, dynamic=None))
        with torch.no_grad():
            cache = DynamicCache(config=cfg)
            f(input_ids=torch.randint(0, cfg.vocab_size, (1, 8)), past_key_values=cache, use_cache=True)
            while cache.get_seq_length() < length:          # lengths 8, 9, 10, ...: the length goes symbolic
                f(input_ids=tok, past_key_values=cache, use_cache=True)
            kept = [(layer.keys, layer.values) for layer in cache.layers]      # length ``length``, contiguous

            def restore():
                for layer, (k, v) in zip(cache.layers, kept):
                    layer.keys, layer.values = k, v
            f(input_ids=tok, past_key_values=cache, use_cache=True)
            backend.freeze()

            def step():
                f(input_ids=tok, past_key_values=cache, use_cache=True)
                restore()               # back to ``length``: the very tensors a decode loop's cat made
            restore()
            step()
            best, med = _time_calls(step, calls)
            crop, _ = _time_calls(restore, calls)
        count = _ember_guard_count(f) if engine == "ember" else _dynamo_guard_count(m.forward.__code__)
        rows[engine] = (best - crop, med - crop, count)
    for engine, (best, med, count) in rows.items():
        print(f"{name} decode step, {engine:<13}: {best:6.1f} us per call at best, {med:6.1f} median, "
              f"{count} guard clauses")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=53)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--resnet", action="store_true", help="ResNet-50's module tree instead of the blocks")
    ap.add_argument("--decode", choices=["gpt2", "llama"], help="a decode step of the zoo's model (see above)")
    ap.add_argument("--compare", action="store_true", help="also torch.compile of the same module (see above)")
    a = ap.parse_args()
    if a.decode:
        return decode(a.decode, a.calls)
    import ember
    m = (ResNet50Like() if a.resnet else nn.Sequential(*[Block(4) for _ in range(a.blocks)])).eval()
    x = torch.randn(1, 3, 32, 32) if a.resnet else torch.randn(1, 4, 2, 2)
    out = (torch.zeros(1),)
    f = ember.compile(m, backend=lambda gm, example_inputs: (lambda *args: out))
    with torch.no_grad():
        f(x)
        f(x)
        best, med = _time_calls(lambda: f(x), a.calls)
    tensors = sum(1 for _ in m.parameters()) + sum(1 for _ in m.buffers())
    with torch.no_grad():           # the entry's guards, as ember.explain lists them (one per clause)
        clauses = len(ember.explain(m)(x).guards)
    print(f"{tensors} weights, {clauses} guard clauses: {best:.1f} us per call at best, {med:.1f} median "
          f"({best / clauses * 1e3:.0f} ns per clause)")
    if a.compare:
        from torch._dynamo import reset as dynamo_reset
        dynamo_reset()
        tc = torch.compile(m, backend=lambda gm, example_inputs: (lambda *args: out), dynamic=None)
        with torch.no_grad():
            tc(x)
            tc(x)
            best, med = _time_calls(lambda: tc(x), a.calls)
        n = _dynamo_guard_count(m.forward.__code__)      # -1: no entry on forward's own code (not counted)
        print(f"torch.compile, the same module: {best:.1f} us per call at best, {med:.1f} median"
              + (f" ({n} leaf guards)" if n >= 0 else ""))


if __name__ == "__main__":
    main()
