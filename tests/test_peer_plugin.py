"""The peer-suite harness (tools/peer): the plugin sends torch.compile and torch._dynamo.optimize to ember, and
compare.py classes ember's failures among torch.compile's passes. Runs on a synthetic test file."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.peer import compare  # noqa: E402

SYNTHETIC = '''
import torch
import torch._dynamo
import torch._dynamo.testing

UNDER_EMBER = torch.compile.__module__ == "tools.peer.plugin"


def test_compile_counts():
    import ember
    cnt = torch._dynamo.testing.CompileCounter()
    f = torch.compile(lambda x: x.sin() + 1, backend=cnt)
    x = torch.randn(4)
    assert torch.allclose(f(x), x.sin() + 1)
    assert cnt.frame_count == 1
    assert (ember.stats()["frames_compiled"] > 0) == UNDER_EMBER


def test_optimize_decorator():
    cnt = torch._dynamo.testing.CompileCounter()
    f = torch._dynamo.optimize(cnt, nopython=True)(lambda x: x * 2)
    assert torch.equal(f(torch.ones(2)), torch.full((2,), 2.0))


def test_values_differ_under_ember():
    assert torch.equal(torch.ones(2) * (3 if UNDER_EMBER else 2), torch.full((2,), 2.0))


def test_counts_differ_under_ember():
    cnt = torch._dynamo.testing.CompileCounter()
    cnt.frame_count = 2 if UNDER_EMBER else 1
    assert cnt.frame_count == 1


def test_crashes_under_ember():
    if UNDER_EMBER:
        raise KeyError("boom")


def test_expected_refusal():
    import unittest
    from torch._dynamo.exc import Unsupported

    def f(x):
        print("refused")                    # a graph break for both: refused under fullgraph
        return x + 1

    g = torch.compile(f, backend="eager", fullgraph=True)
    with unittest.TestCase().assertRaises(Unsupported):
        g(torch.ones(2))
'''


def test_compare_classes_synthetic_file(tmp_path):
    d = tmp_path / "dynamo"
    d.mkdir()
    (d / "test_synthetic.py").write_text(textwrap.dedent(SYNTHETIC))
    rows = compare.compare_file(d / "test_synthetic.py", tmp_path, [], 600)
    by_name = {tid.split("::")[-1]: r for tid, r in rows.items()}
    assert {r["torch"] for r in by_name.values()} == {"passed"}
    assert by_name["test_compile_counts"]["ember"] == "passed"
    assert by_name["test_optimize_decorator"]["ember"] == "passed"
    assert by_name["test_values_differ_under_ember"]["class"] == "wrong"
    assert by_name["test_counts_differ_under_ember"]["class"] == "count"
    assert by_name["test_crashes_under_ember"]["class"] == "crash"
    assert by_name["test_expected_refusal"]["ember"] == "passed"
    table = compare.summarize({"test_synthetic.py": rows})
    assert "ember passes 3 of the 6" in table


def test_classify_break():
    assert compare.classify("ember.errors.Unsupported: graph break in f: print") == "break"


def _failure(test_line: str, first: str = "AssertionError: Scalars are not equal!") -> str:
    """A junit failure text shaped like pytest's: the message, then the traceback with '>' on failing lines."""
    return (f"{first}\nself = <T>\n\n    def test(self):\n>       {test_line}\n\n"
            "    def assertEqual(self, x, y):\n>       return super().assertEqual(x, y)\n"
            f"E       {first}\n")


CLASSIFY_CASES = [
    ("self.assertEqual(y, x.sin())", "AssertionError: Tensor-likes are not close!", "wrong"),
    ("self.assertTrue(same(ref, res))", "AssertionError: False is not true", "wrong"),
    ("self.assertEqual(cnts.frame_count, 2)", "AssertionError: Scalars are not equal!", "count"),
    ("self.assertEqual(len(eager.graphs), 0)", "AssertionError: Scalars are not equal!", "count"),
    ("self.assertTrue(len(cnt.inductor_graphs), 1)", "AssertionError: False is not true", "count"),
    ("self.assertEqual(len(backend.graphs), 1)", "AssertionError: Scalars are not equal!", "count"),
    ("self.assertGreater(len(records), 0)", "AssertionError: 0 not greater than 0", "count"),
    ("fn(t, ctx)", "AssertionError: Unsupported not raised", "count"),
    ('with self.assertRaisesRegex(Unsupported, "Observed exception"):',
     'AssertionError: "Observed exception" does not match "the traced code raised StopIteration"', "count"),
    ('with self.assertRaisesRegex(ValueError, "7"):', 'AssertionError: "7" does not match "8"', "wrong"),
    # the statement continues on the lines after the '>' one (test_backward_higher_order_ops.py)
    ('with self.assertRaisesRegex(\n                torch._dynamo.exc.Unsupported,\n                "print",\n'
     '            ):', 'AssertionError: "print" does not match "call to f is not supported"', "count"),
    ('with self.assertRaisesRegex(\n                ValueError,\n                "7",\n            ):',
     'AssertionError: "7" does not match "8"', "wrong"),
    ("fn(x)", "KeyError: 'a'", "crash"),
    ("fn(x)", "ember.errors.Unsupported: reading attribute '__name__' of a list.append", "break"),
    ("except Unsupported as e:  # ember's compile_entry, quoted in the traceback",
     "InternalError: ember failed while compiling dummy: TypeError: set.isdisjoint() takes exactly one argument "
     "(0 given)", "crash"),
]


def _flag_failure(setup: str, line: str) -> str:
    return (f"AssertionError: False is not true\n    def test(self):\n{setup}\n>       {line}\n"
            "E       AssertionError: False is not true\n")


FLAG_CASES = [
    ("        found = any(\n            'mutations' in m\n            for m in counters['unimplemented']\n        )",
     "self.assertTrue(found)", "count"),
    ("        for gb in counters['unimplemented']:\n            if 'x' in gb:\n                break\n"
     "        else:", "self.assertTrue(False, 'expected side effect error; not found')", "count"),
    ("        ok = torch.equal(res, ref)", "self.assertTrue(ok)", "wrong"),
]


def test_classify_flags():
    for setup, line, want in FLAG_CASES:
        assert compare.classify(_flag_failure(setup, line)) == want, line


def test_classify_table():
    for line, first, want in CLASSIFY_CASES:
        assert compare.classify(_failure(line, first)) == want, (line, first)
