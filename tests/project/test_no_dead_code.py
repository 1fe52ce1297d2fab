"""Every function and class of the product has a caller in the product.

The product is every module under ``transforms/`` and ``beam_jobs/`` (not the tests, not the
benchmarks). A definition checked is a module-level function or class, or a public method (no
leading underscore) of a module-level class. It is used when product code other than the
definition itself names it: a name read (``plan_shards(...)``, ``Base`` in ``class X(Base)``,
a decorator) or an attribute (``module.plan_shards``, ``meta.class_names()``). An import and a
string in ``__all__`` are not uses: a name only re-exported, or only called by tests, is dead.
Names are matched by spelling, not resolved, so two definitions of one name are used together;
that errs towards keeping code, never towards failing on live code.

Used without a product caller, as the runtime or the user calls them:

- dunder names (``__reduce__``, a module's ``__getattr__``) and ``main``;
- the console scripts of ``setup.py``;
- the hooks a framework calls on a subclass (``INTERFACE_METHODS``: Beam's DoFn, CombineFn,
  PTransform, source, restriction provider, file-like objects, logging handlers), for a class
  that has a base class;
- the subclasses of ``PipelineOptions`` (Beam finds them to parse their flags);
- ``ENTRY_POINTS``: the few public names a user calls from their own pipeline, each with the
  page that documents it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("transforms", "beam_jobs")

# Methods a framework calls on a subclass; a class with a base class may define them uncalled.
INTERFACE_METHODS = frozenset({
    # apache_beam.PTransform
    "expand", "default_label",
    # apache_beam.DoFn
    "setup", "start_bundle", "process", "process_batch", "finish_bundle", "teardown",
    # apache_beam.CombineFn
    "create_accumulator", "add_input", "add_inputs", "merge_accumulators", "compact", "extract_output",
    # apache_beam.io.iobase.BoundedSource, RangeTracker and RestrictionProvider
    "estimate_size", "split", "get_range_tracker", "read", "default_output_coder",
    "initial_restriction", "create_tracker", "restriction_size", "try_split", "try_claim",
    # io.RawIOBase (file-like objects handed to readers)
    "readable", "readinto", "readall", "seekable", "writable", "seek", "tell", "close",
    # logging.Handler
    "emit",
})
# Options classes are found by Beam through PipelineOptions' subclasses.
REGISTERING_BASES = frozenset({"PipelineOptions"})
# Public names a user calls from their own pipeline, with the page that documents them.
ENTRY_POINTS = {
    "transforms/tfrecord_source.py:ReadFromTFRecords": "docs/reading.md: reading shards in a Beam pipeline",
}


def _product_modules() -> list[Path]:
    return sorted(path for top in PRODUCT for path in (ROOT / top).rglob("*.py"))


def _console_scripts() -> set[str]:
    """The functions ``setup.py``'s console scripts call (``name = module:function``)."""
    return set(re.findall(r"=\s*[\w.]+:(\w+)", (ROOT / "setup.py").read_text()))


def _definitions(tree: ast.Module):
    """``(name, node, class or None)`` of each module-level function and class, and each public method."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name, node, None
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_"):
                    yield item.name, item, node


def _uses(tree: ast.Module) -> list[tuple[str, int]]:
    """``(name, line)`` of every name read and every attribute in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            found.append((node.id, node.lineno))
        elif isinstance(node, ast.Attribute):
            found.append((node.attr, node.lineno))
    return found


def _exempt(name: str, cls: ast.ClassDef | None, node: ast.AST, entry: str) -> bool:
    if name.startswith("__") and name.endswith("__"):
        return True
    if name == "main" or entry in ENTRY_POINTS:
        return True
    if cls is not None and cls.bases and name in INTERFACE_METHODS:
        return True
    if isinstance(node, ast.ClassDef):
        bases = {base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "") for base in node.bases}
        if bases & REGISTERING_BASES:
            return True
    return False


def dead_definitions() -> list[str]:
    """``path:line name`` of each product definition that no other product code uses."""
    scripts = _console_scripts()
    trees = {path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(), filename=str(path))
             for path in _product_modules()}
    uses: dict[str, list[tuple[str, int]]] = {}
    for rel, tree in trees.items():
        for name, line in _uses(tree):
            uses.setdefault(name, []).append((rel, line))
    dead = []
    for rel, tree in trees.items():
        for name, node, cls in _definitions(tree):
            qualified = f"{cls.name}.{name}" if cls is not None else name
            if _exempt(name, cls, node, f"{rel}:{qualified}") or (cls is None and name in scripts):
                continue
            inside = range(node.lineno, node.end_lineno + 1)  # its own body: recursion is no use
            if not any(where != rel or line not in inside for where, line in uses.get(name, ())):
                dead.append(f"{rel}:{node.lineno} {qualified}")
    return dead


def test_every_product_function_and_class_has_a_product_caller() -> None:
    dead = dead_definitions()
    assert not dead, (f"{len(dead)} definitions have no caller in transforms/ or beam_jobs/ (delete them, "
                      "or move a helper only tests use into tests/):\n" + "\n".join(dead))


def test_the_check_finds_a_dead_function_and_a_dead_method() -> None:
    tree = ast.parse("def used():\n    return used()\n\nclass Fn(Base):\n    def process(self):\n        used()\n"
                     "    def spare(self):\n        pass\n")
    names = {name for name, _, _ in _definitions(tree)}
    assert names == {"used", "Fn", "process", "spare"}
    assert ("used", 6) in _uses(tree) and not any(name == "spare" for name, _ in _uses(tree))


def test_every_entry_point_exists() -> None:
    for entry in ENTRY_POINTS:
        path, name = entry.split(":")
        tree = ast.parse((ROOT / path).read_text())
        assert name in {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}, entry
