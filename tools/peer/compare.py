"""Run PyTorch's Dynamo test files under torch.compile and under ember, and compare test by test.

    python -m tools.peer.compare --dir .peer/dynamo [--files test_misc.py,test_repros.py] [--jobs 2]
                                 [--out .peer/out] [-k EXPR]

The test files are PyTorch's (``test/dynamo/`` of pytorch/pytorch, at a version close to the installed torch)
and never committed: put them, with the helper modules they import, in an ignored folder such as
``.peer/dynamo/``. Each file runs twice in its own pytest process: plain (torch.compile) and with
``-p tools.peer.plugin`` (ember). Among the tests torch.compile passes, ember's failures are classed as
- ``wrong``: an assertion about values failed (the worst: ember computed something else);
- ``count``: an assertion about frame/op/graph counts, Dynamo's counters, a recording backend's graphs or log
  records failed, or an expected ``Unsupported`` was not raised or had other words (the values were right);
- ``break``: ``ember.Unsupported`` (a graph break under fullgraph/nopython);
- ``crash``: any other exception, a timeout included.
Prints a table per file and writes ``results.json`` (every test: both outcomes, the class, the error's first
line) into ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What a count assertion looks like on its failing line: Dynamo's compile counters, a recording backend's graph
# list (``len(eager.graphs)``, ``backend.inductor_graphs``), captured log records, or a recompile ban.
_COUNT = re.compile(r"frame_count|op_count|graph_count|counters\[|\.frame_count|CompileCounter|"
                    r"assertExpectedInline|assert_frame_count|unique_graphs|graph_break|recompil|"
                    r"\.graphs\b|_graphs\b|len\(records\)|RecompileError")
# An expectation that Dynamo itself breaks (``with self.assertRaises(Unsupported)``) failed: not a value.
_EXPECTED_BREAK = re.compile(r"Unsupported not raised")
# ...or Dynamo's refusal message was expected (``assertRaisesRegex(Unsupported, "Observed exception")``) and
# ember refused with its own words.
_EXPECTED_MESSAGE = re.compile(r"assertRaisesRegex\(\s*(?:torch\._dynamo\.exc\.)?Unsupported\b")


def _run(path: Path, engine: str, out: Path, extra: list[str], timeout: int) -> Path:
    xml = out / f"{path.stem}.{engine}.xml"
    plugins = ["-p", "tools.peer.timeout"] + (["-p", "tools.peer.plugin"] if engine == "ember" else [])
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugins,
           f"--junitxml={xml}", "-o", "junit_logging=no", str(path)] + extra
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(path.parent)]))
    with open(out / f"{path.stem}.{engine}.log", "w") as log:
        subprocess.run(cmd, cwd=path.parent, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
    return xml


def outcomes(xml: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, failure text) from a junit file: passed, failed, error or skipped."""
    res: dict[str, tuple[str, str]] = {}
    if not xml.exists():
        return res
    for case in ET.parse(xml).getroot().iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        state, text = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                state = "failed" if tag == "failure" else tag
                text = (el.get("message") or "") + "\n" + (el.text or "")
                break
        res[tid] = (state, text)
    return res


def classify(text: str) -> str:
    """The class of an ember failure, from its junit message and traceback."""
    lines = text.splitlines()
    first = lines[0] if lines else ""
    if "InternalError" in first or "PeerTimeout" in text:      # an ember bug (its message may quote Unsupported)
        return "crash"
    if "Unsupported" in first and ("ember" in text or "graph break" in text):
        return "break"
    if _EXPECTED_BREAK.search(first):
        return "count"
    if "does not match" in first and any(_EXPECTED_MESSAGE.search(st) for st in _statements(lines)):
        return "count"
    if "AssertionError" in first or first.startswith(("assert", "AssertionError")) or "AssertionError" in text[-400:]:
        failing = [ln for ln in lines if ln.startswith(">") or ln.strip().startswith("self.assert")]
        where = "\n".join(failing[-3:]) or text[-800:]
        return "count" if _COUNT.search(where) or _COUNT.search(_flag_source(lines)) else "wrong"
    return "crash"


def _statements(lines: list[str]) -> list[str]:
    """Each failing source line (``>``) joined with the lines that continue its statement, up to the error
    lines (``E``): ``with self.assertRaisesRegex(`` names the exception class on the next line."""
    out = []
    for i, ln in enumerate(lines):
        if ln.startswith(">"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith(("E ", ">")) and lines[j].strip():
                j += 1
            out.append(" ".join(x.lstrip("> ").strip() for x in lines[i:j]))
    return out


_FLAG = re.compile(r"^>\s+self\.assert(?:True|False)\((\w+)\b")


def _flag_source(lines: list[str]) -> str:
    """Where a failing ``self.assertTrue(flag)`` got its flag: the lines from ``flag = ...`` (or, for a literal
    ``assertTrue(False, ...)``, the 6 lines before) up to the assertion, in the test's traceback frame. A flag
    computed from Dynamo's counters (``found = any(... counters["unimplemented"])``) makes it a count check."""
    i = next((k for k in range(len(lines) - 1, -1, -1) if _FLAG.match(lines[k])), None)
    if i is None:
        return ""
    name = _FLAG.match(lines[i]).group(1)
    if name in ("False", "True"):
        return "\n".join(lines[max(0, i - 6):i])
    start = next((k for k in range(i - 1, -1, -1) if re.match(rf"\s+{name}\s*=", lines[k])), i)
    return "\n".join(lines[start:i])


def compare_file(path: Path, out: Path, extra: list[str], timeout: int) -> dict:
    torch_res = outcomes(_run(path, "torch", out, extra, timeout))
    ember_res = outcomes(_run(path, "ember", out, extra, timeout))
    rows = {}
    for tid, (t_state, _) in torch_res.items():
        e_state, e_text = ember_res.get(tid, ("missing", ""))
        cls = ""
        if t_state == "passed" and e_state != "passed":
            cls = classify(e_text) if e_state in ("failed", "error") else "crash"
        rows[tid] = {"torch": t_state, "ember": e_state, "class": cls,
                     "error": next((ln for ln in e_text.splitlines() if ln.strip()), "")[:300]}
    return rows


def summarize(per_file: dict[str, dict]) -> str:
    head = f"{'file':34} {'tests':>6} {'torch':>6} {'ember':>6} {'wrong':>6} {'crash':>6} {'break':>6} {'count':>6}"
    lines, tot = [head], [0] * 7
    for name, rows in per_file.items():
        tp = [r for r in rows.values() if r["torch"] == "passed"]
        ep = [r for r in tp if r["ember"] == "passed"]
        by = {c: sum(r["class"] == c for r in tp) for c in ("wrong", "crash", "break", "count")}
        vals = [len(rows), len(tp), len(ep), by["wrong"], by["crash"], by["break"], by["count"]]
        tot = [a + b for a, b in zip(tot, vals)]
        lines.append(f"{name:34} " + " ".join(f"{v:>6}" for v in vals))
    lines.append(f"{'total':34} " + " ".join(f"{v:>6}" for v in tot))
    if tot[1]:
        lines.append(f"ember passes {tot[2]} of the {tot[1]} tests torch.compile passes ({100 * tot[2] / tot[1]:.1f}%)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=".peer/dynamo")
    ap.add_argument("--files", default="", help="comma list (default: every test_*.py in --dir)")
    ap.add_argument("--out", default=".peer/out")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--file-timeout", type=int, default=3600)
    ap.add_argument("-k", default="")
    a = ap.parse_args(argv)
    d, out = Path(a.dir).resolve(), Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    files = [d / f for f in a.files.split(",") if f] if a.files else sorted(d.glob("test_*.py"))
    extra = ["-k", a.k] if a.k else []
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        results = dict(zip([p.name for p in files],
                           pool.map(lambda p: compare_file(p, out, extra, a.file_timeout), files)))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(summarize(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
