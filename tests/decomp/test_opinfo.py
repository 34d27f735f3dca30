"""OpInfo sweep: every op_db op (float32, CPU, up to 2 samples) runs with each ATen op it dispatches to that
has an ember decomposition replaced by that decomposition (reference interpreter, meta rules checked); results
must equal eager. Ops whose ATen calls have no decomposition are counted, not compared."""
from __future__ import annotations

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils import _pytree as pytree

import ember.decomp as D
from decomp_util import assert_same

# op_db name -> why its decomposed result differs from eager (kept short; each entry is a known gap).
KNOWN_FAILURES: dict[str, str] = {}


class _Decomposing(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.hit: set = set()
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.seen.add(func)
        if D.has_decomposition(func):
            self.hit.add(func)
            return D.run_decomposition(func, *args, **kwargs)
        return func(*args, **kwargs)


NONDETERMINISTIC = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"}


class _EagerRejects(Exception):
    """Eager itself raises on this sample (e.g. a CUDA-only op): nothing to compare."""


def _run_one(info, sample):
    fn = info.op
    try:
        ref = fn(sample.input, *sample.args, **sample.kwargs)
    except Exception as e:  # noqa: BLE001
        raise _EagerRejects(str(e)) from e
    mode = _Decomposing()
    with mode:
        out = fn(sample.input, *sample.args, **sample.kwargs)
    return ref, out, mode


def sweep():
    passed, failed, not_decomposed, seen = [], {}, [], set()
    for info in op_db:
        if not info.supports_dtype(torch.float32, "cpu"):
            continue
        try:
            samples = list(info.sample_inputs("cpu", torch.float32, requires_grad=False))[:2]
        except Exception:  # noqa: BLE001 - sample generation itself failing is OpInfo's problem
            continue
        hit_any, ok, err = False, True, None
        for sample in samples:
            try:
                ref, out, mode = _run_one(info, sample)
                seen |= mode.seen
                if mode.hit:
                    hit_any = True
                    if info.name in NONDETERMINISTIC:
                        out, ref = pytree.tree_map(_meta_only, out), pytree.tree_map(_meta_only, ref)
                    assert_same(pytree.tree_map(_dense, out), pytree.tree_map(_dense, ref))
            except _EagerRejects:
                continue
            except Exception as e:  # noqa: BLE001 - recorded as a failure of this op
                ok, err = False, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                hit_any = True
                break
        name = f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name
        if not hit_any:
            not_decomposed.append(name)
        elif ok:
            passed.append(name)
        else:
            failed[name] = err
    return passed, failed, not_decomposed, seen


def _meta_only(x):
    return torch.zeros(x.shape, dtype=x.dtype) if isinstance(x, torch.Tensor) else x


def _dense(x):
    return x.to_dense() if isinstance(x, torch.Tensor) and x.layout != torch.strided else x


def test_opinfo_sweep():
    passed, failed, not_decomposed, seen = sweep()
    report = D.coverage_report(seen)
    print(f"\nOpInfo sweep (float32, <=2 samples): {len(passed)} ops pass through decompositions, "
          f"{len(failed)} fail, {len(not_decomposed)} reach no decomposition")
    print(f"ATen overloads seen: {len(report['decomposed']) + len(report['missing'])}, decomposed: "
          f"{len(report['decomposed'])}, without a decomposition: {len(report['missing'])}")
    for name, err in sorted(failed.items()):
        print(f"  FAIL {name}: {err}")
    unexpected = {k: v for k, v in failed.items() if k not in KNOWN_FAILURES}
    assert not unexpected, f"{len(unexpected)} ops differ from eager: {sorted(unexpected)}"
    assert len(passed) >= 200
