"""ember's generated code for one zoo model, and what each attention call gets: a diagnosis tool.

    python bench/dump_model_code.py --model bert --task infer --out /tmp/bert_code.txt

Writes EMBER_LOGS=output_code (wrappers and kernels of every graph) to --out, and prints, for eager and for
ember, the dtype, shape and strides of every scaled_dot_product_attention input (which CUDA attention kernel
runs depends on them).
"""
from __future__ import annotations

import argparse
import logging

import torch
import torch.nn.functional as F

from ember.bench.runner import make_step
from ember.bench.zoo import select_models


def _describe(t):
    if not isinstance(t, torch.Tensor):
        return repr(t)
    return f"{t.dtype} {tuple(t.shape)} {t.stride()} off={t.storage_offset()} ptr%16={t.data_ptr() % 16}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--suite", default="full")
    p.add_argument("--task", default="infer", choices=("infer", "train"))
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    from ember.bench.engines import parse_engine
    real = F.scaled_dot_product_attention
    seen: list[str] = []

    def spy(q, k, v, attn_mask=None, *args, **kwargs):
        seen.append(" | ".join(_describe(x) for x in (q, k, v, attn_mask)) + f" {args} {kwargs}")
        return real(q, k, v, attn_mask, *args, **kwargs)
    (entry,), _ = select_models(a.suite, [a.model])
    for name in ("eager", "ember"):
        torch.manual_seed(0)
        w = entry.build(a.suite, device)
        model = w.model.to(device)
        model.train(a.task == "train")
        inputs = w.make_inputs(0, device)
        if name == "ember":
            handler = logging.FileHandler(a.out, mode="w")
            logging.getLogger("ember").addHandler(handler)
            from ember import logs
            logs.set_logs(output_code=True)
            import ember.decomp.prims_shape as ps
            real_impl = ps._sdpa_impl

            def impl_spy(q, k, v, attn_mask=None, *args, **kwargs):
                seen.append("ember: " + " | ".join(_describe(x) for x in (q, k, v, attn_mask)) + f" {args}")
                return real_impl(q, k, v, attn_mask, *args, **kwargs)
            ps._sdpa_impl = impl_spy
            from ember.decomp.core import PRIMS
            PRIMS["sdpa"].impl = impl_spy
        else:
            F.scaled_dot_product_attention = spy
        step = make_step(parse_engine(name), model, w, inputs, a.task, a.dtype, device)
        seen.clear()
        step()
        step()
        F.scaled_dot_product_attention = real
        print(f"== {name}: {len(seen)} attention calls over two steps")
        for s in dict.fromkeys(seen):
            print("  ", s)


if __name__ == "__main__":
    main()
