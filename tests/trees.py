"""Input trees and shard sets made once per test process, shared by the tests that read them.

Registered as a pytest plugin by ``conftest.py``. ``shared`` (session-wide)
makes them, each once per distinct arguments:

- ``shared.tree(*parts)``: a folder of class folders of small real images
  (``make_class_tree``), one ``Part`` per sub-folder (default: one part at the
  root, three classes of 4 images, no broken files);
- ``shared.expected(root)``: what each file of such a tree becomes (its class,
  or ``dead:<reason>``), by path relative to the root;
- ``shared.build(root, *flags)``: the folder ``build_shards`` publishes from
  ``--input root`` with ``flags``.

A module states what it needs, and these fixtures hand it over:

- ``tree``: ``shared.tree(*TREE)``, ``TREE`` a tuple of ``Part`` (default ``(Part(),)``);
- ``trees``: ``{name: shared.tree(*parts)}`` for each entry of ``TREES``;
- ``built``: a ``Built`` (root, expected, out, name) of ``shared.build(tree, *flags)``, with
  ``BUILD`` the flags, or once for each ``name: flags`` of ``BUILDS`` (the fixture is then
  parametrized by name); the published folder is named ``BUILD_FOLDER`` (default ``out``).

What is shared is read only: a test that changes an input or a set copies it
first. Each module's ``tree``, ``trees`` and ``built`` check at the module's end
that the folders are as they were made (file names, sizes and modification
times), so a test that writes into one fails there rather than misleading
another module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, NamedTuple

import pytest

from tests.shard_fixtures import make_class_tree

CLASSES = ("daisy", "rose", "tulip")


@dataclass(frozen=True)
class Part:
    """Class folders of images below ``folder`` of a tree (``make_class_tree``'s arguments)."""

    folder: str = ""
    classes: tuple[str, ...] = CLASSES
    per_class: int = 4
    seed: int = 0
    broken: bool = False
    prefix: str = ""


class Built(NamedTuple):
    """A shared build: its input tree, what each input becomes, the published folder, its name in BUILDS."""

    root: str
    expected: dict[str, str]
    out: str
    name: str = ""


def _snapshot(folder: str) -> list[tuple[str, int, int]]:
    found = []
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(dirpath, name)
            stat = os.lstat(path)
            found.append((os.path.relpath(path, folder), stat.st_size, stat.st_mtime_ns))
    return sorted(found)


class Shared:
    """Makes trees and builds once per process and hands out the same folders after."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self._trees: dict[tuple[Part, ...], str] = {}
        self._expected: dict[str, dict[str, str]] = {}
        self._builds: dict[tuple[str, tuple[str, ...], str], str] = {}
        self._made: dict[str, list[tuple[str, int, int]]] = {}

    def tree(self, *parts: Part) -> str:
        """The root of a tree of ``parts`` (default: one ``Part()``), made on first use."""
        key = parts or (Part(),)
        if key not in self._trees:
            root = str(self._factory.mktemp("tree"))
            expected: dict[str, str] = {}
            for part in key:
                made = make_class_tree(os.path.join(root, part.folder) if part.folder else root,
                                       classes=part.classes, per_class=part.per_class, seed=part.seed,
                                       broken=part.broken, prefix=part.prefix)
                expected.update({os.path.join(part.folder, rel) if part.folder else rel: outcome
                                 for rel, outcome in made.items()})
            self._trees[key], self._expected[root] = root, expected
            self._made[root] = _snapshot(root)
        return self._trees[key]

    def expected(self, root: str) -> dict[str, str]:
        """Relative path -> class or ``dead:<reason>`` of each file of a tree ``tree`` made."""
        return dict(self._expected[root])

    def build(self, root: str, *flags: str, folder: str = "out") -> str:
        """The folder (named ``folder``) ``build_shards`` published from ``--input root`` and ``flags``,
        built on first use."""
        key = (root, flags, folder)
        if key not in self._builds:
            from beam_jobs import build_shards

            out = str(self._factory.mktemp("set") / folder)
            status = build_shards.run(["--input", root, "--output_dir", out, *flags])
            assert status == 0, f"building {root} with {list(flags)} exited {status}"
            self._builds[key] = out
            self._made[out] = _snapshot(out)
        return self._builds[key]

    def check_unchanged(self, *folders: str) -> None:
        """Fails if a shared folder is not as it was made: a test wrote into it."""
        for folder in folders:
            assert _snapshot(folder) == self._made[folder], (
                f"{folder} is shared by the tests of this process and changed: copy it before changing it")


@pytest.fixture(scope="session")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    """Trees and builds made once per test process (see the module docstring)."""
    return Shared(tmp_path_factory)


@pytest.fixture(scope="module")
def tree(shared: Shared, request: pytest.FixtureRequest) -> Iterator[str]:
    """The module's input tree: ``shared.tree(*TREE)``."""
    root = shared.tree(*getattr(request.module, "TREE", ()))
    yield root
    shared.check_unchanged(root)


@pytest.fixture(scope="module")
def trees(shared: Shared, request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The module's input trees by name: ``shared.tree(*parts)`` for each entry of ``TREES``."""
    roots = {name: shared.tree(*parts) for name, parts in request.module.TREES.items()}
    yield roots
    shared.check_unchanged(*roots.values())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module with ``BUILDS`` gets its tests run once per build."""
    builds = getattr(metafunc.module, "BUILDS", None)
    if builds and "built" in metafunc.fixturenames:
        metafunc.parametrize("built", sorted(builds), indirect=True, scope="module")


@pytest.fixture(scope="module")
def built(shared: Shared, tree: str, request: pytest.FixtureRequest) -> Iterator[Built]:
    """The module's build of its tree: ``BUILD``'s flags, or ``BUILDS[name]``'s."""
    name = getattr(request, "param", "")
    flags = request.module.BUILDS[name] if name else getattr(request.module, "BUILD", ())
    out = shared.build(tree, *flags, folder=getattr(request.module, "BUILD_FOLDER", "out"))
    yield Built(tree, shared.expected(tree), out, name)
    shared.check_unchanged(out)
