"""The repository's prose stays checkable: cited tests and sections exist, no tracker numbers.

RELIABILITY.md, BENCHMARKS.md and ``docs/*.md`` name the tests that hold each promise as
``tests/<folder>/test_<name>.py`` or ``tests/...py::test_name``; a cited file or test that no
longer exists is a promise nobody holds. Code and docs cite BENCHMARKS.md and RELIABILITY.md
by section (``BENCHMARKS.md, "Plan before running"``); a cited section must be a heading there
(a citation cut at a line's end is a heading's start). The issue tracker is not part of the repository, so a
citation of it ("issue 12", "#26") in docs, code, comments or tests points nowhere.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "RELIABILITY.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
# A cited test file, optionally with ``::test_name`` (``::test_prefix_*`` names several tests).
CITED = re.compile(r"\b(tests/[\w/]+\.py)((?:::[\w*]+)*)")
# "issue 12", "Issue #14", "issues 3", or a bare "#26" (a heading anchor or a colour has letters).
TRACKER = re.compile(r"\b[Ii]ssues? ?#?\d+|(?<![\w&/#])#\d{1,4}\b(?![\w-])")
# ``BENCHMARKS.md, "Section"`` (also ``BENCHMARKS.md "..."``, ``BENCHMARKS.md`` ("...")``).
SECTION = re.compile(r"\b(BENCHMARKS|RELIABILITY)\.md`*[,:]?\s*\(?\"([^\"\n]+)")
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "build", "dist", "__pycache__", ".pytest_cache"}


def cited_test_problems(paths: list[Path]) -> list[str]:
    """One line per ``tests/...py`` path or ``::name`` cited in ``paths`` that does not exist."""
    problems = []
    for doc in paths:
        text = doc.read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines(), 1):
            for match in CITED.finditer(line):
                path, names = match.group(1), [n for n in match.group(2).split("::") if n]
                target = ROOT / path
                where = f"{doc.name}:{number}: {match.group(0)}"
                if not target.is_file():
                    problems.append(f"{where}: no such file")
                    continue
                source = target.read_text(encoding="utf-8")
                for name in names:
                    pattern = re.escape(name).replace(r"\*", r"\w*") + r"\b"
                    if not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{pattern}", source, re.M):
                        problems.append(f"{where}: {path} defines no {name}")
    return problems


def source_files(root: Path) -> list[Path]:
    """The repository's ``.py`` and ``.md`` files (hidden and build folders left out)."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        found += [Path(folder, name) for name in sorted(files) if name.endswith((".py", ".md"))]
    return [path for path in found if path != Path(__file__).resolve()]  # this file's examples are citations


def cited_section_problems(root: Path) -> list[str]:
    """One line per ``BENCHMARKS.md, "Section"`` citation in ``root`` that names no heading."""
    headings = {name: [re.sub(r"^[#\s]*(\d+\.\s+)?", "", line) for line in (root / f"{name}.md").read_text(encoding="utf-8")
                       .splitlines() if line.startswith("#")] for name in ("BENCHMARKS", "RELIABILITY")}
    problems = []
    for path in source_files(root):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in SECTION.finditer(line):
                doc, cited = match.groups()
                if not any(heading.startswith(cited.strip()) for heading in headings[doc]):
                    problems.append(f"{path.relative_to(root)}:{number}: {doc}.md has no section {cited!r}")
    return problems


def tracker_citations(root: Path) -> list[str]:
    """One line per tracker citation in the repository's ``.py`` and ``.md`` files."""
    found = []
    for path in source_files(root):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if TRACKER.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()[:120]}")
    return found


def test_every_cited_test_exists() -> None:
    assert cited_test_problems(DOCS) == []


def test_the_check_of_cited_tests_catches_a_missing_file_and_name(tmp_path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("held by tests/project/test_docs_references.py::test_every_cited_test_exists,\n"
                   "tests/project/test_docs_references.py::no_such_test and tests/nowhere/test_gone.py\n")
    problems = cited_test_problems([doc])
    assert len(problems) == 2
    assert "defines no no_such_test" in problems[0] and "no such file" in problems[1]


def test_every_cited_section_exists() -> None:
    assert cited_section_problems(ROOT) == []


def test_the_section_check_catches_a_missing_section(tmp_path) -> None:
    (tmp_path / "BENCHMARKS.md").write_text("# Benchmarks\n\n## Plan before running\n")
    (tmp_path / "RELIABILITY.md").write_text("# Reliability\n")
    (tmp_path / "a.py").write_text('# (BENCHMARKS.md, "Plan before running"); BENCHMARKS.md "Plan\n'
                                   '# BENCHMARKS.md, "Gone section")\n')
    problems = cited_section_problems(tmp_path)
    assert len(problems) == 1 and "'Gone section'" in problems[0]


def test_no_tracker_citations_in_the_repository() -> None:
    assert tracker_citations(ROOT) == []


def test_the_tracker_check_catches_citations_and_spares_anchors(tmp_path) -> None:
    (tmp_path / "a.py").write_text('"""Fixed (issue 38)."""\n# see Issue #14 items 3-5\nx = 1  # was #26\n')
    (tmp_path / "b.md").write_text("[link](#section-2) colour #fff #1a2b3c &#39; step 3 of 4\n")
    assert [line.split(":")[1] for line in tracker_citations(tmp_path)] == ["1", "2", "3"]


def test_benchmarks_md_stays_a_page_of_current_figures():
    """BENCHMARKS.md holds each benchmark's current figures (history stays in git): under 350 lines."""
    lines = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8").count("\n")
    assert lines < 350, f"BENCHMARKS.md has {lines} lines: keep the current figures, drop the history"
