"""Symbolic sizes: the one representation every stage uses for a size that is not a constant.

A symbolic size is a ``sympy`` integer expression over size symbols ``s0, s1, ...`` (positive integers).
Each symbol lives in a ``SymbolTable`` with a *hint* (the value seen on the call that created it), a range and
the *source* it was read from (``L['x'].size()[0]``). Stages see symbolic sizes in two forms:

- inside PyTorch (fake tensors, meta kernels, ``torch.SymInt`` arguments): ``torch.SymInt`` objects whose node
  is an ember ``SymNode`` (``ember.shapes.node``), so PyTorch's own shape code computes with them;
- inside ember's IRs (decomp ``TensorMeta``, loop IR, codegen): plain ``sympy`` expressions (``expr_of``).

Every decision PyTorch or ember takes on a symbolic value (``s0 == 1``? ``s0 % 2 == 0``?) goes through
``SymbolTable.decide``: it answers with the hints and, unless the answer already follows from the symbols'
ranges, records the relation as a guard together with the user line that caused it. A compiled entry is valid
for a call exactly when every recorded relation holds for that call's sizes.
"""
from . import sympy_mod as _sympy_mod
from .node import SymNode, expr_of, hint_of, is_symbolic, size_symbols, symint
from .printer import to_python
from .table import (DataDependent, Relation, SymbolicUnsupported, SymbolTable, active_table, current_location, guard, located,
                    size_hint, using)

__all__ = ["SymNode", "SymbolTable", "Relation", "SymbolicUnsupported", "DataDependent", "expr_of", "hint_of", "is_symbolic",
           "symint", "size_symbols", "to_python", "located", "current_location",
           "using", "active_table", "guard", "size_hint"]

_sympy_mod.install()
