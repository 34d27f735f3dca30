"""Dynamic shapes as users meet them (issue 33), ember vs torch.compile vs eager, one process per case:

    python benchmarks/dynamic_shapes.py batch    --model resnet50|bert|mlp|resnet [--device cuda] [--dtype bf16]
    python benchmarks/dynamic_shapes.py seqtrain --model nanogpt [--steps 30]
    python benchmarks/dynamic_shapes.py generate --model gpt2|llama [--tokens 64]

``batch``: inference called with every batch size from 1 to ``--max-batch`` (ascending); prints each engine's
compile count and total time, then the median time per call at batch 8 and 32 of the graph compiled while
sweeping (dynamic) vs a compile of that one size (``dynamic=False``).
``seqtrain``: a training loop whose sequence length is drawn from 64..512 each step (fixed seed); prints the
compile count and the largest relative loss difference to eager.
``generate``: greedy ``generate(max_new_tokens=N, use_cache=True)``; prints whether the tokens equal eager's, the
compile count and the time per token (ember and torch.compile, default and reduce-overhead).
Engines are ``eager``, ``ember`` (dynamic=None), ``inductor`` (torch.compile, dynamic=None); ``@mode`` suffixes
pick a mode. Results are JSON lines on stdout."""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _compile(engine: str, model, dynamic=None):
    name, _, mode = engine.partition("@")
    if name == "eager":
        return model
    if name == "ember":
        import ember
        return ember.compile(model, dynamic=dynamic, mode=mode or None)
    return torch.compile(model, dynamic=dynamic, mode=mode or None)


def _reset(engine: str) -> None:
    import ember
    ember.reset()
    if engine.startswith("inductor"):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()


def _compiles(engine: str) -> int:
    if engine.startswith("ember"):
        import ember
        return ember.stats()["graphs_compiled"]
    if engine.startswith("inductor"):
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    return 0


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _median_ms(fn, dev, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        _sync(dev)
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        times.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(times), 3)


def _vision_or_encoder(name: str, dev: torch.device, dtype: torch.dtype):
    """(model, make_input(batch)) for the batch sweep."""
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50()
        return m.to(dev, dtype).eval(), lambda b: (torch.randn(b, 3, 224, 224, device=dev, dtype=dtype),)
    if name == "bert":
        import transformers
        cfg = transformers.BertConfig(num_hidden_layers=6, hidden_size=768, num_attention_heads=12,
                                      intermediate_size=3072, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)
        m = transformers.BertModel(cfg)
        return m.to(dev, dtype).eval(), lambda b: (torch.randint(0, 30522, (b, 128), device=dev),)
    from ember.bench.zoo import HANDWRITTEN
    entry = next(e for e in HANDWRITTEN if e.name == name)
    w = entry.build("quick", dev)
    shape = w.make_inputs(0, dev).args[0].shape[1:]
    return w.model.to(dtype).eval(), lambda b: (torch.randn(b, *shape, device=dev, dtype=dtype),)


def batch_sweep(a) -> None:
    dev, dtype = torch.device(a.device), DTYPES[a.dtype]
    model, make = _vision_or_encoder(a.model, dev, dtype)
    with torch.no_grad():
        for engine in a.engines.split(","):
            _reset(engine)
            fn = _compile(engine, model)
            t0 = time.perf_counter()
            for b in range(1, a.max_batch + 1):
                fn(*make(b))
            _sync(dev)
            row = {"case": "batch", "model": a.model, "engine": engine, "compiles": _compiles(engine),
                   "sweep_s": round(time.perf_counter() - t0, 2)}
            for b in (8, 32):
                x = make(b)
                row[f"dynamic_ms_b{b}"] = _median_ms(lambda: fn(*x), dev)
            for b in (8, 32) if engine != "eager" else ():
                _reset(engine)          # a compile of this one size (the caches are per code object)
                x = make(b)
                static = _compile(engine, model, dynamic=False)
                row[f"static_ms_b{b}"] = _median_ms(lambda: static(*x), dev)
            print(json.dumps(row), flush=True)


def seq_train(a) -> None:
    from ember.bench.zoo import HANDWRITTEN
    dev = torch.device(a.device)
    entry = next(e for e in HANDWRITTEN if e.name == a.model)
    cfg = dict(entry.configs["quick"], block=512)
    losses = {}
    for engine in ["eager"] + a.engines.split(","):
        if engine == "eager" and engine in losses:
            continue
        _reset(engine)
        torch.manual_seed(0)
        w = entry.build_fn(cfg)
        model = w.model.to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        fn = _compile(engine, model)
        gen = torch.Generator().manual_seed(1)
        out = []
        t0 = time.perf_counter()
        for _ in range(a.steps):
            s = int(torch.randint(64, 513, (1,), generator=gen))
            x = torch.randint(0, cfg["vocab"], (cfg["batch"], s), generator=gen).to(dev)
            y = torch.randint(0, cfg["vocab"], (cfg["batch"], s), generator=gen).to(dev)
            loss = w.loss(fn(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            out.append(float(loss))
        losses[engine] = out
        ref = losses["eager"]
        diff = max(abs(p - q) / max(abs(q), 1e-6) for p, q in zip(out, ref))
        print(json.dumps({"case": "seqtrain", "model": a.model, "engine": engine, "compiles": _compiles(engine),
                          "steps": a.steps, "total_s": round(time.perf_counter() - t0, 2),
                          "max_rel_loss_diff": diff}), flush=True)


def generate(a) -> None:
    import transformers
    dev, dtype = torch.device(a.device), DTYPES[a.dtype]
    torch.manual_seed(0)
    if a.model == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=6, n_embd=768, n_head=12))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            num_hidden_layers=8, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8,
            intermediate_size=2816, vocab_size=32000))
    model = model.to(dev, dtype).eval()
    prompt = torch.randint(0, 1000, (1, 16), device=dev)
    ref = None
    for engine in ["eager"] + a.engines.split(","):
        _reset(engine)
        plain = type(model).forward.__get__(model)      # each engine compiles the model's own forward, never
        model.forward = _compile(engine, plain) if engine != "eager" else plain     # the previous engine's
        kw = dict(max_new_tokens=a.tokens, do_sample=False, use_cache=True, pad_token_id=0)
        with torch.no_grad():
            toks = model.generate(prompt, **kw)
            ms = _median_ms(lambda: model.generate(prompt, **kw), dev, reps=5)
        ref = toks if ref is None else ref
        print(json.dumps({"case": "generate", "model": a.model, "engine": engine, "compiles": _compiles(engine),
                          "tokens_equal_eager": bool(torch.equal(toks, ref)),
                          "ms_per_token": round(ms / a.tokens, 3)}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", choices=["batch", "seqtrain", "generate"])
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bf16" if torch.cuda.is_available() else "fp32", choices=DTYPES)
    p.add_argument("--engines", default="ember,inductor")
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--tokens", type=int, default=64)
    a = p.parse_args()
    {"batch": batch_sweep, "seqtrain": seq_train, "generate": generate}[a.case](a)


if __name__ == "__main__":
    main()
