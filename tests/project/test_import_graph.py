"""The import graph of ``transforms/`` and ``beam_jobs/`` has no circle.

Every import is read from the source with ``ast``, at any depth: an import
inside a function (made there to load something only when needed) joins the
graph as well, because a circle through it still ties the two modules
together. Importing ``a.b.c`` imports ``a`` and ``a.b`` first, so those
edges count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("transforms", "beam_jobs")


def module_name(path: Path) -> str:
    """``transforms/images/image_codec.py`` -> ``transforms.images.image_codec`` (a package: its folder's name)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Every module of the project's packages, by name."""
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The project modules that importing ``name`` imports directly, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        for target in targets:
            found.update(m for m in _with_parents(target) if m in modules and m != name)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports."""
    modules = project_modules()
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph`` (its modules in order, the first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_has_no_circle() -> None:
    circle = find_circle(import_graph())
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_the_graph_holds_the_project_imports() -> None:
    graph = import_graph()
    assert "transforms.errors" in graph["transforms.images.image_codec"]  # a top-level import
    assert "transforms.images" in graph["transforms.images.image_codec"]  # a parent package
    assert "transforms.images.library_messages" in graph["transforms.images.image_codec"]


def test_a_circle_is_found_through_a_function_level_import(tmp_path: Path) -> None:
    (tmp_path / "one.py").write_text("import two\n")
    (tmp_path / "two.py").write_text("def f():\n    from one import x\n")
    graph = {name: imports_of(name, tmp_path / f"{name}.py", {"one", "two"}) for name in ("one", "two")}
    assert graph == {"one": {"two"}, "two": {"one"}}
    assert find_circle(graph) == ["one", "two", "one"]
    assert find_circle({"one": {"two"}, "two": set()}) is None
