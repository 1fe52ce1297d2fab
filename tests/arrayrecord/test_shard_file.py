"""ArrayRecord shard files: the records written, counted and hashed, and read back."""

from __future__ import annotations

import pytest

from transforms.errors import RecordError
from transforms.tfrecord.framing import frame_record

pytest.importorskip("array_record", reason="the array_record package is not installed")

from transforms.arrayrecord.shard_file import (WRITER_OPTIONS, ArrayRecordShardWriter,  # noqa: E402
                                               read_records, record_count)


def test_records_given_whole_in_parts_or_framed_are_written_in_order(tmp_path) -> None:
    path = str(tmp_path / "a.array_record")
    writer = ArrayRecordShardWriter(path)
    writer.write(b"first", 0)
    writer.write_parts((b"sec", b"", b"ond"), (1, 2))
    writer.write_framed(frame_record(b"third"), None)
    stats = writer.close()
    assert (stats.records, stats.label_counts) == (3, {"0": 1, "1": 1, "2": 1})
    assert record_count(path) == 3
    assert list(read_records(path)) == [(0, b"first"), (1, b"second"), (2, b"third")]
    assert list(read_records(path, 1, 2)) == [(1, b"second")]


def test_the_file_says_its_options_group_size_1_uncompressed(tmp_path) -> None:
    from array_record.python.array_record_module import ArrayRecordReader

    path = str(tmp_path / "a.array_record")
    writer = ArrayRecordShardWriter(path)
    writer.write(b"x" * 1000)
    writer.close()
    options = ArrayRecordReader(path).writer_options_string().split(",")
    assert WRITER_OPTIONS == "group_size:1,uncompressed"
    assert "group_size:1" in options and "uncompressed" in options


def test_a_framed_record_whose_length_field_is_wrong_is_refused(tmp_path) -> None:
    framed = bytearray(frame_record(b"record"))
    framed[0] += 1  # the length field
    writer = ArrayRecordShardWriter(str(tmp_path / "a.array_record"))
    with pytest.raises(RecordError, match="declares another length"):
        writer.write_framed(bytes(framed))


def test_a_file_that_is_not_array_record_is_named(tmp_path) -> None:
    path = tmp_path / "x.array_record"
    path.write_bytes(b"not an array record file" * 10)
    with pytest.raises(RecordError, match="x.array_record"):
        list(read_records(str(path)))
