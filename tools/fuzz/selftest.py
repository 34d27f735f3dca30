"""Planted bugs for the harness's own tests: custom backends (torch.compile backend contract) that compile
the captured graph wrongly, so the fuzzer must report them."""
from __future__ import annotations

import torch


def _bump(x):
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
        return x + 0.5
    if isinstance(x, (list, tuple)):
        return type(x)(_bump(v) for v in x)
    return x


def perturb_backend(gm, example_inputs):
    """Every floating-point graph output comes back off by 0.5: a "wrong result" backend."""
    def run(*args):
        return _bump(gm(*args))
    return run


def raising_backend(gm, example_inputs):
    """Compiles fine, raises on every call: a "crash where eager works" backend."""
    def run(*args):
        raise RuntimeError("planted bug: this backend always raises")
    return run


def hanging_backend(gm, example_inputs):
    """Every call sleeps (a "timeout" backend)."""
    def run(*args):
        import time
        time.sleep(3600)
    return run


def dying_backend(gm, example_inputs):
    """Every call kills its process, as a crashing kernel would (a "died" backend)."""
    def run(*args):
        import os
        os._exit(3)
    return run


def ulp_backend(gm, example_inputs):
    """Every floating-point graph output off by about one ulp (a kernel as accurate as eager's, rounding
    differently): only ill-conditioned programs can tell, and the fuzzer must not call that a wrong result."""
    def nudge(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
            return x * (1 + torch.finfo(x.dtype).eps)
        if isinstance(x, (list, tuple)):
            return type(x)(nudge(v) for v in x)
        return x

    def run(*args):
        return nudge(gm(*args))
    return run
