"""Reproducers from PyTorch's Dynamo test files run against ember, sixth batch (issue 32, tools/peer on
test_generator / test_unspec / test_python_autograd / test_backward_higher_order_ops / test_sets / test_list /
test_exceptions / test_dicts): each compiled and compared with eager on fresh inputs."""
# no `from __future__ import annotations`: the annotations below must be evaluated when their `def` runs
import typing
from typing import Callable, Dict, List, Optional, Tuple, Union

import pytest
import torch

import ember


# -- typing aliases built inside the trace -------------------------------------------------------------------
# A nested ``def g(a: List[V])`` evaluates its annotations when the ``def`` runs. ``typing.List`` and kin are
# instances of typing's alias classes (not types), so the subscript was traced through typing's own code, which
# reaches ``sys._getframe`` (typing_extensions) and broke the graph. Subscripting a pre-existing typing form with
# keys known before the call is pure: it is folded to the alias.
class _V:
    pass


def _ann_list(x):
    def g(a: List[_V]) -> List[_V]:
        return a
    return x + len(g.__annotations__)


def _ann_dict(x):
    def g(a: Dict[str, _V]):
        return a
    return x * len(g.__annotations__)


def _ann_optional(x):
    def g(a: Optional[_V] = None):
        return a
    return x - len(g.__annotations__)


def _ann_callable(x):
    def g(cb: Callable[[_V], _V]):
        return cb
    return x + 2 * len(g.__annotations__)


def _ann_union_tuple(x):
    def g(a: Union[int, _V], b: Tuple[_V, ...]):
        return a
    return x + 3 * len(g.__annotations__)


def _alias_value(x):
    alias = typing.List[_V]
    return x + 1 if alias.__args__[0] is _V else x - 1


@pytest.mark.parametrize("fn", [_ann_list, _ann_dict, _ann_optional, _ann_callable, _ann_union_tuple,
                                _alias_value], ids=lambda f: f.__name__)
def test_typing_alias_in_trace(fresh_ember, fn):
    cfn = ember.compile(fn, backend="eager", fullgraph=True)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(cfn(x), fn(x))
