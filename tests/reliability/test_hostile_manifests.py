"""Reliability: hostile input manifests (CSV, JSON Lines) and COCO files, bounded in memory and time.

Each file is small and built here: a line far longer than a row, a field over
the csv module's limit, JSON nested a hundred thousand deep, an integer of
5,000 digits, one COCO entry of half a mebibyte read in small chunks. A row
that cannot be read is its own ``bad_manifest_row`` dead letter; a COCO file
that cannot be read is one error naming the file and the character; nothing
is held beyond the stated bounds (``manifest_lines.MAX_LINE_BYTES`` a line,
``coco.MAX_ENTRY_CHARS`` an entry).
"""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest

from transforms.errors import ManifestError
from transforms.images import manifest_lines as ml
from transforms.images.inputs import LabelRules, csv_header, decode_line, manifest_line_entries
from transforms.images import coco as coco
from transforms.shardset.dead_letters import DeadLetter
from tests.helpers import coco_entries

_RULES = LabelRules()


def _entries(manifest: str, data: bytes | io.BytesIO, max_line: int = ml.MAX_LINE_BYTES) -> list:
    """Every entry of a manifest's bytes, read as the build reads them (one range)."""
    cr = ml.breaks_at_cr(manifest)
    fh = data if isinstance(data, io.BytesIO) else io.BytesIO(data)
    size = len(fh.getbuffer())
    lines = enumerate(ml.lines_in_range(fh, 0, size, size, cr, manifest, max_line), start=1)
    numbered = [(n, None if line is None else decode_line(line)) for n, line in lines]
    fields = ()
    if not manifest.endswith(".jsonl"):
        fields, problem = csv_header(numbered[0][1])
        assert problem is None, problem
        numbered = numbered[1:]
    return list(manifest_line_entries(numbered, manifest, _RULES, fields))


def _dead(entries: list) -> dict[str, tuple[str, str]]:
    return {e.path: (e.reason, e.error) for e in entries if isinstance(e, DeadLetter)}


@pytest.mark.parametrize("manifest", ["list.csv", "list.jsonl"])
def test_a_line_over_the_limit_is_a_dead_letter_and_never_held_whole(manifest):
    row = b"a.jpg,rose\n" if manifest.endswith(".csv") else b'{"path": "a.jpg", "label": "rose"}\n'
    head = b"path,label\n" if manifest.endswith(".csv") else b""
    long_line = row.rstrip(b"\n") + b"x" * (4 << 20) + b"\n"  # 4 MiB, against a limit of 64 KiB here
    fh = io.BytesIO(head + row + long_line + row.replace(b"a.jpg", b"b.jpg"))
    tracemalloc.start()
    try:
        entries = _entries(manifest, fh, max_line=64 << 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    number = 3 if head else 2
    assert [(k, reason) for k, (reason, _) in _dead(entries).items()] == [(f"{manifest}:{number}", "bad_manifest_row")]
    assert len(entries) == 3
    assert peak < 3 * ml.MIB, peak  # a chunk or two of the 4 MiB line, never the line


@pytest.mark.parametrize("line, why", [
    (b'{"path": "a.jpg", "label": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "not valid JSON"),
    (b'{"path": "a.jpg", "label": ' + b"7" * 5000 + b"}", "not valid JSON"),
    (b'{"path": "a.jpg", "label": 1e999999}', None),  # inf: a label that is not a class name
])
def test_a_hostile_json_lines_row_is_its_own_dead_letter(line, why):
    data = b'{"path": "ok.jpg", "label": "rose"}\n' + line + b'\n{"path": "b.jpg", "label": "rose"}\n'
    entries = _entries("list.jsonl", data)
    assert len(entries) == 3
    reason, error = _dead(entries)["list.jsonl:2"]
    assert reason == "bad_manifest_row" or why is None, (reason, error)
    assert why is None or why in error, error


def test_a_csv_field_over_the_csv_modules_limit_is_its_rows_dead_letter():
    data = b"path,label\nok.jpg,rose\n" + b"a.jpg," + b"r" * 200_000 + b"\nb.jpg,rose\n"
    entries = _entries("list.csv", data)
    assert len(entries) == 3
    reason, error = _dead(entries)["list.csv:3"]
    assert reason == "bad_manifest_row" and "field larger than field limit" in error, error


def _coco(annotation_id: str) -> bytes:
    return (b'{"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"id": ' + annotation_id.encode()
            + b', "image_id": 1, "category_id": 1, "bbox": [1, 1, 2, 2]}], "categories": [{"id": 1, "name": "x"}]}')


def test_a_coco_integer_of_5000_digits_is_an_error_naming_the_file_and_where():
    with pytest.raises(ManifestError, match=r"f\.json: not valid JSON: .*4300 digits.* \(character \d+\)"):
        list(coco.coco_items(io.BytesIO(_coco("7" * 5000)), "f.json"))
    assert len(list(coco.coco_items(io.BytesIO(_coco("7" * 4000)), "f.json"))) == 3  # under the limit: read


class _CountingDecoder:
    """``json.JSONDecoder`` counting how many characters ``raw_decode`` is handed to parse."""

    def __init__(self) -> None:
        self.parsed = 0
        self._decoder = json.JSONDecoder()

    def raw_decode(self, text: str, pos: int):
        self.parsed += len(text) - pos
        return self._decoder.raw_decode(text, pos)


def test_one_long_coco_entry_is_parsed_in_time_linear_in_its_length(monkeypatch):
    entry = json.dumps({"id": 1, "file_name": "a.jpg", "notes": "n" * (512 << 10)})
    data = ('{"images": [' + entry + '], "categories": []}').encode()
    counting = _CountingDecoder()
    monkeypatch.setattr(coco, "_DECODER", counting)
    monkeypatch.setattr(coco, "_CHUNK", 1 << 10)
    (item,) = coco.coco_items(io.BytesIO(data), "f.json")
    assert item[2]["notes"] == "n" * (512 << 10)
    # Each retry reads as much again as it holds: a few passes over the entry, not one per chunk (512 here).
    assert counting.parsed < 8 * len(data), counting.parsed


def test_a_coco_entry_over_its_bound_is_an_error_naming_the_file(monkeypatch):
    monkeypatch.setattr(coco, "MAX_ENTRY_CHARS", 1 << 20)
    data = ('{"images": [{"id": 1, "file_name": "' + "n" * (2 << 20) + '"}], "categories": []}').encode()
    with pytest.raises(ManifestError, match=r"f\.json: not valid JSON: an entry longer than 1048576 characters"):
        list(coco.coco_items(io.BytesIO(data), "f.json"))


def test_a_coco_box_of_numbers_json_reads_as_infinite_is_a_bad_box():
    data = _coco("1").replace(b"[1, 1, 2, 2]", b"[1e999999, 1, 2, 2]")
    entries = list(coco_entries(data.decode(), "f.json", None, _RULES))
    (dead,) = [e for e in entries if isinstance(e, DeadLetter)]
    assert dead.reason == "bad_box" and "finite" in dead.error, dead
