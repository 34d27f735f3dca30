"""``tree_map`` and ``tree_leaves`` for the argument structures of ops: tuples, lists and dicts of leaves.

``torch.utils._pytree`` looks every node's type up in its registry (and checks for namedtuples) on each call;
tracing and decomposing a model maps op arguments tens of thousands of times, and those lookups were an eighth
of the compiler's front end. These versions walk plain tuples, lists and dicts themselves and hand any other
container (namedtuples such as ``torch.return_types``, ordered dicts) to pytree, so the results are pytree's
(``None`` and everything else unregistered is a leaf; ``tests/decomp/test_trees.py`` compares them).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils import _pytree as pytree


def tree_map(fn: Callable[[Any], Any], x: Any) -> Any:
    t = type(x)
    if t is tuple:
        return tuple([tree_map(fn, a) for a in x])
    if t is list:
        return [tree_map(fn, a) for a in x]
    if t is dict:
        return {k: tree_map(fn, v) for k, v in x.items()}
    if isinstance(x, (tuple, list, dict)):
        return pytree.tree_map(fn, x)
    return fn(x)


def tree_leaves(x: Any) -> list:
    out: list = []
    _leaves(x, out)
    return out


def _leaves(x: Any, out: list) -> None:
    t = type(x)
    if t is tuple or t is list:
        for a in x:
            _leaves(a, out)
    elif t is dict:
        for v in x.values():
            _leaves(v, out)
    elif isinstance(x, (tuple, list, dict)):
        out.extend(pytree.tree_leaves(x))
    else:
        out.append(x)
