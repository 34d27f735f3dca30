"""Where in the user's code a compiled graph raised at run time.

A graph call that raises (an index out of range, a check of a data-dependent size) fails inside the
backend's code, which knows nothing of the user's lines. On that (rare) path only, the captured FX graph runs
again, node by node, on copies of the same inputs with the RNG state restored afterwards; the node that
raises the same exception type names the user's frames (``ember_frames`` in its meta), and the original
exception is raised again from stand-ins of them (tracebacks.py), as eager's traceback would show it. An
exception class marked ``stands_in_for_eager`` (a C++ kernel's ``IndexOutOfRange``) is replaced there by the
error the eager node raised, type and message.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from ...errors import EmberError
from ..tracebacks import raise_in_user_frames


class _Finder(fx.Interpreter):
    current: fx.Node | None = None

    def run_node(self, n: fx.Node) -> Any:
        self.current = n
        return super().run_node(n)


def _failing_node(gm: fx.GraphModule, args: tuple, exc: BaseException) -> tuple[fx.Node | None, Any]:
    copies = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    cuda = sorted({a.device.index or 0 for a in args if isinstance(a, torch.Tensor) and a.device.type == "cuda"})
    grad = torch.is_grad_enabled()
    finder = _Finder(gm)
    finder.extra_traceback = False          # the node's own error, without FX's "While executing" note
    try:
        with torch.random.fork_rng(devices=cuda), torch.no_grad():
            finder.run(*copies)
    except Exception as e:      # noqa: BLE001 - the error being located
        if type(e) is type(exc) or getattr(type(exc), "stands_in_for_eager", False):
            return finder.current, e
        return None, None
    finally:
        torch._C._set_grad_enabled(grad)
    return None, None


def graph_error(exc: BaseException, gm: fx.GraphModule, args: tuple) -> None:
    """Called by the glue when the graph call raised ``exc``: raises it from the user's frames of the node
    that raised, or returns (the glue re-raises it as it is) when no node can be named."""
    if isinstance(exc, EmberError):
        return
    try:
        node, eager_exc = _failing_node(gm, args, exc)
    except Exception:           # noqa: BLE001 - locating must never replace the user's error
        return
    frames = node.meta.get("ember_frames") if node is not None else None
    if frames:
        # a kernel's stand-in error (an index out of range) is raised as the error eager raises there
        raise_in_user_frames(exc if type(eager_exc) is type(exc) else eager_exc, frames, keep_tail=False)
