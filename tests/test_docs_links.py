"""The documentation stands alone: every relative markdown link and every backticked repository path
(`docs/...`, `ember/...`, `benchmarks/...`, `tests/...`, `tools/...`) in README.md, CHANGELOG.md and
docs/**.md names a file or folder of this repository, and nothing points outside it (``../shared/...``)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")                       # [text](target)
CODE_PATH = re.compile(r"`((?:docs|ember|benchmarks|tests|tools)/[^`\s]*)`")
EXTERNAL = ("http://", "https://", "mailto:")


def _code_path(raw: str) -> str:
    """The file part of a backticked path: `ember/loopir/lower.py:59` and `ember/x.py::test` name the file, a
    trailing ``/`` a folder; a placeholder (``<name>``, ``{a,b}``) ends it; ``*`` stays (a glob)."""
    path = re.split(r"::|:\d|[<{]", raw)[0]
    return path.rstrip("/.,;") if not path.endswith("/") else path


def _exists(path: Path) -> bool:
    if any(c in path.as_posix() for c in "*?["):
        return any(ROOT.glob(path.relative_to(ROOT).as_posix()))
    return path.exists()


def _targets(md: Path) -> list[tuple[str, Path]]:
    text = md.read_text()
    out = []
    for m in LINK.finditer(text):
        target = m.group(1)
        if target.startswith(EXTERNAL) or target.startswith("#"):
            continue
        out.append((target, (md.parent / target.split("#")[0]).resolve()))
    for m in CODE_PATH.finditer(text):
        path = _code_path(m.group(1))
        if path:
            out.append((m.group(1), (ROOT / path).resolve()))
    return out


def test_the_documents_exist():
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    expected = {"README.md", "CHANGELOG.md", "docs/design.md", "docs/api.md", "docs/performance.md"} | {
        f"docs/stages/{s}.md" for s in ("capture", "autograd", "decomp", "loopir", "codegen", "runtime")}
    assert expected <= names


@pytest.mark.parametrize("md", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_and_path_resolves_inside_the_repository(md):
    bad = []
    for raw, path in _targets(md):
        if not path.is_relative_to(ROOT):
            bad.append(f"{raw} (outside the repository)")
        elif not _exists(path):
            bad.append(f"{raw} (no such file)")
    assert not bad, f"{md.relative_to(ROOT)}: " + ", ".join(bad)


@pytest.mark.parametrize("md", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_nothing_points_to_the_shared_folder(md):
    assert "../shared" not in md.read_text()


def test_the_checker_finds_broken_links(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("[a](missing.md) `ember/nope.py` `ember/api.py:12` [b](https://example.com) [c](#top) "
                  "`ember/codegen/cpp*.py` `ember/codegen/fortran*.py` `docs/stages/<stage>.md`\n")
    found = {raw for raw, path in _targets(md) if not _exists(path)}
    assert found == {"missing.md", "ember/nope.py", "ember/codegen/fortran*.py"}
    assert _code_path("ember/loopir/lower.py::test_x") == "ember/loopir/lower.py"
    assert _code_path("docs/stages/") == "docs/stages/"
