"""Models with a graph break per layer, shared by test_graph_breaks.py and benchmarks/graph_breaks.py.

``PrintingStack``: an input projection, ``n`` pre-norm residual MLP blocks whose ``forward`` prints a scalar
(the mean square of its output, a ``.item()`` fed to ``print``) and a head. Every block is the same type, so a
compiler that shares code between identical layers compiles one graph for all of them.

``LoopPrintingStack``: the same blocks without the print; the model's own loop prints the scalar after each
layer, numbering the layers with ``enumerate`` (the break happens in the loop of the outer frame).
"""
from __future__ import annotations

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d: int, verbose: bool = True):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.verbose = verbose

    def forward(self, x):
        x = x + self.ff(self.norm(x))
        if self.verbose:
            print("mean square", x.pow(2).mean().item())  # @block12_print
        return x


class PrintingStack(nn.Module):
    def __init__(self, d: int = 64, n: int = 12, out: int = 8):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.layers = nn.ModuleList([Block(d) for _ in range(n)])
        self.head = nn.Linear(d, out)

    def forward(self, x):
        x = self.inp(x)
        for layer in self.layers:
            x = layer(x)  # @stack12_call
        return self.head(x)


class LoopPrintingStack(nn.Module):
    def __init__(self, d: int = 64, n: int = 12, out: int = 8):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.layers = nn.ModuleList([Block(d, verbose=False) for _ in range(n)])
        self.head = nn.Linear(d, out)

    def forward(self, x):
        x = self.inp(x)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            print("layer", i, x.pow(2).mean().item())  # @loop12_print
        return self.head(x)
