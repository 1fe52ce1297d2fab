"""The python blocks of README.md and docs/*.md: recipes, run as written, and fragments.

A fenced python block preceded by ``<!-- recipe: NAME -->`` is a recipe: complete code a user
pastes and runs against a built folder (``out/flowers``), which a test runs as written, with only
that folder's path replaced. ``<!-- fragment -->`` marks a part of a recipe (lines to add to one);
fragments are compiled. Every python block carries one of the two marks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE_FOLDER = "out/flowers"  # the output folder every recipe reads
_BLOCK = re.compile(r"(?:<!-- (recipe: [\w-]+|fragment) -->\n)?```python\n(.*?)```", re.S)


@dataclass(frozen=True)
class Block:
    """One fenced python block of a page."""

    page: str  # relative to the repository's root
    line: int  # where its fence is
    mark: str | None  # "recipe: NAME", "fragment" or None
    code: str

    @property
    def name(self) -> str | None:
        return self.mark[len("recipe: "):] if self.mark and self.mark.startswith("recipe: ") else None


def pages() -> list[Path]:
    """The pages users read code from."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(page: Path) -> list[Block]:
    """Every fenced python block of ``page``, with its mark."""
    text = page.read_text(encoding="utf-8")
    return [Block(str(page.relative_to(ROOT)), text.count("\n", 0, found.start(2)), found.group(1), found.group(2))
            for found in _BLOCK.finditer(text)]


def recipe(name: str, folder: str | None = None) -> str:
    """The recipe called ``name``, its output folder replaced by ``folder`` (if given)."""
    found = [block for page in pages() for block in python_blocks(page) if block.name == name]
    assert len(found) == 1, f"{len(found)} recipes called {name!r}"
    code = found[0].code
    assert RECIPE_FOLDER in code or folder is None, f"recipe {name!r} does not read {RECIPE_FOLDER}"
    return code if folder is None else code.replace(RECIPE_FOLDER, folder)
