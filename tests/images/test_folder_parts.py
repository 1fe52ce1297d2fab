"""A huge local folder listed in parts (``images.folder_parts``): how many parts, each path in one part."""

from __future__ import annotations

import zlib

import pytest

from transforms.images.folder_parts import (MAX_PARTS, NAMES_PER_PART, names_in_part, parts_for,
                                            spread_large_folders)
from tests.helpers import in_part
from transforms.images.inputs import FolderTask


@pytest.mark.parametrize("count, parts", [
    (0, 1), (1, 1), (NAMES_PER_PART, 1), (NAMES_PER_PART + 1, 2), (10 * NAMES_PER_PART, 10),
    (10 * NAMES_PER_PART + 1, 11), (MAX_PARTS * NAMES_PER_PART, MAX_PARTS), (10 ** 9, MAX_PARTS),
])
def test_parts_for_a_count(count, parts) -> None:
    assert parts_for(count) == parts


def test_parts_for_refuses_no_names_per_part() -> None:
    with pytest.raises(ValueError, match="names_per_part"):
        parts_for(5, names_per_part=0)


@pytest.mark.parametrize("parts", [1, 2, 3, 16])
def test_each_path_is_in_exactly_one_part(parts) -> None:
    paths = [f"cat/{i:06d}.jpg" for i in range(2000)] + ["é/日本.png", "bad\udcff.jpg", "", "a/b/c"]
    held = [sum(in_part(path, part, parts) for part in range(parts)) for path in paths]
    assert held == [1] * len(paths)
    sizes = [sum(in_part(path, part, parts) for path in paths) for part in range(parts)]
    assert min(sizes) > 0.7 * len(paths) / parts  # CRC-32 spreads numbered names about evenly


@pytest.mark.parametrize("folder, name", [(b"", b"a.jpg"), (b"sub", b"b.jpg"), (b"s/t", b"\xff.jpg"), (b"", b"")])
def test_names_in_part_tests_a_name_as_in_part_tests_its_path(folder, name) -> None:
    path = (folder + b"/" + name if folder else name).decode("utf-8", "surrogateescape")
    for part in range(5):
        assert names_in_part(part, 5)(folder)(name) == in_part(path, part, 5)


def test_the_part_of_a_path_is_its_crc32_modulo_parts() -> None:
    """Golden: the same in every process and on every machine (not Python's salted hash)."""
    assert zlib.crc32(b"cat/000001.jpg") % 7 == 4
    assert in_part("cat/000001.jpg", 4, 7) and not in_part("cat/000001.jpg", 3, 7)


def test_spread_large_folders_cuts_only_large_folders_listed_below() -> None:
    tasks = (FolderTask("r", "r", False, "classes"), FolderTask("r", "r/big", True, "classes"),
             FolderTask("r", "r/small", True, "classes"))
    sizes = {"r": 10 ** 6, "r/big": 25, "r/small": 10}
    asked = []

    def count(folder: str, limit: int) -> int:
        asked.append((folder, limit))
        return min(sizes[folder], limit)

    spread = spread_large_folders(tasks, count, names_per_part=10, max_parts=2)
    assert [(t.folder, t.part, t.parts) for t in spread] == [
        ("r", 0, 1), ("r/big", 0, 2), ("r/big", 1, 2), ("r/small", 0, 1)]
    assert asked == [("r/big", 20), ("r/small", 20)]  # the root's own files (not below) are not counted


@pytest.mark.parametrize("part, parts", [(1, 1), (-1, 2), (0, 0)])
def test_a_folder_task_refuses_a_part_outside_its_parts(part, parts) -> None:
    with pytest.raises(ValueError, match="part must be"):
        FolderTask("r", "r/a", True, "classes", part, parts)
