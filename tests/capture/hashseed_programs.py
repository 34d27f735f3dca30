"""Child process of ``test_models_capture_s.py``'s hash-seed tests: compiles a table of training programs whose
extern calls (matmul, convolution, attention) read several temporaries that die at that call, runs each with a
loss that leaves the second output unused (the backward variant the whole-graph cache rebuilds on a hit) and
compares values and gradients with eager. Prints ``SOURCES <json>``: every wrapper source the kernel compiler
generated, in order (``output_code`` logs), so the parent can compare them across ``PYTHONHASHSEED`` values."""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ember  # noqa: E402

PROGRAMS = {
    "mm": (lambda x, y: ((x.sin() @ y.cos()).relu(), (x * 2).sum()), [(4, 6), (6, 5)]),
    "bmm": (lambda a, b, c: (torch.bmm(a.exp(), b.tanh()) @ c.sigmoid(), c.sum()), [(2, 3, 4), (2, 4, 5), (5, 3)]),
    "conv": (lambda x, w: (F.conv2d(x.relu(), w.tanh(), padding=1), x.mean()), [(2, 3, 6, 6), (4, 3, 3, 3)]),
    "sdpa": (lambda q, k, v: (F.scaled_dot_product_attention(q.sin(), k.cos(), v.exp()), q.sum()),
             [(2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4)]),
    "addmm": (lambda x, w, b: (torch.addmm(b.exp(), x.cos(), w.sin()).tanh(), w.sum() * 3),
              [(3, 4), (4, 5), (5,)]),
}


class _Sources(logging.Handler):
    def __init__(self):
        super().__init__()
        self.sources: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "# ember wrapper for" in msg:
            self.sources.append(msg[msg.index("# ember wrapper for"):])


def main() -> None:
    handler = _Sources()
    logging.getLogger("ember").addHandler(handler)
    ember.set_logs(output_code=True)
    torch.manual_seed(0)
    for name, (fn, shapes) in PROGRAMS.items():
        vals = [torch.randn(s) for s in shapes]
        mine = [v.clone().requires_grad_() for v in vals]
        ref = [v.clone().requires_grad_() for v in vals]
        out, expect = ember.compile(fn)(*mine), fn(*ref)
        out[0].sum().backward()
        expect[0].sum().backward()
        for i, (a, b) in enumerate(zip(mine, ref)):
            torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-4, msg=lambda m: f"{name} grad {i}: {m}")
        torch.testing.assert_close(out[0].detach(), expect[0].detach(), atol=1e-4, rtol=1e-4)
    print("SOURCES " + json.dumps(handler.sources), flush=True)


if __name__ == "__main__":
    main()
