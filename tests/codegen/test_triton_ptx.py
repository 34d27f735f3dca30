"""Every Triton kernel of the test table compiles for an H100 (sm_90), without a GPU.

The interpreter (tests/codegen/test_triton.py) checks what kernels compute but not that Triton's compiler takes
them (types carried through loops, libdevice overloads, reductions with custom combine functions). Triton picks
interpretation per process, so the compile runs in a subprocess without TRITON_INTERPRET: this file is also
that subprocess's script (``python test_triton_ptx.py [case ...]``).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _ptxas() -> bool:
    spec = importlib.util.find_spec("triton")
    if spec is None or spec.origin is None:
        return False
    return (Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "ptxas").exists()


@pytest.mark.skipif(not _ptxas(), reason="triton (with its bundled ptxas) is not installed")
def test_table_compiles_for_sm90(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(EMBER_CACHE_DIR=str(tmp_path / "ember"), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE), env.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=900,
                       check=False)
    assert r.returncode == 0 and "failures 0" in r.stdout, r.stdout[-6000:] + r.stderr[-6000:]


def _compile_all(names: list[str]) -> int:
    import torch
    import triton
    from test_triton import CASES
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ember.autograd.aot import aot_compile
    from ember.codegen import triton as tb
    from ember.codegen.triton_gen import generate
    from ember.loopir.kernel import kernel_body
    from ember.loopir.lower import lower
    from ember.loopir.schedule import Kernel, schedule

    ty = {torch.float32: "*fp32", torch.float64: "*fp64", torch.float16: "*fp16", torch.bfloat16: "*bf16",
          torch.int8: "*i8", torch.int16: "*i16", torch.int32: "*i32", torch.int64: "*i64", torch.uint8: "*u8",
          torch.bool: "*i1"}
    target = GPUTarget("cuda", 90, 32)
    kernels = failures = 0
    for name in names:
        fn, make, train, _, float_only = CASES[name]
        for dt in [None] if float_only else [None, torch.bfloat16]:
            torch.manual_seed(0)
            ins = [t.to(dt) if dt is not None and t.dtype == torch.float32 else t for t in make()]
            if train:
                ins = [t.requires_grad_(t.is_floating_point()) for t in ins]
            graphs: list = []
            aot_compile(torch.fx.symbolic_trace(fn), ins, decompose=True,
                        compile_graph=lambda g, k, graphs=graphs: graphs.append(g) or g)
            for g in graphs:
                for step in schedule(lower(g, "g")).steps:
                    if not isinstance(step, Kernel):
                        continue
                    body = kernel_body(step, persistent=tb.persistent(step))
                    src, fname, cfg = generate(body, tb.persistent(step))
                    jf = getattr(tb.load_module(src), fname)
                    sig = {a: ty[d] for a, (d, _) in zip(jf.arg_names, body.buffers.values())}
                    attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(sig))}
                    kernels += 1
                    try:
                        triton.compile(ASTSource(jf, sig, {}, attrs), target=target,
                                       options={"num_warps": cfg.num_warps})
                    except Exception as e:  # noqa: BLE001 - report every kernel that fails
                        failures += 1
                        print(f"==== {name} {dt} {fname}\n{src}\n{str(e)[-3000:]}")
    print(f"kernels {kernels} failures {failures}")
    return failures


if __name__ == "__main__":
    from test_triton import CASES as _CASES
    sys.exit(1 if _compile_all(sys.argv[1:] or list(_CASES)) else 0)
