"""Engines: the ways the benchmark runs a model: ``eager`` (the reference), ``torch.compile`` and
``ember.compile``.

An engine is written ``FRONTEND[:BACKEND][@MODE]``:

    eager                   plain PyTorch, the reference for correctness and speedup
    inductor                torch.compile(m) (alias: torch, torch.compile; backend inductor, default mode)
    ember                   ember.compile(m) (ember's default backend)
    torch:eager             torch.compile(m, backend="eager"): TorchDynamo's capture alone
    ember:eager             ember.compile(m, backend="eager"): ember's capture alone
    ember:inductor          ember's capture feeding PyTorch's Inductor
    inductor@max-autotune   any of the above with a mode (reduce-overhead, max-autotune, ...)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_FRONTENDS = {"eager": "eager", "torch": "torch", "torch.compile": "torch", "inductor": "torch",
              "ember": "ember"}
_DEFAULT_BACKEND = {"eager": None, "torch": "inductor", "ember": "ember"}
DEFAULT_ENGINES = ("eager", "inductor", "ember")


@dataclass(frozen=True)
class Engine:
    frontend: str                 # "eager", "torch" or "ember"
    backend: str | None = None
    mode: str | None = None

    @property
    def name(self) -> str:
        if self.frontend == "eager":
            return "eager"
        if self.frontend == "torch" and self.backend == "inductor":
            base = "inductor"
        elif self.frontend == "ember" and self.backend == "ember":
            base = "ember"
        else:
            base = f"{self.frontend}:{self.backend}"
        return base if self.mode in (None, "default") else f"{base}@{self.mode}"

    @property
    def compiles(self) -> bool:
        return self.frontend != "eager"

    def wrap(self, target: Any) -> Any:
        """The compiled form of ``target`` (an nn.Module or a function)."""
        if self.frontend == "eager":
            return target
        mode = None if self.mode in (None, "default") else self.mode
        if self.frontend == "torch":
            import torch
            return torch.compile(target, backend=self.backend, mode=mode)
        import ember
        return ember.compile(target, backend=self.backend, mode=mode)

    def counters(self) -> dict[str, Any]:
        """Cumulative graph / graph-break counts of this engine's compiler (take differences)."""
        if self.frontend == "torch":
            from torch._dynamo.utils import counters
            return {"graphs": counters["stats"]["unique_graphs"],
                    "graph_breaks": sum(counters["graph_break"].values()), "fallbacks": 0,
                    "reasons": dict(counters["graph_break"])}
        if self.frontend == "ember":
            import ember
            s = ember.stats()
            return {"graphs": s.get("graphs_compiled", 0), "graph_breaks": s.get("graph_breaks", 0),
                    "fallbacks": s.get("fallbacks_to_eager", 0), "reasons": {}}
        return {"graphs": 0, "graph_breaks": 0, "fallbacks": 0, "reasons": {}}

    def break_reasons(self, compiled: Any, before: dict[str, Any]) -> list[str]:
        """Why ``compiled`` broke its graph or ran eagerly (first lines), as far as the compiler says."""
        if self.frontend == "torch":
            after = self.counters()["reasons"]
            return [k for k, v in after.items() if v > before["reasons"].get(k, 0)]
        if self.frontend == "ember":
            # what the top-level frame's cache recorded (as ember.explain reads it): its graph breaks, and the
            # reasons of entries that run the function eagerly
            cache = getattr(compiled, "_ember_cache", None) or getattr(compiled, "__ember_cache__", None)
            reasons = [str(getattr(b, "reason", b)) for b in getattr(cache, "break_reasons", [])]
            reasons += [e.reason for e in getattr(cache, "entries", []) if getattr(e, "eager", False)]
            return list(dict.fromkeys(r for r in reasons if r))
        return []

    def reset(self) -> None:
        """Drop every in-memory compiled artifact (the disk cache stays)."""
        if self.frontend == "torch":
            import torch._dynamo
            torch._dynamo.reset()
        elif self.frontend == "ember":
            import ember
            ember.reset()

    def disk_cache(self) -> str | None:
        """The name of the disk cache a warm compile hits, or None when there is none (warm compile N/A)."""
        if self.frontend == "torch" and self.backend == "inductor":
            import torch._inductor.config as cfg
            return "fx_graph_cache" if cfg.fx_graph_cache else None
        if self.frontend == "ember" and self.backend == "ember":
            return "ember kernel cache ($EMBER_CACHE_DIR: C++ .so, Triton sources)"
        return None

    def warm_up(self, device: Any) -> None:
        """Start the compiler on a throwaway function (imports, worker pools, toolchain probes), so that this
        one-time cost is not counted in the first model's cold compile time."""
        if not self.compiles:
            return
        import torch

        def tiny(x):
            return torch.nn.functional.gelu(x * 2.0).sum()
        x = torch.randn(8, device=device, requires_grad=True)
        self.wrap(tiny)(x).backward()
        with torch.no_grad():
            self.wrap(tiny)(x)


def parse_engine(spec: str) -> Engine:
    """``FRONTEND[:BACKEND][@MODE]`` -> Engine, validating every part."""
    text, _, mode = spec.strip().partition("@")
    front, _, backend = text.partition(":")
    if front not in _FRONTENDS:
        raise ValueError(f"unknown engine {spec!r}: frontend must be one of {', '.join(_FRONTENDS)}")
    front = _FRONTENDS[front]
    if front == "eager" and (backend or mode):
        raise ValueError(f"engine {spec!r}: eager takes no backend or mode")
    backend = backend or _DEFAULT_BACKEND[front]
    if mode and mode not in MODES:
        raise ValueError(f"engine {spec!r}: unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    mode = None if mode == "default" else mode
    if front != "eager":
        valid = _backends(front)
        if backend not in valid:
            raise ValueError(f"engine {spec!r}: unknown {front} backend {backend!r}; "
                             f"valid: {', '.join(valid)}")
    return Engine(front, backend, mode or None)


def _backends(frontend: str) -> list[str]:
    if frontend == "ember":
        import ember
        return ember.list_backends()
    import torch._dynamo
    return torch._dynamo.list_backends(exclude_tags=())


def parse_engines(specs: list[str], modes: list[str]) -> list[Engine]:
    """The engines to run: eager first (always: it is the reference), each spec once, then for each ``--mode``
    a copy of every compiling engine given without a mode."""
    engines = [parse_engine(s) for s in specs]
    for m in modes:
        if m not in MODES:
            raise ValueError(f"unknown mode {m!r}; valid modes: {', '.join(MODES)}")
        if m != "default":
            engines += [Engine(e.frontend, e.backend, m) for e in list(engines)
                        if e.compiles and e.mode is None]
    out = [Engine("eager")]
    for e in engines:
        if e not in out:
            out.append(e)
    return out
