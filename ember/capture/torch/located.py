"""Where in the user's code a compiled graph raised at run time.

A graph call that raises (an index out of range, a check of a data-dependent size) fails inside the
backend's code, which knows nothing of the user's lines. On that (rare) path only, the captured FX graph runs
again, node by node, on copies of the same inputs with the RNG state restored afterwards; the node that
raises the same exception type names the user's frames (``ember_frames`` in its meta), and the original
exception is raised again from stand-ins of them (tracebacks.py), as eager's traceback would show it.
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


def _failing_node(gm: fx.GraphModule, args: tuple, exc: BaseException) -> fx.Node | None:
    copies = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    cuda = sorted({a.device.index or 0 for a in args if isinstance(a, torch.Tensor) and a.device.type == "cuda"})
    grad = torch.is_grad_enabled()
    finder = _Finder(gm)
    try:
        with torch.random.fork_rng(devices=cuda), torch.no_grad():
            finder.run(*copies)
    except Exception as e:      # noqa: BLE001 - the error being located
        return finder.current if type(e) is type(exc) else None
    finally:
        torch._C._set_grad_enabled(grad)
    return None


def graph_error(exc: BaseException, gm: fx.GraphModule, args: tuple) -> None:
    """Called by the glue when the graph call raised ``exc``: raises it from the user's frames of the node
    that raised, or returns (the glue re-raises it as it is) when no node can be named."""
    if isinstance(exc, EmberError):
        return
    try:
        node = _failing_node(gm, args, exc)
    except Exception:           # noqa: BLE001 - locating must never replace the user's error
        return
    frames = node.meta.get("ember_frames") if node is not None else None
    if frames:
        raise_in_user_frames(exc, frames, keep_tail=False)
