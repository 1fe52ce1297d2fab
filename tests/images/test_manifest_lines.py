"""Input manifests read by byte range (``transforms/images/manifest_lines.py``), and one CSV row per line."""

from __future__ import annotations

import io
import random
import re

import pytest

from transforms.errors import ManifestError
from transforms.images import manifest_lines as ml
from transforms.images.inputs import LabelRules, TreeLevels, layout_of_levels, levels_of_paths
from tests.helpers import detect_layout
from tests.helpers import manifest_entries
from transforms.images.items import SourceImage
from transforms.shardset.dead_letters import DeadLetter


def _by_ranges(data: bytes, cr: bool, range_bytes: int, max_line: int = ml.MAX_LINE_BYTES) -> list:
    """(line number, line) of every line, read range by range as the build job reads them."""
    fh, size = io.BytesIO(data), len(data)
    ranges = ml.byte_ranges(size, range_bytes)
    counts = [ml.count_line_starts(fh, start, end, size, cr, "m") for start, end in ranges]
    got = []
    for (start, end), first, count in zip(ranges, ml.first_line_numbers(counts), counts):
        lines = list(ml.lines_in_range(fh, start, end, size, cr, "m", max_line))
        assert len(lines) == count, (data, start, end)  # both passes agree on the lines a range owns
        got += [(first + k, line) for k, line in enumerate(lines)]
    return got


# (file, lone "\r" breaks lines (CSV), the lines as one range reads them)
LINE_CASES = [
    (b"", True, []),
    (b"\n", True, [(1, b"")]),
    (b"a", False, [(1, b"a")]),
    (b"a\nb\n", False, [(1, b"a"), (2, b"b")]),
    (b"a\nb", False, [(1, b"a"), (2, b"b")]),  # a last line without "\n"
    (b"a\r\nb\r\n", True, [(1, b"a"), (2, b"b")]),
    (b"a\r\nb\r\n", False, [(1, b"a\r"), (2, b"b\r")]),  # JSON reads "\r" as white space
    (b"a\rb\rc", True, [(1, b"a"), (2, b"b"), (3, b"c")]),  # lone "\r" ends a CSV line
    (b"a\rb\rc", False, [(1, b"a\rb\rc")]),  # but not a JSON Lines one
    (b"a\r\r\nb", True, [(1, b"a"), (2, b""), (3, b"b")]),
    (b"\n\n\nx\n", False, [(1, b""), (2, b""), (3, b""), (4, b"x")]),
    (ml.BOM + b"path,label\na,b\n", True, [(1, b"path,label"), (2, b"a,b")]),
    (b"a\n" + ml.BOM + b"b\n", False, [(1, b"a"), (2, ml.BOM + b"b")]),  # a mark later on stays
    (b"caf\xe9\nok\n", False, [(1, b"caf\xe9"), (2, b"ok")]),
]


@pytest.mark.parametrize("data, cr, lines", LINE_CASES)
def test_one_range_reads_each_line_with_its_number(data: bytes, cr: bool, lines: list) -> None:
    assert _by_ranges(data, cr, max(len(data), 1)) == lines


@pytest.mark.parametrize("chunk", [1, 2, 3, ml._CHUNK])
@pytest.mark.parametrize("data, cr, lines", LINE_CASES)
def test_every_range_split_reads_the_lines_one_range_reads(monkeypatch, chunk, data, cr, lines) -> None:
    monkeypatch.setattr(ml, "_CHUNK", chunk)
    for range_bytes in range(1, len(data) + 2):
        assert _by_ranges(data, cr, range_bytes) == lines, range_bytes


def _split_reference(data: bytes, cr: bool) -> list:
    parts = re.split(rb"\r\n|\r|\n", data) if cr else data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    if parts and parts[0].startswith(ml.BOM):
        parts[0] = parts[0][len(ml.BOM):]
    return list(enumerate(parts, start=1))


def test_random_files_in_every_split_match_str_split() -> None:
    rng = random.Random(7)
    pieces = [b"a", b"bc", b"\n", b"\r", b"\r\n", b",", b"\xff"]
    for _ in range(600):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        for cr in (True, False):
            want = _split_reference(data, cr)
            for range_bytes in range(1, len(data) + 2):
                assert _by_ranges(data, cr, range_bytes) == want, (data, cr, range_bytes)


@pytest.mark.parametrize("chunk", [1, 3, ml._CHUNK])
def test_a_line_over_the_limit_is_none_and_later_numbers_hold(monkeypatch, chunk) -> None:
    monkeypatch.setattr(ml, "_CHUNK", chunk)
    data = b"ab\nabcdef\r\nabc\rabcd\n\nxyz"
    for range_bytes in range(1, len(data) + 2):
        assert _by_ranges(data, True, range_bytes, max_line=3) == [
            (1, b"ab"), (2, None), (3, b"abc"), (4, None), (5, b""), (6, b"xyz")]
        assert _by_ranges(data, False, range_bytes, max_line=3) == [
            (1, b"ab"), (2, None), (3, None), (4, b""), (5, b"xyz")]


def test_a_file_shorter_than_its_size_is_an_error_naming_it() -> None:
    with pytest.raises(ManifestError, match="m: file ended at byte 4, before its 10 bytes"):
        list(ml.lines_in_range(io.BytesIO(b"abcd"), 0, 10, 10, True, "m"))
    with pytest.raises(ManifestError, match="m: file ended at byte 4"):
        ml.count_line_starts(io.BytesIO(b"ab\nd"), 0, 10, 10, True, "m")


@pytest.mark.parametrize("size, range_bytes, ranges", [
    (0, 4, []), (1, 4, [(0, 1)]), (8, 4, [(0, 4), (4, 8)]), (9, 4, [(0, 4), (4, 8), (8, 9)]),
])
def test_byte_ranges(size: int, range_bytes: int, ranges: list) -> None:
    assert ml.byte_ranges(size, range_bytes) == ranges


def test_byte_ranges_refuses_an_empty_range() -> None:
    with pytest.raises(ValueError, match="range_bytes must be >= 1"):
        ml.byte_ranges(10, 0)


# --- one CSV row per line ---------------------------------------------------------------------------

def _summary(entries) -> list[tuple]:
    return [(e.path, e.reason) if isinstance(e, DeadLetter) else (e.path, e.origin) for e in entries]


def test_a_quoted_field_with_a_line_break_is_a_dead_letter_naming_its_lines() -> None:
    text = 'path,label\na.jpg,rose\n"b\nc.jpg",rose\nd.jpg,"tulip"\n'
    entries = list(manifest_entries(text, "d/list.csv", LabelRules()))
    assert _summary(entries) == [
        ("d/a.jpg", "d/list.csv:2"),
        ("d/list.csv:3", "bad_manifest_row"),  # the field opens here ...
        ("d/list.csv:4", "bad_manifest_row"),  # ... and closes here: neither is a row
        ("d/d.jpg", "d/list.csv:5"),
    ]
    assert "line break inside a quoted field is not supported" in entries[1].error


@pytest.mark.parametrize("line", ['a.jpg,"rose', 'a.jpg","rose', 'a.jpg,"ro""se', 'x.jpg",rose'])
def test_a_line_that_is_not_a_whole_csv_row_is_a_dead_letter(line: str) -> None:
    (dead,) = manifest_entries(f"path,label\n{line}\n", "list.csv", LabelRules())
    assert (dead.path, dead.reason) == ("list.csv:2", "bad_manifest_row")


@pytest.mark.parametrize("line, relpath", [
    ('"a,b.jpg",rose', "a,b.jpg"), ('"say ""hi"".jpg",rose', 'say "hi".jpg'), ("a.jpg,rose", "a.jpg"),
])
def test_quoted_fields_on_one_line_are_read_as_before(line: str, relpath: str) -> None:
    (entry,) = manifest_entries(f"path,label\n{line}\n", "list.csv", LabelRules())
    assert isinstance(entry, SourceImage) and entry.relpath == relpath


# --- layout from the top two levels -------------------------------------------------------------------

def _old_detect_layout(relpaths: list[str]) -> str:
    """The rule before listing by level: from every file's path."""
    tops = {p.split("/", 1)[0] for p in relpaths if "/" in p}
    if tops & {"train", "validation", "val", "test"}:
        return "splits"
    if relpaths and all(p.count("/") >= 2 for p in relpaths):
        return "splits"
    return "classes"


def test_layout_from_levels_is_the_old_rule_when_every_folder_holds_a_file() -> None:
    rng = random.Random(3)
    names = ["train", "rose", "a", "b.jpg"]
    for _ in range(2000):
        paths = ["/".join(rng.choice(names) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(0, 5))]
        assert detect_layout(paths) == _old_detect_layout(paths), paths
        halves = levels_of_paths(paths[2:], levels_of_paths(paths[:2]))
        assert layout_of_levels(halves) == _old_detect_layout(paths), paths


@pytest.mark.parametrize("levels, layout", [
    (TreeLevels(), "classes"),
    (TreeLevels(tops=frozenset({"rose"}), top_files=True), "classes"),
    (TreeLevels(tops=frozenset({"test", "rose"}), top_files=True), "splits"),
    (TreeLevels(tops=frozenset({"a"}), deeper=True), "splits"),
    (TreeLevels(tops=frozenset({"a"}), deeper=True, root_files=True), "classes"),
    # Decided from the top levels: an empty train/ folder makes split folders (the old rule
    # looked at files only).
    (TreeLevels(tops=frozenset({"train", "rose"}), top_files=True), "splits"),
])
def test_layout_of_levels(levels: TreeLevels, layout: str) -> None:
    assert layout_of_levels(levels) == layout
