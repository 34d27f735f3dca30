"""ember.decomp.trees (the fast tree_map / tree_leaves of op arguments) gives pytree's results."""
import collections

import pytest
import torch
from torch.utils import _pytree as pytree

from ember.decomp.trees import tree_leaves, tree_map

P = collections.namedtuple("P", "a b")
CASES = [(1, [2, None, {"k": (3, 4)}], None), torch.Size([2, 3]), P(1, [2, (3, None)]),
         collections.OrderedDict(a=1, b=(2,)), {"x": None, "y": [torch.tensor(1.0)]}, (), [], {}, None, 5,
         torch.return_types.max((torch.tensor(1), torch.tensor(0))), [slice(1, 2), torch.float32, "s"]]


@pytest.mark.parametrize("case", CASES, ids=lambda c: type(c).__name__)
def test_same_as_pytree(case):
    f = lambda v: ("leaf", v) if not isinstance(v, torch.Tensor) else v * 2  # noqa: E731
    got, want = tree_map(f, case), pytree.tree_map(f, case)
    assert type(got) is type(want) and repr(got) == repr(want)
    assert repr(tree_leaves(case)) == repr(pytree.tree_leaves(case))
