"""Module programs of the torch-program table (``nn.Module`` classes, instantiated under a fixed seed):
linear layers, Sequential/ModuleList/ModuleDict iteration, ``super().forward``, helper methods and properties,
and side effects in ``forward`` (setattr, buffer mutation). Registered into ``PROGRAMS`` on import.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the repo root, for `tests.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.capture.torch_program_table import T, program  # noqa: E402


# ----------------------------------------------------------------------------------------------- modules
@program(T(5, 4))
class LinearModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


@program(T(5, 4))
class SequentialModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))

    def forward(self, x):
        return self.net(x), self.net[0](x), self.net[:2](x)


@program(T(3, 6))
class ModuleListIteration(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])
        self.norms = nn.ModuleList(nn.LayerNorm(6) for _ in range(3))

    def forward(self, x):
        for layer, norm in zip(self.layers, self.norms):
            x = norm(x + layer(x))
        for i, layer in enumerate(self.layers[1:]):
            x = x + layer(x) * (i + 1)
        return x + self.layers[-1](x) * len(self.layers)


@program(T(3, 4))
class ModuleDictUsage(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4), "act": nn.GELU()})

    def forward(self, x):
        out = {}
        for name, m in self.blocks.items():
            out[name] = m(x)
        return self.blocks["act"](self.blocks["a"](x) + out["b"]), out, list(self.blocks.keys())


class _ScaledBase(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2


@program(T(3, 4))
class SuperForward(_ScaledBase):
    def __init__(self):
        super().__init__(4, 5)

    def forward(self, x):
        return super().forward(x) + 1, nn.Linear.forward(self, x)


@program(T(3, 4))
class HelperMethodsAndProperties(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.temperature = 2.0
        self.register_buffer("offset", torch.linspace(-1, 1, 4))

    @property
    def inv_temperature(self):
        return 1.0 / self.temperature

    def _activate(self, x):
        return torch.tanh(x * self.inv_temperature)

    @staticmethod
    def _square(x):
        return x * x

    def forward(self, x):
        h = self._activate(self.proj(x)) + self.offset
        return self._square(h), self.proj.weight.shape[0], self.proj.in_features


@program(T(3, 4), grad=False)
class SetattrInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.last_output = torch.zeros(3, 4)

    def forward(self, x):
        y = self.fc(x)
        self.last_output = y.detach() * 2
        self.last_input_sum = x.sum().detach()
        return y


@program(T(3, 4), grad=False)
class BufferMutationInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.running.mul_(0.9).add_(x.mean(0), alpha=0.1)
        self.steps += 1
        return x - self.running


@program(T(3, 4))
class DirectParameterUse(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.bias = nn.Parameter(torch.randn(4))
        self.scale = nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight) * self.scale + self.weight.sum()


@program(T(2, 3, 8, 8))
class ConvBnPoolEval(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.bn.running_mean.uniform_(-0.5, 0.5)
        self.bn.running_var.uniform_(0.5, 1.5)
        self.eval()

    def forward(self, x):
        return self.pool(F.relu(self.bn(self.conv(x)))).flatten(1)


@program(T(6, 4))
class TrainingFlagBranchWithBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        y = self.bn(self.fc(x))
        if self.training:
            y = self.drop(y) * 1.5
        return y


@program(T(3, 4))
class NestedSubmoduleMethods(nn.Module):
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)

        def gate(self, x):
            return torch.sigmoid(self.a(x))

        def forward(self, x):
            return x * self.gate(x)

    def __init__(self):
        super().__init__()
        self.inner = self.Inner()
        self.outer = nn.Linear(4, 2)

    def forward(self, x):
        return self.outer(self.inner(x) + self.inner.gate(x)), [n for n, _ in self.inner.named_children()]
