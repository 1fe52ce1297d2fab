"""Reliability: property-based fuzzing of everything that parses untrusted bytes or text.

Random and mutated inputs for the record reader (``framing``,
``record_ranges``, ``decompress``), the Example decoder and its text dump,
the per-record verify check, the ``.idx`` parser, the input-manifest reader
and the image inspector: each may succeed or raise the project's own error
type, nothing else. (``Manifest.loads`` is fuzzed in tests/shardset/test_manifest.py.)
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import struct
import zlib

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from tests import imagegen
from tests.tfrecord_fixtures import image_example
from transforms.images import image_codec as images
from transforms.tfrecord.compression import open_decompressed
from transforms.errors import ExampleError, ImageError, RecordError
from transforms.example.codec import decode_example
from tests.helpers import encode_example
from transforms.example.codec import format_record
from transforms.tfrecord.framing import HEADER_SIZE, frame_record, iter_records, masked_crc32c, read_record
from transforms.images.items import SourceImage
from transforms.shardset.dead_letters import DeadLetter
from transforms.images.inputs import LabelRules
from tests.helpers import manifest_entries
from transforms.tfrecord.record_index import check_index
from transforms.tfrecord.record_ranges import ByteRange, find_record_start, read_range, read_stream
from tests.helpers import read_in_ranges
from transforms.verify.checks import check_record

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- mutations ---------------------------------------------------------------------------------

def _header(length: int) -> bytes:
    """A record header with a valid length CRC, claiming ``length`` data bytes."""
    packed = struct.pack("<Q", length)
    return packed + struct.pack("<I", masked_crc32c(packed))


_edit = st.tuples(
    st.sampled_from(["flip", "cut", "insert", "delete", "header", "zeros"]),
    st.integers(0, 1 << 16), st.integers(1, 255),
    st.one_of(st.integers(0, 64), st.sampled_from([2**31, 2**32 + 5, 2**33, 2**40, 2**63, 2**64 - 1])))


def _mutate(data: bytes, edits: list[tuple[str, int, int, int]]) -> bytes:
    """Applies edits: flipped bytes, cuts, inserted/deleted bytes, valid-looking headers, zero runs."""
    out = bytearray(data)
    for action, position, byte, length in edits:
        at = position % (len(out) + 1)
        if action == "flip" and out:
            out[min(at, len(out) - 1)] ^= byte
        elif action == "cut":
            del out[at:]
        elif action == "insert":
            out[at:at] = bytes([byte]) * (length % 9 + 1)
        elif action == "delete":
            del out[at:at + byte % 17 + 1]
        elif action == "header":  # a header whose CRC is right, so only the length can be wrong
            out[at:at] = _header(length)
        elif action == "zeros":
            out[at:at + length % 65] = bytes(length % 65)
    return bytes(out)


_records = st.lists(st.binary(max_size=48), max_size=6)
_edits = st.lists(_edit, max_size=4)


@st.composite
def tfrecord_files(draw) -> bytes:
    """A TFRecord file's bytes: well framed records, then zero to four mutations."""
    data = b"".join(frame_record(r) for r in draw(_records))
    return _mutate(data, draw(_edits))


# --- record reading ---------------------------------------------------------------------------


@FUZZ
@given(tfrecord_files(), st.booleans())
def test_iter_records_raises_only_record_errors(data: bytes, size_known: bool) -> None:
    try:
        for offset, record in iter_records(io.BytesIO(data), "f", 0, len(data) if size_known else None):
            assert data[offset + HEADER_SIZE:offset + HEADER_SIZE + len(record)] == record
    except RecordError as err:
        assert err.path == "f" and 0 <= err.offset <= len(data)


@FUZZ
@given(tfrecord_files(), st.integers(0, 1 << 12), st.integers(0, 1 << 12))
def test_read_range_yields_owned_records_or_raises_record_errors(data: bytes, a: int, b: int) -> None:
    start, stop = sorted((a % (len(data) + 1), b % (len(data) + 1)))
    try:
        for offset, record in read_range(io.BytesIO(data), len(data), ByteRange(start, stop), "f"):
            assert start <= offset < stop or (start == 0 and offset == 0)
            assert data[offset + HEADER_SIZE:offset + HEADER_SIZE + len(record)] == record
    except RecordError as err:
        assert err.path == "f"


@FUZZ
@given(tfrecord_files(), st.integers(0, 1 << 12))
def test_find_record_start_finds_a_readable_record_or_the_end(data: bytes, position: int) -> None:
    position %= len(data) + 1
    found = find_record_start(io.BytesIO(data), len(data), position)
    assert position <= found <= len(data)
    if found < len(data):
        fh = io.BytesIO(data)
        fh.seek(found)
        assert read_record(fh, "f", found, len(data) - found) is not None


@FUZZ
@given(tfrecord_files(), st.lists(st.integers(1, 1 << 12), max_size=3))
def test_read_in_ranges_reports_damage_as_items(data: bytes, cuts: list[int]) -> None:
    cuts = sorted({c % len(data) for c in cuts if len(data) > 1} - {0})
    for item in read_in_ranges(io.BytesIO(data), len(data), cuts, "f"):
        assert isinstance(item, (tuple, RecordError))


@FUZZ
@given(_records, _edits, st.sampled_from(["gzip", "zlib"]), st.booleans())
def test_compressed_streams_raise_only_record_errors(records: list[bytes], edits, kind: str,
                                                     mutate_plain: bool) -> None:
    plain = b"".join(frame_record(r) for r in records)
    if mutate_plain:  # damage inside the stream, then a valid compression around it
        plain = _mutate(plain, edits)
    packed = gzip.compress(plain, mtime=0) if kind == "gzip" else zlib.compress(plain)
    if not mutate_plain:  # damage to the compressed bytes
        packed = _mutate(packed, edits)
    try:
        list(read_stream(open_decompressed(io.BytesIO(packed), kind), "f"))
    except RecordError as err:
        assert err.path == "f"


@FUZZ
@given(st.binary(max_size=200))
def test_index_parser_never_raises(data: bytes) -> None:
    check = check_index(data, len(data))
    assert check.usable == (check.kind is None)


# --- Examples ---------------------------------------------------------------------------------

_IMAGE_RECORD = image_example(1, "rose", imagegen.png("RGB", size=(6, 5)), "png", 5, 6)
_SMALL_EXAMPLE = encode_example({"id": [1, -2], "text": "x", "score": [0.5, 1e30], "blob": b"\x00\xff"})


@st.composite
def example_bytes(draw) -> bytes:
    base = draw(st.sampled_from([b"", _SMALL_EXAMPLE, _IMAGE_RECORD, b"\n\x00"]))
    if draw(st.booleans()):
        return draw(st.binary(max_size=120))
    return _mutate(base, draw(_edits))


@FUZZ
@given(example_bytes())
def test_example_decoder_raises_only_example_errors(data: bytes) -> None:
    try:
        features = decode_example(data)
    except ExampleError:
        return
    for name, (kind, values) in features.items():
        assert isinstance(name, str) and kind in ("bytes", "int64", "float", "none")
        assert isinstance(values, list)


@FUZZ
@given(example_bytes(), st.integers(0, 2**40))
def test_example_text_never_raises(data: bytes, offset: int) -> None:
    text = format_record(None, offset, data)
    assert text.startswith(f"record at byte {offset}: {len(data)} bytes")


@FUZZ
@given(example_bytes(), st.booleans())
def test_verify_record_check_reports_problems_instead_of_raising(data: bytes, decode: bool) -> None:
    check, _ = check_record("f", 7, data, schema=True, decode_images=decode)
    assert all(p.file == "f" and p.offset == 7 for p in check.problems)


# --- input manifests --------------------------------------------------------------------------

_cell = st.one_of(st.text(max_size=12), st.sampled_from(
    ["", "a.jpg", "../x.jpg", "/abs/y.png", "s3://b/k.jpg", "train", "../evil", "x" * 300, '"', "\r", "\x00"]))


@st.composite
def csv_manifests(draw) -> str:
    header = draw(st.sampled_from([["path", "label"], ["path", "label", "split"], ["label", "path"],
                                   ["path"], ["path", "label", "split", "extra"]]))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=draw(st.sampled_from(["\n", "\r\n", "\r"])))
    writer.writerow(header)
    for _ in range(draw(st.integers(0, 5))):
        writer.writerow([draw(_cell) for _ in range(draw(st.integers(0, len(header) + 1)))])
    text = out.getvalue()
    if draw(st.booleans()):
        text = _mutate(text.encode("utf-8"), draw(_edits)).decode("utf-8", "replace")
    return text


_json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 2**70), st.floats(allow_nan=True), _cell),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["path", "label", "split", "x"]), inner, max_size=4),
    max_leaves=8)


@st.composite
def jsonl_manifests(draw) -> str:
    lines = [json.dumps(draw(_json_value), ensure_ascii=draw(st.booleans()))
             for _ in range(draw(st.integers(0, 5)))]
    text = "\n".join(lines) + "\n"
    if draw(st.booleans()):
        text = _mutate(text.encode("utf-8"), draw(_edits)).decode("utf-8", "replace")
    return text


def _entries(text: str, name: str) -> list:
    entries = list(manifest_entries(text, name, LabelRules()))
    assert all(isinstance(e, (SourceImage, DeadLetter)) for e in entries)
    return entries


@FUZZ
@given(st.one_of(csv_manifests(), st.text(max_size=200)))
def test_csv_manifest_rows_are_entries_or_dead_letters(text: str) -> None:
    _entries(text, "dir/list.csv")


@FUZZ
@given(st.one_of(jsonl_manifests(), st.text(max_size=200)))
def test_every_jsonl_line_is_one_entry_or_one_dead_letter(text: str) -> None:
    entries = _entries(text, "dir/list.jsonl")
    assert len(entries) == sum(1 for line in text.split("\n") if line.strip())  # none lost, none doubled


def test_manifest_reader_edge_cases_are_dead_letters() -> None:
    cases = {
        "lone_cr.csv": "path,label\ra.jpg,rose\rb.jpg,tulip\r",
        "huge_field.csv": "path,label\na.jpg," + "x" * 200_000 + "\nb.jpg,rose\n",
        "deep.jsonl": "[" * 100_000 + "\n" + json.dumps({"path": "b.jpg", "label": "rose"}) + "\n",
        "separators.jsonl": json.dumps({"path": "a\u2028.jpg", "label": "rose\u0085"}, ensure_ascii=False) + "\n",
    }
    got = {name: [(type(e).__name__, getattr(e, "reason", e.path)) for e in _entries(text, name)]
           for name, text in cases.items()}
    assert got == {
        "lone_cr.csv": [("SourceImage", "./a.jpg"), ("SourceImage", "./b.jpg")],
        "huge_field.csv": [("DeadLetter", "bad_manifest_row"), ("SourceImage", "./b.jpg")],
        "deep.jsonl": [("DeadLetter", "bad_manifest_row"), ("SourceImage", "./b.jpg")],
        "separators.jsonl": [("DeadLetter", "bad_label")],
    }


# --- images -----------------------------------------------------------------------------------

_SOURCES = {
    "jpeg": imagegen.jpeg("RGB", size=(16, 12)),
    "jpeg_cmyk": imagegen.jpeg("CMYK", size=(8, 8)),
    "jpeg_exif": imagegen.jpeg("RGB", size=(8, 6), exif_orientation=6),
    "png": imagegen.png("RGBA", size=(10, 7)),
    "png_palette": imagegen.png("P", size=(9, 9), transparency=True),
    "gif": imagegen.gif_animated(2, size=(8, 6)),
    "bmp": imagegen.bmp(size=(6, 4)),
    "tiff": imagegen.tiff(size=(6, 4)),
    "webp": imagegen.webp(size=(6, 4)),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow warns about corrupt EXIF and short reads
@FUZZ
@given(st.sampled_from(sorted(_SOURCES)), _edits, st.sampled_from(images.VALIDATE_LEVELS))
def test_inspect_image_raises_only_image_errors(name: str, edits, level: str) -> None:
    data = _mutate(_SOURCES[name], edits)
    try:
        info = images.read_image_info(data, level)
    except ImageError as err:
        assert err.reason and err.detail is not None
        return
    assert info.height > 0 and info.width > 0 and info.channels in (1, 2, 3, 4)


@pytest.mark.filterwarnings("ignore::UserWarning")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(_SOURCES)), _edits, st.sampled_from(["jpeg", "png", "raw"]), st.booleans())
def test_image_conversion_raises_only_image_errors(name: str, edits, target: str, grayscale: bool) -> None:
    data = _mutate(_SOURCES[name], edits)
    assume(data != _SOURCES[name])
    try:
        if target == "raw":
            pixels, info = images.raw_pixels(data, grayscale=grayscale, resize=(5, 4))
            assert len(pixels) == 5 * 4 * info.channels
        else:
            images.reencode_image(data, target, grayscale=grayscale)
    except ImageError:
        return
