"""Unit tests for transforms.tfrecord.framing: TFRecord record layout, CRCs and damage detection.

Expected bytes are built here from a table-driven pure-Python CRC32C, independent of
the ``crc32c`` package the module uses, and a few framings are pinned as literal hex.
"""

from __future__ import annotations

import io
import pickle
import struct
import tracemalloc

import pytest

from tests.helpers import check_record_at
from transforms.tfrecord import framing
from transforms.errors import RecordError

# --- Independent reference: CRC32C (Castagnoli, reflected polynomial 0x82F63B78) ---


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def ref_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def ref_mask(crc: int) -> int:
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    return (rotated + 0xA282EAD8) & 0xFFFFFFFF


def ref_header(length: int) -> bytes:
    """A 12-byte header declaring ``length`` with a correct masked CRC."""
    field = struct.pack("<Q", length)
    return field + struct.pack("<I", ref_mask(ref_crc32c(field)))


def ref_frame(data: bytes) -> bytes:
    return ref_header(len(data)) + data + struct.pack("<I", ref_mask(ref_crc32c(data)))


# Deterministic pseudo-random payload (no RNG state shared with other tests).
_PAYLOAD_1K = bytes((i * 131 + 7) % 251 for i in range(1000))

# --- The reference itself -----------------------------------------------------


@pytest.mark.parametrize(
    "data, crc",
    [
        (b"", 0x00000000),
        (b"123456789", 0xE3069283),  # the standard CRC-32C check value
        (bytes(32), 0x8A9136AA),  # RFC 3720 B.4 test vectors
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
        (bytes(range(31, -1, -1)), 0x113FDB5C),
    ],
)
def test_reference_crc32c_matches_published_vectors(data: bytes, crc: int) -> None:
    assert ref_crc32c(data) == crc


# --- Masked CRC and framing against the reference ------------------------------

_DATA_TABLE = [
    b"",
    b"\x00",
    b"a",
    b"hello",
    bytes(8),
    bytes(range(256)),
    _PAYLOAD_1K,
]


@pytest.mark.parametrize("data", _DATA_TABLE, ids=lambda d: f"{len(d)}B")
def test_masked_crc32c_matches_reference(data: bytes) -> None:
    assert framing.masked_crc32c(data) == ref_mask(ref_crc32c(data))
    assert framing.masked_crc32c(memoryview(data)) == ref_mask(ref_crc32c(data))


@pytest.mark.parametrize("data", _DATA_TABLE, ids=lambda d: f"{len(d)}B")
def test_frame_record_matches_reference(data: bytes) -> None:
    framed = framing.frame_record(data)
    assert framed == ref_frame(data)
    assert len(framed) == framing.framed_size(len(data)) == len(data) + 16


def test_mask_of_zero_crc_is_the_mask_delta() -> None:
    # masked(crc32c(b"")) = masked(0) = 0xa282ead8: the footer of every empty record.
    assert framing.masked_crc32c(b"") == 0xA282EAD8


@pytest.mark.parametrize(
    "data, golden_hex",
    [
        (b"", "0000000000000000" "29039807" "" "d8ea82a2"),
        (b"hello", "0500000000000000" "eab2043e" "68656c6c6f" "bb1f1c19"),
    ],
)
def test_frame_record_golden_bytes(data: bytes, golden_hex: str) -> None:
    assert framing.frame_record(data).hex() == golden_hex
    assert ref_frame(data).hex() == golden_hex


def test_constants() -> None:
    assert (framing.HEADER_SIZE, framing.FOOTER_SIZE, framing.OVERHEAD) == (12, 4, 16)


# --- parse_header ---------------------------------------------------------------


@pytest.mark.parametrize("length", [0, 1, 5, 2**32, 2**63, 2**64 - 1])
def test_parse_header_returns_declared_length(length: int) -> None:
    assert framing.parse_header(ref_header(length)) == length


@pytest.mark.parametrize("position", range(12))
def test_parse_header_rejects_any_flipped_byte(position: int) -> None:
    header = bytearray(ref_header(5))
    header[position] ^= 0x01
    assert framing.parse_header(bytes(header)) is None


# --- read_record / iter_records: good files ------------------------------------

_RECORDS = [b"", b"a", b"hello", bytes(300), _PAYLOAD_1K, b"\xff" * 17]


def _file_of(records: list[bytes]) -> bytes:
    return b"".join(ref_frame(r) for r in records)


def _offsets_of(records: list[bytes]) -> list[int]:
    offsets, offset = [], 0
    for record in records:
        offsets.append(offset)
        offset += len(record) + 16
    return offsets


@pytest.mark.parametrize("size_known", [True, False], ids=["size", "stream"])
def test_iter_records_yields_every_record_with_its_offset(size_known: bool) -> None:
    blob = _file_of(_RECORDS)
    got = list(framing.iter_records(io.BytesIO(blob), "f", 0, len(blob) if size_known else None))
    assert got == list(zip(_offsets_of(_RECORDS), _RECORDS))


@pytest.mark.parametrize("skip", range(len(_RECORDS) + 1))
def test_iter_records_from_a_middle_start(skip: int) -> None:
    blob = _file_of(_RECORDS)
    start = _offsets_of(_RECORDS + [b""])[skip]
    fh = io.BytesIO(blob)
    fh.seek(start)
    got = list(framing.iter_records(fh, "f", start, len(blob)))
    assert got == list(zip(_offsets_of(_RECORDS), _RECORDS))[skip:]


def test_empty_file_has_no_records() -> None:
    assert list(framing.iter_records(io.BytesIO(b""), "f", 0, 0)) == []
    assert list(framing.iter_records(io.BytesIO(b""), "f", 0, None)) == []
    assert framing.read_record(io.BytesIO(b"")) is None


def test_read_record_reads_one_record_and_stops_at_eof() -> None:
    fh = io.BytesIO(_file_of([b"hello", b"world!"]))
    assert framing.read_record(fh) == b"hello"
    assert framing.read_record(fh, offset=21) == b"world!"
    assert framing.read_record(fh, offset=43) is None


# --- Damage: a corrupted byte at every position ---------------------------------

_LEAD = ref_frame(b"ab")  # an intact record first, so the damaged one is at offset 18
_VICTIM = ref_frame(b"hello")
_VICTIM_OFFSET = len(_LEAD)


def _corrupt_cases() -> list[tuple[int, int]]:
    return [(pos, xor) for pos in range(len(_VICTIM)) for xor in (0x01, 0x80, 0xFF)]


def _region(pos: int) -> str:
    if pos < 8:
        return "length"
    if pos < 12:
        return "length_crc"
    if pos < 12 + 5:
        return "data"
    return "data_crc"


@pytest.mark.parametrize("size_known", [True, False], ids=["size", "stream"])
@pytest.mark.parametrize("pos, xor", _corrupt_cases())
def test_corrupted_byte_at_every_position_is_a_crc_mismatch(pos: int, xor: int, size_known: bool) -> None:
    victim = bytearray(_VICTIM)
    victim[pos] ^= xor
    blob = _LEAD + bytes(victim) + ref_frame(b"after")
    it = framing.iter_records(io.BytesIO(blob), "shard-0.tfrecord", 0, len(blob) if size_known else None)
    assert next(it) == (0, b"ab")
    with pytest.raises(RecordError) as info:
        next(it)
    err = info.value
    # A single damaged byte in the length field always breaks the length CRC (CRC32C
    # detects every burst of <= 32 bits), so it is never mistaken for a bad length.
    assert err.kind == "crc_mismatch", (_region(pos), err)
    assert err.offset == _VICTIM_OFFSET
    assert err.path == "shard-0.tfrecord"
    assert "shard-0.tfrecord at byte 18" in str(err)
    if _region(pos) in ("length", "length_crc"):
        assert "length field" in err.detail
    else:
        assert "data of 5 bytes" in err.detail


def _relabelled(declared: int) -> bytes:
    """The victim record with its length field rewritten to ``declared`` and a valid header CRC."""
    return ref_header(declared) + _VICTIM[12:]


# (declared length, size known?) -> kind. The victim really holds 5 data bytes and is
# followed only by the end of the file: 9 bytes of data+crc are available after its header.
@pytest.mark.parametrize(
    "declared, size_known, kind",
    [
        (0, True, "crc_mismatch"),  # reads b"" + b"hell" as its crc
        (1, True, "crc_mismatch"),
        (4, True, "crc_mismatch"),
        (0, False, "crc_mismatch"),
        (4, False, "crc_mismatch"),
        (6, True, "bad_length"),  # one byte more than the file holds
        (6, False, "truncated"),
        (100, True, "bad_length"),
        (100, False, "truncated"),
        (2**32, True, "bad_length"),
        (2**32, False, "bad_length"),  # over the record-size limit: no data is read
    ],
)
def test_rewritten_length_with_valid_crc(declared: int, size_known: bool, kind: str) -> None:
    blob = _LEAD + _relabelled(declared)
    it = framing.iter_records(io.BytesIO(blob), "f", 0, len(blob) if size_known else None)
    assert next(it) == (0, b"ab")
    with pytest.raises(RecordError) as info:
        next(it)
    assert (info.value.kind, info.value.offset) == (kind, _VICTIM_OFFSET)


def test_rewritten_length_equal_to_the_real_one_reads_fine() -> None:
    assert _relabelled(5) == _VICTIM
    assert framing.read_record(io.BytesIO(_relabelled(5)), remaining=21) == b"hello"


# --- Truncation at every length ---------------------------------------------------


@pytest.mark.parametrize("size_known", [True, False], ids=["size", "stream"])
@pytest.mark.parametrize("cut", range(1, len(_VICTIM)))
def test_truncated_at_every_length(cut: int, size_known: bool) -> None:
    blob = _LEAD + _VICTIM[:cut]
    it = framing.iter_records(io.BytesIO(blob), "f", 0, len(blob) if size_known else None)
    assert next(it) == (0, b"ab")
    with pytest.raises(RecordError) as info:
        next(it)
    if cut < 12:
        expected = "truncated"  # inside the header
    else:
        # With the size known the declared length is checked before any data is read.
        expected = "bad_length" if size_known else "truncated"
    assert (info.value.kind, info.value.offset) == (expected, _VICTIM_OFFSET)


def test_cut_exactly_between_records_is_a_clean_end() -> None:
    blob = _LEAD
    assert list(framing.iter_records(io.BytesIO(blob), "f", 0, len(blob))) == [(0, b"ab")]


# --- Huge CRC-valid lengths are rejected without allocating them --------------------

_HUGE = [2**33, 2**40, 2**63, 2**64 - 1]


def _peak_while(fn) -> tuple[BaseException, int]:
    tracemalloc.start()
    try:
        with pytest.raises(RecordError) as info:
            fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return info.value, peak


@pytest.mark.parametrize("length", _HUGE)
def test_huge_length_with_known_remaining_is_bad_length(length: int) -> None:
    blob = ref_header(length) + b"short body"
    err, peak = _peak_while(lambda: framing.read_record(io.BytesIO(blob), "big", 4096, len(blob)))
    assert (err.kind, err.offset, err.path) == ("bad_length", 4096, "big")
    assert str(length) in err.detail
    assert peak < 10 * 1024 * 1024


@pytest.mark.parametrize("length", _HUGE)
def test_huge_length_in_a_stream_is_bad_length_without_big_allocation(length: int) -> None:
    blob = ref_frame(b"ok") + ref_header(length) + b"short body"
    err, peak = _peak_while(lambda: list(framing.iter_records(io.BytesIO(blob), "gz", 0, None)))
    assert (err.kind, err.offset) == ("bad_length", 18)
    assert "--max_record_mb" in err.detail
    assert peak < 10 * 1024 * 1024


class _ZeroStream(io.RawIOBase):
    """A stream of ``size`` zero bytes after ``head``, made as it is read (an inflating gzip bomb)."""

    def __init__(self, head: bytes, size: int) -> None:
        self._head, self._left = head, size

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self._head:
            out, self._head = self._head[:n], self._head[n:]
            return out
        n = min(n, self._left)
        self._left -= n
        return bytes(n)


def test_a_stream_whose_header_claims_3_gib_is_bad_length_before_reading_its_data() -> None:
    """A5: the stream holds 300 MB after a header claiming 3 GiB; none of it is read into memory."""
    stream = _ZeroStream(ref_frame(b"ok") + ref_header(3 << 30), 300 << 20)
    err, peak = _peak_while(lambda: list(framing.iter_records(stream, "bomb.gz", 0, None)))
    assert (err.path, err.offset, err.kind) == ("bomb.gz", 18, "bad_length")
    assert str(3 << 30) in err.detail
    assert peak < 10 * 1024 * 1024


@pytest.mark.parametrize("size_known", [True, False], ids=["size", "stream"])
def test_max_length_is_the_largest_record_read(size_known: bool) -> None:
    blob = ref_frame(b"ok") + ref_frame(bytes(100))
    size = len(blob) if size_known else None
    assert [d for _, d in framing.iter_records(io.BytesIO(blob), "f", 0, size, max_length=100)] == [
        b"ok", bytes(100)]
    it = framing.iter_records(io.BytesIO(blob), "f", 0, size, max_length=99)
    assert next(it) == (0, b"ok")
    with pytest.raises(RecordError) as info:
        next(it)
    assert (info.value.kind, info.value.offset) == ("bad_length", 18)
    assert "99-byte record-size limit" in info.value.detail


@pytest.mark.parametrize("length", _HUGE)
def test_huge_length_via_iter_records_with_size(length: int) -> None:
    blob = ref_frame(b"ok") + ref_header(length) + bytes(64)
    err, peak = _peak_while(lambda: list(framing.iter_records(io.BytesIO(blob), "f", 0, len(blob))))
    assert (err.kind, err.offset) == ("bad_length", 18)
    assert peak < 10 * 1024 * 1024


# --- check_record_at ----------------------------------------------------------------


def test_check_record_at_finds_exactly_the_record_starts() -> None:
    blob = _file_of(_RECORDS)
    found = {pos: check_record_at(blob, pos, len(blob)) for pos in range(len(blob))}
    hits = {pos: length for pos, length in found.items() if length is not None}
    assert hits == {off: len(r) for off, r in zip(_offsets_of(_RECORDS), _RECORDS)}


def test_check_record_at_uses_base_for_the_fit_check() -> None:
    blob = _file_of(_RECORDS)
    start = _offsets_of(_RECORDS)[2]  # b"hello" at offset 17
    window = memoryview(blob)[start - 3:]
    assert check_record_at(window, 3, len(blob), base=start - 3) == 5
    # Pretending the window starts later in the file makes the record overrun the file.
    assert check_record_at(window, 3, len(blob), base=len(blob) - 20) is None


@pytest.mark.parametrize(
    "buf, pos, file_size, expected",
    [
        (ref_frame(b"hello"), 0, 21, 5),  # fits exactly
        (ref_frame(b"hello"), 0, 20, None),  # file one byte too short
        (ref_frame(b"hello")[:12], 0, 21, 5),  # only the header needs to be in buf
        (ref_frame(b"hello")[:11], 0, 21, None),  # header not entirely in buf
        (ref_frame(b"hello"), 1, 21, None),  # not a record start
        (b"\x00" * 40, 0, 40, None),  # zeros: length 0 but wrong crc
        (ref_header(2**64 - 1) + bytes(4), 0, 16, None),  # crc-valid but cannot fit
        (bytes([0x06]) + ref_frame(b"hello")[1:], 0, 21, None),  # damaged length
        (b"xx" + ref_frame(b""), 2, 18, 0),
    ],
)
def test_check_record_at_table(buf: bytes, pos: int, file_size: int, expected: int | None) -> None:
    assert check_record_at(buf, pos, file_size) == expected


# --- RecordError ------------------------------------------------------------------------


def test_record_error_survives_pickling_with_its_fields() -> None:
    err = RecordError("gs://b/x.tfrecord", 123, "crc_mismatch", "data of 5 bytes ...")
    back = pickle.loads(pickle.dumps(err))
    assert (back.path, back.offset, back.kind, back.detail) == (err.path, 123, "crc_mismatch", err.detail)
    assert str(back) == str(err) == "crc_mismatch: gs://b/x.tfrecord at byte 123: data of 5 bytes ..."


@pytest.mark.parametrize("head, like", [
    (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00", "a JPEG image"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "a PNG image"),
    (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03abc", "gzip data"),
])
def test_a_file_that_is_not_a_tfrecord_file_says_so(head: bytes, like: str) -> None:
    with pytest.raises(RecordError) as caught:
        framing.read_record(io.BytesIO(head), "x", 0, len(head))
    assert caught.value.kind == "not_tfrecord"
    assert f"not a TFRecord file: it starts like {like}" in str(caught.value)


def test_a_bad_first_header_without_a_known_signature_is_a_crc_mismatch() -> None:
    data = b"\x05\x00\x00\x00\x00\x00\x00\x00" + b"\x00" * 12
    with pytest.raises(RecordError) as caught:
        framing.read_record(io.BytesIO(data), "x", 0, len(data))
    assert caught.value.kind == "crc_mismatch" and "or is not a TFRecord file" in str(caught.value)
