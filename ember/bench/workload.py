"""What the zoo's families share: a ``Workload`` (model, input maker, loss), the ``ZooEntry`` that builds one
per suite, seeded random inputs, and ``probe`` for optional packages. Below ``zoo`` (the registry) and its
families (``zoo_hf``, ``zoo_vision``), which all import it."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class Inputs:
    args: tuple
    kwargs: dict = field(default_factory=dict)
    target: torch.Tensor | None = None


@dataclass
class Workload:
    model: nn.Module
    make_inputs: Callable[[int, torch.device], Inputs]
    loss: Callable[[Any, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str                                   # "handwritten", "transformers" or "vision"
    build_fn: Callable[[dict], Workload]
    configs: dict[str, dict]                      # suite -> config
    requires: tuple[str, ...] = ()                # importable packages, any one of them suffices

    def build(self, suite: str, device: torch.device, seed: int = 0) -> Workload:
        torch.manual_seed(seed)
        with torch.device(device):
            w = self.build_fn(dict(self.configs[suite]))
        no_dropout(w.model)
        return w


def no_dropout(model: nn.Module) -> None:
    """Dropout makes eager and compiled training steps differ by design, so the zoo turns it off."""
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd):
            m.p = 0.0


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(seed: int, device: torch.device, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed)).to(device)


def randint(seed: int, device: torch.device, high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=gen(seed)).to(device)


def probe(package: str) -> str | None:
    """None when ``package`` imports; otherwise the first line of why not."""
    try:
        importlib.import_module(package)
        return None
    except Exception as e:  # noqa: BLE001 - a broken install raises more than ImportError
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
