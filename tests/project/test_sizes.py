"""Size limits of the product's code, read with ``ast``: short functions, small constructors.

- Every Beam transform (a ``PTransform`` subclass) and every ``DoFn`` of ``transforms/``
  and ``beam_jobs/`` takes at most ``MAX_PARAMETERS`` parameters in its constructor
  (``self`` not counted; ``*args``/``**kwargs`` count one each): what belongs together
  travels as one small frozen dataclass.
- No function or method of the product is longer than ``MAX_LINES`` lines (its
  ``def`` to its last line, docstring included), but those in ``LONG_ALLOWED``,
  each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("transforms", "beam_jobs")
MAX_PARAMETERS = 8
MAX_LINES = 80
# "path::qualified name" -> why it may be longer than MAX_LINES for now.
LONG_ALLOWED: dict[str, str] = {}
# Base classes whose subclasses are Beam transforms or DoFns: Beam's, and the project's own bases.
_BEAM_BASES = {"PTransform", "DoFn"}


def _modules() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (ROOT / package).rglob("*.py"))


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _beam_classes(trees: dict[Path, ast.Module]) -> dict[str, list[ast.ClassDef]]:
    """Class name -> its definitions, for every class that derives (at any depth, by name) from a
    PTransform or DoFn."""
    classes: dict[str, list[tuple[Path, ast.ClassDef]]] = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append((path, node))
    beam = set(_BEAM_BASES)
    grew = True
    while grew:
        grew = False
        for name, found in classes.items():
            if name not in beam and any(_base_name(b) in beam for _, node in found for b in node.bases):
                beam.add(name)
                grew = True
    return {name: found for name, found in classes.items() if name in beam}


def _parameters(fn: ast.FunctionDef) -> int:
    args = fn.args
    count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
    count += (args.vararg is not None) + (args.kwarg is not None)
    return count - 1  # self


def _functions(tree: ast.Module):
    """(qualified name, node) of every function and method, nested ones too."""
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)
    yield from walk(tree, "")


def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), filename=str(path)) for path in _modules()}


def test_every_transform_and_dofn_constructor_takes_at_most_eight_parameters() -> None:
    too_many = []
    for name, found in _beam_classes(_trees()).items():
        for path, node in found:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__" and _parameters(item) > MAX_PARAMETERS:
                    too_many.append(f"{path.relative_to(ROOT)}::{name}: {_parameters(item)} parameters")
    assert not too_many, ("constructors over the limit (group what belongs together in a frozen dataclass):\n"
                          + "\n".join(too_many))


def test_no_product_function_is_over_eighty_lines() -> None:
    long = []
    for path, tree in _trees().items():
        for name, node in _functions(tree):
            key = f"{path.relative_to(ROOT)}::{name}"
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES and key not in LONG_ALLOWED:
                long.append(f"{key}: {lines} lines")
    assert not long, "functions over the limit:\n" + "\n".join(long)


def test_the_allowed_long_functions_still_exist_and_are_still_long() -> None:
    found = {f"{path.relative_to(ROOT)}::{name}": node.end_lineno - node.lineno + 1
             for path, tree in _trees().items() for name, node in _functions(tree)}
    stale = [key for key in LONG_ALLOWED if found.get(key, 0) <= MAX_LINES]
    assert not stale, f"no longer long (remove from LONG_ALLOWED): {stale}"


def test_the_parameter_count_sees_keyword_only_and_star_parameters() -> None:
    fn = ast.parse("def __init__(self, a, b=1, *rest, c, d=2, **more): pass").body[0]
    assert _parameters(fn) == 6
