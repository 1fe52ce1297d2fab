"""Tests for transforms.tfrecord_source: split tests with source_test_utils, and pipelines."""

from __future__ import annotations

import os
import random

import apache_beam as beam
import pytest
from apache_beam.io import source_test_utils
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.tfrecord.test_record_ranges import FILES, _starts
from tests.tfrecord_fixtures import write_file, write_tfrecords
from transforms.errors import RecordError
from transforms.tfrecord.framing import frame_record
from transforms.tfrecord_source import (ERRORS, ReadAllFromTFRecords, ReadFromTFRecords,
                                        _ReadSettings, _TFRecordSource)

# Run pipelines in-process; the default DirectRunner first tries to fetch Prism.
RUNNER = "FnApiRunner"


def _pipeline() -> beam.Pipeline:
    return test_pipeline.TestPipeline(runner=RUNNER)


def _file_source(path: str, **settings) -> beam.io.iobase.BoundedSource:
    """The single-file source of ``path`` (what the runner reads and splits)."""
    bundles = list(_TFRecordSource((path,), _ReadSettings(**settings)).split(1 << 40))
    assert len(bundles) == 1
    return bundles[0].source


@pytest.fixture(params=sorted(FILES))
def records(request) -> list[bytes]:
    return FILES[request.param]


# --- Split tests -----------------------------------------------------------------------


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "idx"])
def test_split_at_fraction_exhaustive(tmp_path, records: list[bytes], indexed: bool) -> None:
    path = str(tmp_path / "a.tfrecord")
    write_tfrecords(path, records, index=indexed)
    source = _file_source(path)
    assert source_test_utils.read_from_source(source) == records
    source_test_utils.assert_split_at_fraction_exhaustive(source, perform_multi_threaded_test=False)


def test_split_at_fraction_exhaustive_multi_threaded(tmp_path) -> None:
    path = str(tmp_path / "a.tfrecord")
    write_tfrecords(path, FILES["lookalikes"][:5], index=False)
    source_test_utils.assert_split_at_fraction_exhaustive(_file_source(path))


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "idx"])
def test_initial_splits_equal_the_whole_file(tmp_path, records: list[bytes], indexed: bool) -> None:
    path = str(tmp_path / "a.tfrecord")
    write_tfrecords(path, records, index=indexed)
    source = _file_source(path)
    size = os.path.getsize(path)
    for desired in (1, 7, 16, 50, size // 2, size):
        bundles = [(b.source, b.start_position, b.stop_position) for b in source.split(desired)]
        assert [b[1] for b in bundles] + [size] == [0] + [b[2] for b in bundles]
        assert len(bundles) >= size // desired
        source_test_utils.assert_sources_equal_reference_source((source, None, None), bundles)


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "idx"])
def test_split_at_every_position_of_a_record(tmp_path, indexed: bool) -> None:
    records = FILES["lookalikes"]
    path = str(tmp_path / "a.tfrecord")
    write_tfrecords(path, records, index=indexed)
    source = _file_source(path)
    size = os.path.getsize(path)
    for position in range(1, size):
        primary, residual = (source, 0, position), (source, position, size)
        got = (source_test_utils.read_from_source(*primary)
               + source_test_utils.read_from_source(*residual))
        assert got == records, position


@pytest.mark.parametrize("suffix, compression", [(".gz", "gzip"), (".zz", "zlib")])
def test_compressed_files_are_read_whole(tmp_path, suffix: str, compression: str) -> None:
    records = FILES["plain"]
    path = str(tmp_path / f"a.tfrecord{suffix}")
    write_tfrecords(path, records, compression)
    source = _file_source(path)
    assert len(list(source.split(1))) == 1
    assert source_test_utils.read_from_source(source) == records
    tracker = source.get_range_tracker(None, None)
    reader = iter(source.read(tracker))
    assert next(reader) == records[0]
    assert tracker.try_split(5) is None  # dynamic splits are refused too
    assert [records[0], *reader] == records


def test_compression_argument_overrides_the_suffix(tmp_path) -> None:
    path = str(tmp_path / "a.data")
    write_tfrecords(path, FILES["plain"], "gzip")
    assert source_test_utils.read_from_source(_file_source(path, compression="gzip")) == FILES["plain"]


def test_stale_index_is_ignored(tmp_path) -> None:
    records = FILES["plain"][:5]
    path = str(tmp_path / "a.tfrecord")
    write_tfrecords(path, records)
    write_file(path + ".idx", b"0 16\n")  # describes a different file
    source = _file_source(path)
    assert source_test_utils.read_from_source(source) == records
    source_test_utils.assert_split_at_fraction_exhaustive(source, perform_multi_threaded_test=False)


def test_damaged_record_raises_with_file_and_offset(tmp_path) -> None:
    records = FILES["plain"]
    path = str(tmp_path / "a.tfrecord")
    data = bytearray(write_tfrecords(path, records))
    damaged_at = _starts(records)[4]
    data[damaged_at + 20] ^= 1
    write_file(path, bytes(data))
    with pytest.raises(RecordError) as caught:
        source_test_utils.read_from_source(_file_source(path))
    assert (caught.value.path, caught.value.offset, caught.value.kind) == (path, damaged_at, "crc_mismatch")
    assert f"{path} at byte {damaged_at}" in str(caught.value)


# --- Pipelines -------------------------------------------------------------------------


def _shards(tmp_path, count: int = 3, seed: int = 0) -> dict[str, list[bytes]]:
    rng = random.Random(seed)
    out = {}
    for i in range(count):
        path = str(tmp_path / f"train-{i:05d}-of-{count:05d}.tfrecord")
        records = [rng.randbytes(rng.randrange(1, 3000)) for _ in range(40)]
        write_tfrecords(path, records, index=i != 1)
        out[path] = records
    return out


def test_read_from_pattern_with_offsets(tmp_path) -> None:
    shards = _shards(tmp_path)
    expected = [(path, offset, record) for path, records in shards.items()
                for offset, record in zip(_starts(records), records)]
    with _pipeline() as p:
        got = p | ReadFromTFRecords(str(tmp_path / "*.tfrecord"), with_offsets=True)
        assert_that(got, equal_to(expected))


def test_read_from_list_of_paths_and_read_all(tmp_path) -> None:
    shards = _shards(tmp_path)
    paths = sorted(shards)
    all_records = [r for records in shards.values() for r in records]
    with _pipeline() as p:
        listed = p | "ReadList" >> ReadFromTFRecords(paths[:2] + paths[:1])
        assert_that(listed, equal_to(shards[paths[0]] + shards[paths[1]]), label="CheckList")
        read_all = (p | "Patterns" >> beam.Create([str(tmp_path / "*-00000-*.tfrecord"),
                                                   str(tmp_path / "*-0000[12]-*.tfrecord"),
                                                   str(tmp_path / "nothing*")])
                    | "ReadAll" >> ReadAllFromTFRecords())
        assert_that(read_all, equal_to(all_records), label="CheckAll")


def test_errors_output_holds_the_damaged_record(tmp_path) -> None:
    shards = _shards(tmp_path)
    path = sorted(shards)[1]  # the shard without an index
    records = shards[path]
    data = bytearray(open(path, "rb").read())
    damaged_at = _starts(records)[30]
    data[damaged_at + 3] ^= 0x80  # in the length field
    write_file(path, bytes(data))
    with _pipeline() as p:
        read = p | ReadFromTFRecords(str(tmp_path / "*.tfrecord"), errors="output")
        errors = read[ERRORS] | beam.Map(lambda e: (e.path, e.offset, e.kind))
        assert_that(errors, equal_to([(path, damaged_at, "crc_mismatch")]), label="CheckErrors")
        counted = read.records | beam.combiners.Count.Globally()
        # Everything before the damaged record, and nothing after it in its range.
        assert_that(counted, lambda n: _check_between(n[0], 80 + 30, 120 - 1), label="CheckRecords")


def _check_between(value: int, low: int, high: int) -> None:
    assert low <= value <= high, value


def test_errors_raise_fails_the_pipeline_naming_the_record(tmp_path) -> None:
    path = str(tmp_path / "a.tfrecord")
    write_file(path, frame_record(b"good") + frame_record(b"cut")[:-3])
    with pytest.raises(Exception, match=r"a\.tfrecord at byte 20"):
        with _pipeline() as p:
            _ = p | ReadFromTFRecords(path)


def test_missing_pattern_fails_at_construction(tmp_path) -> None:
    with pytest.raises(OSError, match="no files match"):
        ReadFromTFRecords(str(tmp_path / "none-*.tfrecord"))
    with pytest.raises(ValueError, match="errors must be"):
        ReadFromTFRecords(str(tmp_path), validate=False, errors="ignore")


@pytest.mark.parametrize("compression_type, suffix", [
    (CompressionTypes.UNCOMPRESSED, ""), (CompressionTypes.GZIP, ".gz"),
    (CompressionTypes.DEFLATE, ".deflate"),
])
def test_reads_files_written_by_beam_write_to_tfrecord(tmp_path, compression_type, suffix) -> None:
    records = [b"record-%d" % i * (i % 7 + 1) for i in range(200)]
    prefix = str(tmp_path / "beam")
    with _pipeline() as p:
        _ = (p | beam.Create(records)
             | beam.io.WriteToTFRecord(prefix, file_name_suffix=".tfrecord" + suffix,
                                       compression_type=compression_type, num_shards=2))
    with _pipeline() as p:
        got = p | ReadFromTFRecords(prefix + "*")
        assert_that(got, equal_to(records))


def test_matched_files_are_read_as_matched_never_matched_again(tmp_path) -> None:
    """``b[1].tfrecord`` beside ``b1.tfrecord``: given as FileMetadata, each is read once."""
    from apache_beam.io.filesystem import FileMetadata
    from apache_beam.io.filesystems import FileSystems

    plain, bracket = [b"one", b"two"], [b"three", b"four", b"five"]
    write_tfrecords(str(tmp_path / "b1.tfrecord"), plain, index=False)
    write_tfrecords(str(tmp_path / "b[1].tfrecord"), bracket, index=False)
    matched = FileSystems.match([str(tmp_path / "*.tfrecord")])[0].metadata_list
    assert len(matched) == 2
    literal = str(tmp_path / "b[1].tfrecord")
    with _pipeline() as p:
        listed = p | "ReadMatched" >> ReadFromTFRecords(matched)
        assert_that(listed, equal_to(plain + bracket), label="CheckMatched")
        named = p | "ReadNamed" >> ReadFromTFRecords(literal)  # names a file: that file
        assert_that(named, equal_to(bracket), label="CheckNamed")
        read_all = (p | "Metadata" >> beam.Create([FileMetadata(literal, os.path.getsize(literal))])
                    | "ReadAll" >> ReadAllFromTFRecords())
        assert_that(read_all, equal_to(bracket), label="CheckAll")


@pytest.mark.parametrize("suffix", [".tfrecord.gz", ".tfrecord"])
def test_a_record_over_max_record_bytes_is_an_error_at_its_offset(tmp_path, suffix: str) -> None:
    """A5: the record-size limit reaches the source, for compressed and split files alike."""
    import gzip

    blob = frame_record(b"a" * 10) + frame_record(b"b" * 100) + frame_record(b"c" * 10)
    path = str(tmp_path / f"a{suffix}")
    write_file(path, gzip.compress(blob) if suffix.endswith(".gz") else blob)
    with _pipeline() as p:
        read = p | ReadFromTFRecords(path, errors="output", max_record_bytes=99)
        errors = read[ERRORS] | beam.Map(lambda e: (e.path, e.offset, e.kind))
        assert_that(errors, equal_to([(path, 26, "bad_length")]), label="CheckErrors")
        assert_that(read.records, equal_to([b"a" * 10]), label="CheckRecords")
