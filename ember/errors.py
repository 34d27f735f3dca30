"""User-facing errors. Torch-free: the capture core raises these too."""
from __future__ import annotations


class EmberError(Exception):
    """Base class of every error ember raises on purpose.

    The errors that reach the user (``Unsupported``, ``BackendCompilerFailed``, ``InternalError``) are also
    ``RuntimeError``s, as torch._dynamo's are, so ``except RuntimeError`` around a compiled call catches them.
    ember's own ``except RuntimeError`` sites (torch's errors from a meta run, a kernel) therefore re-raise
    ``EmberError`` first: an ember error raised inside one keeps its meaning (a graph break stays a break).
    The internal errors (a lowering, a fake-tensor refusal) stay plain ``Exception``s: torch code that catches
    ``RuntimeError`` around ember's dispatch hooks must not swallow them."""


class Unsupported(EmberError, RuntimeError):
    """Something in the user's program could not be captured.

    Under ``fullgraph=True`` it reaches the user; otherwise it ends the trace and the frame runs eagerly.
    ``reason`` says what, ``user_stack`` where (``file:line`` strings, outermost first), ``hint`` what to do.
    """

    def __init__(self, reason: str, hint: str = "", user_stack: list[str] | None = None,
                 source_line: str = ""):
        self.reason = reason
        self.hint = hint
        self.user_stack = list(user_stack or [])
        self.source_line = source_line
        super().__init__(reason)

    def __str__(self) -> str:
        lines = [self.reason]
        if self.user_stack:
            lines.append(f"  at {self.user_stack[-1]}")
            if self.source_line:
                lines.append(f"    {self.source_line.strip()}")
            if len(self.user_stack) > 1:
                lines.append("  called from " + " <- ".join(reversed(self.user_stack[:-1])))
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


class DataDependent(EmberError):
    """A decision on an unbacked size (``u0``: computed from tensor data inside the graph, ``ember.shapes``)
    that its range does not settle. It has no hint to answer from and a static recompile cannot pin it: the
    capture interpreter turns it into a graph break naming the condition and the op that produced the size."""


class BackendCompilerFailed(EmberError, RuntimeError):
    """A backend raised while compiling a captured graph."""

    def __init__(self, backend: str, error: BaseException):
        self.backend = backend
        self.error = error
        super().__init__(f"backend {backend!r} failed to compile a graph: {type(error).__name__}: {error}")


class AotError(EmberError):
    """A graph AOT autograd cannot compile (the message says what and what to do)."""


class InternalError(EmberError, RuntimeError):
    """A bug in ember (never the user's fault): reported with the user location where it happened."""
