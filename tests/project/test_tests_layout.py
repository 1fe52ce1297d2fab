"""The tests mirror the code: ``tests/<package>/test_<module>.py`` names a module of that package.

A folder named for a package of the code holds the unit tests of its modules, one file per
module (a file may also test a module's close neighbours). A few files hold a topic that spans
modules (``TOPICS``). End-to-end runs of the jobs, real-component checks and the reliability
suite live in folders of their own (``FREE``), named for what they hold, not for a module.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# Test folder -> the code folder whose modules its files are named for.
CODE = {
    **{name: ROOT / "transforms" / name for name in
       ("archives", "arrayrecord", "example", "images", "processes", "progress", "shardset", "storage", "tfrecord",
        "verify")},
    "transforms": ROOT / "transforms",  # the Beam-layer modules of transforms/
    "cli": ROOT / "beam_jobs" / "cli",
    "benchmarks": ROOT / "benchmarks",
}
# Folders whose files are named for what they check.
FREE = {
    "e2e": "the jobs run end to end on real files, read back by TensorFlow, tfds, Beam and other readers",
    "reliability": "RELIABILITY.md's cases: faults, bad inputs, kills, links, object-store errors",
    "project": "rules of the repository as a whole: layering, imports, the public API, the README, this layout",
}
# Test folder -> topic -> what the file holds (it spans several modules of the package).
TOPICS = {
    "shardset": {"append_plan": "an append's rules: planning.append_layout and the ownership journal"},
    "storage": {"local_disk": "the package's listing, reading, writing and deleting on local disk"},
}


def layout_problems(tests: Path) -> list[str]:
    """One line per test file or folder under ``tests`` that breaks the layout."""
    problems = [f"tests/{path.name}: a test file belongs in a package folder or in one of {sorted(FREE)}"
                for path in sorted(tests.glob("test_*.py"))]
    for folder in sorted(p for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py"))):
        where = f"tests/{folder.name}"
        if not (folder / "__init__.py").is_file():
            problems.append(f"{where}: no __init__.py (test modules are imported as tests.{folder.name}.*)")
        if folder.name in FREE:
            continue
        if folder.name not in CODE:
            problems.append(f"{where}: names no package of the code ({sorted(CODE)}) and no test folder "
                            f"({sorted(FREE)})")
            continue
        modules = {path.stem for path in CODE[folder.name].glob("*.py") if path.stem != "__init__"}
        topics = TOPICS.get(folder.name, {})
        for path in sorted(folder.glob("test_*.py")):
            name = path.stem[len("test_"):]
            if name not in modules and name not in topics:
                problems.append(f"{where}/{path.name}: {CODE[folder.name].relative_to(ROOT)}/ has no module "
                                f"{name}.py and no topic {name!r} is listed")
    return problems


def test_the_tests_mirror_the_code() -> None:
    assert layout_problems(TESTS) == []


def test_a_misplaced_test_file_is_named(tmp_path: Path) -> None:
    for folder in ("images", "e2e", "bench"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "test_flat.py").write_text("")
    (tmp_path / "images" / "test_image_codec.py").write_text("")
    (tmp_path / "images" / "test_nothing.py").write_text("")
    (tmp_path / "e2e" / "test_anything.py").write_text("")
    (tmp_path / "bench" / "test_x.py").write_text("")
    (tmp_path / "verify").mkdir()
    (tmp_path / "verify" / "test_checks.py").write_text("")
    problems = layout_problems(tmp_path)
    assert [line.split(":")[0] for line in problems] == [
        "tests/test_flat.py", "tests/bench", "tests/images/test_nothing.py", "tests/verify"], problems
