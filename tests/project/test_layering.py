"""The layout's rules, read from the imports of every module with ``ast``.

- Nothing under ``transforms/*/`` (the subpackages) imports ``apache_beam``, a
  Beam-layer module of ``transforms/`` or anything in ``beam_jobs``: pure code can be
  used, and tested, without Beam.
- Storage has one home: ``transforms/filesystems.py`` is the only module that
  imports Beam's file systems and their S3 and GCS clients (and nothing else of
  Beam but the options they are built from and the exception Beam's S3 retries
  stop at); ``transforms/storage/`` is the only package that uses them (it takes
  them from ``transforms.filesystems``, the one Beam-layer module it may import).
  No other module of ``transforms/`` or ``beam_jobs/`` imports
  ``apache_beam.io.filesystems`` or names ``FileSystems``, and no other
  subpackage imports the storage package (it stands on Beam).
- ``transforms/tfrecord/`` and ``transforms/example/`` import no other subpackage:
  framing and the Example codec stand alone.
- ``beam_jobs/`` is the top: nothing in ``transforms/`` imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRANSFORMS = ROOT / "transforms"
# Top-level modules of transforms/ that pure code may use: they import no Beam.
PURE_TOP_LEVEL = {"transforms.errors"}
STANDALONE = {"tfrecord", "example"}
STORAGE = "storage"
# The one module that takes Beam's file systems for the storage package, and what of Beam it
# may import: the file systems (FileSystems, FileMetadata, CompressionTypes, BeamIOError), the
# S3 and GCS clients they use (shared S3 reads with bounded retries, listing by level,
# conditional creates, closing an empty S3 upload), the options they are built from, and the
# exception Beam's S3 retries stop at (``S3NoAnswerError``), as Beam's own S3 client imports them.
FILESYSTEMS = "transforms.filesystems"
FILESYSTEMS_BEAM = ("apache_beam.io.filesystem", "apache_beam.io.filesystems", "apache_beam.io.filesystemio",
                    "apache_beam.io.aws", "apache_beam.io.gcp.gcsio", "apache_beam.options.pipeline_options",
                    "apache_beam.utils.retry", "apache_beam.io.gcp.gcsfilesystem")
# the file systems and their clients, not the options
FILE_SYSTEM_MODULES = FILESYSTEMS_BEAM[:5] + ("apache_beam.io.gcp.gcsfilesystem",)
STORAGE_HOMES = ("transforms/storage/", "transforms/filesystems.py")


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (function-level imports too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in ("transforms", "beam_jobs"):  # from transforms import plan_shards
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return found


def names_file_systems(path: Path) -> bool:
    """True if ``path``'s code names ``FileSystems`` (``FileSystems.open``, ``filesystems.FileSystems``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return any((isinstance(node, ast.Name) and node.id == "FileSystems")
               or (isinstance(node, ast.Attribute) and node.attr == "FileSystems")
               or (isinstance(node, ast.alias) and node.name == "FileSystems") for node in ast.walk(tree))


def _within(module: str, allowed: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in allowed)


def layering_problems(root: Path) -> list[str]:
    """Returns one line per import that breaks the rules, for the tree under ``root``."""
    transforms = root / "transforms"
    subpackages = sorted(p.name for p in transforms.iterdir() if (p / "__init__.py").is_file())
    problems = []
    for path in sorted([*transforms.rglob("*.py"), *(root / "beam_jobs").rglob("*.py")]):
        rel = path.relative_to(root)
        imports = imported_modules(path)
        home = rel.as_posix().startswith(STORAGE_HOMES)
        if not home and ("apache_beam.io.filesystems" in imports or names_file_systems(path)):
            problems.append(f"{rel} uses FileSystems: only transforms/storage/ calls Beam's file systems")
        if rel.parts[0] != "transforms":
            continue
        for module in sorted(imports):
            if module.startswith("beam_jobs"):
                problems.append(f"{rel} imports {module}: transforms/ never imports the jobs")
            elif len(rel.parts) < 3 and _within(module, FILE_SYSTEM_MODULES) \
                    and module != "apache_beam.io.filesystems" and rel.as_posix() != "transforms/filesystems.py":
                problems.append(f"{rel} imports {module}: only transforms/filesystems.py imports Beam's file systems")
        if rel.as_posix() == "transforms/filesystems.py":
            problems += [f"{rel} imports {m}: it imports only Beam's file systems, their clients and options"
                         for m in sorted(imports) if m.startswith("apache_beam") and not _within(m, FILESYSTEMS_BEAM)]
        if len(rel.parts) < 3:  # transforms/<module>.py: the Beam layer
            continue
        package = rel.parts[1]
        for module in sorted(imports):
            parts = module.split(".")
            if parts[0] == "apache_beam":
                problems.append(f"{rel} imports {module}: pure code never imports Beam")
            elif parts[0] == "transforms" and len(parts) > 1:
                top = ".".join(parts[:2])
                if top == FILESYSTEMS and package == STORAGE:
                    continue  # the storage package's one way to Beam's file systems
                if parts[1] not in subpackages and top not in PURE_TOP_LEVEL and parts[1] != "__init__":
                    problems.append(f"{rel} imports {module}: a Beam-layer module")
                elif parts[1] == STORAGE and package != STORAGE:
                    problems.append(f"{rel} imports {module}: pure code never imports storage (it imports Beam)")
                elif package in STANDALONE and parts[1] in subpackages and parts[1] != package:
                    problems.append(f"{rel} imports {module}: transforms/{package}/ imports no other subpackage")
    return problems


def test_the_tree_keeps_the_layering() -> None:
    assert layering_problems(ROOT) == []


def test_pure_top_level_modules_import_no_beam() -> None:
    for name in PURE_TOP_LEVEL:
        path = ROOT / (name.replace(".", "/") + ".py")
        assert not [m for m in imported_modules(path) if m.startswith("apache_beam")]


@pytest.mark.slow
@pytest.mark.parametrize("where, line, rule", [
    ("transforms/images/image_codec.py", "import apache_beam as beam", "pure code never imports Beam"),
    ("transforms/verify/checks.py", "from apache_beam.io.filesystem import FileMetadata",
     "pure code never imports Beam"),
    ("transforms/shardset/manifest.py", "from transforms.shard_sink import STAGING_DIR", "a Beam-layer module"),
    ("transforms/shardset/planning.py", "from transforms import plan_shards", "a Beam-layer module"),
    ("transforms/tfrecord/framing.py", "from transforms.shardset.naming import join_path",
     "imports no other subpackage"),
    ("transforms/example/codec.py", "from transforms.images import image_codec as codec", "imports no other subpackage"),
    ("transforms/storage/files.py", "from beam_jobs.cli import flags", "never imports the jobs"),
    ("transforms/images/inputs.py", "def f():\n    import apache_beam", "pure code never imports Beam"),
    ("transforms/storage/files.py", "import apache_beam as beam", "pure code never imports Beam"),
    ("transforms/storage/listing.py", "from apache_beam.io.aws import s3io", "pure code never imports Beam"),
    ("transforms/shard_sink.py", "from apache_beam.io.aws import s3io", "only transforms/filesystems.py"),
    ("transforms/storage/writing.py", "from apache_beam.metrics import Metrics", "pure code never imports Beam"),
    ("transforms/filesystems.py", "from apache_beam.metrics import Metrics", "imports only Beam's file systems"),
    ("transforms/images/inputs.py", "from transforms.filesystems import naming_s3_errors", "a Beam-layer module"),
    ("transforms/storage/runs.py", "from transforms import beam_compat", "a Beam-layer module"),
    ("transforms/images/inputs.py", "from transforms.storage.files import read_bytes", "never imports storage"),
    ("transforms/verify_steps.py", "from apache_beam.io.filesystems import FileSystems",
     "only transforms/storage/ calls"),
    ("transforms/shard_sink.py", "def f(path):\n    return beam.io.filesystems.FileSystems.exists(path)",
     "only transforms/storage/ calls"),
    ("beam_jobs/verify_shards.py", "def f(fs):\n    return fs.FileSystems.delete(['x'])",
     "only transforms/storage/ calls"),
])
def test_a_planted_import_is_caught(tmp_path: Path, where: str, line: str, rule: str) -> None:
    copy = tmp_path / "tree"
    for path in [*TRANSFORMS.rglob("*.py"), *(ROOT / "beam_jobs").rglob("*.py")]:
        target = copy / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    planted = copy / where
    planted.write_text(planted.read_text() + "\n" + line + "\n")
    problems = layering_problems(copy)
    assert len(problems) == 1 and problems[0].startswith(where) and rule in problems[0], problems


def readme_tree() -> set[str]:
    """The files the "Code layout" tree (docs/code-layout.md) names, as paths."""
    text = (ROOT / "docs" / "code-layout.md").read_text()
    block = text.split("# Code layout", 1)[1].split("```", 2)[1]
    paths, stack = set(), []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        stack[depth:] = [name.rstrip("/")]
        if not name.endswith("/"):
            paths.add("/".join(stack))
    return paths


def test_readme_tree_names_every_module_once() -> None:
    listed = readme_tree()
    modules = {str(p.relative_to(ROOT)) for folder in ("transforms", "beam_jobs")
               for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".proto")
               and "__pycache__" not in p.parts and not (p.name == "__init__.py" and p.parent.name != "transforms")}
    assert sorted(listed - modules) == [] and sorted(modules - listed) == []
