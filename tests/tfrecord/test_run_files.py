"""Run files: records framed once where the image is read, copied into shards as they are."""

from __future__ import annotations

import io
import pickle
import threading

import pytest

from transforms.errors import RecordError
from transforms.storage.files import RangeReader
from transforms.images.image_codec import ImageInfo
from transforms.images.items import ImageMeta, SourceImage
from transforms.tfrecord.framing import frame_record, iter_records
from transforms.tfrecord.run_files import RunFileWriter, RunSlice, checked_record
from transforms.tfrecord.shard_writer import ShardWriter

RECORDS = [b"", b"a", b"\x00" * 1000, bytes(range(256)) * 300]


def _run_file(tmp_path) -> tuple[str, list[RunSlice]]:
    path = str(tmp_path / "r.run")
    with open(path, "wb") as fh:
        writer = RunFileWriter(fh, path)
        slices = [writer.append((data[:1], data[1:])) for data in RECORDS]
    return path, slices


def test_a_run_file_holds_the_framed_records_where_their_slices_say(tmp_path):
    path, slices = _run_file(tmp_path)
    data = open(path, "rb").read()
    assert [r for _, r in iter_records(io.BytesIO(data))] == RECORDS
    assert [data[s.offset:s.offset + s.length] for s in slices] == [frame_record(r) for r in RECORDS]
    assert slices[0].offset == 0 and sum(s.length for s in slices) == len(data)


@pytest.mark.parametrize("where", [0, 9, 12, -1])
def test_a_damaged_record_in_a_run_file_is_refused(where):
    framed = bytearray(frame_record(b"some image bytes"))
    framed[where] ^= 0x10
    with pytest.raises(RecordError):
        checked_record(bytes(framed), RunSlice("r.run", 0, len(framed)))


def test_a_short_read_from_a_run_file_is_refused():
    framed = frame_record(b"some image bytes")
    with pytest.raises(RecordError, match="truncated"):
        checked_record(framed[:-1], RunSlice("r.run", 0, len(framed)))
    assert checked_record(framed, RunSlice("r.run", 0, len(framed))) == framed


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_copying_framed_records_writes_the_same_shard_as_framing_them(compression):
    big = [bytes([i % 251]) * (700_000 + i) for i in range(8)]  # crosses the writer's flush size
    outputs = []
    for framed in (False, True):
        fh, index = io.BytesIO(), io.BytesIO()
        writer = ShardWriter(fh, compression, index if compression == "none" else None)
        for i, record in enumerate(RECORDS + big):
            if framed:
                writer.write_framed(frame_record(record), i % 3)
            else:
                writer.write_parts((record[:5], record[5:]), i % 3)
        stats = writer.close()
        outputs.append((fh.getvalue(), index.getvalue(), stats))
    assert outputs[0] == outputs[1]


def test_range_reader_reads_ranges_from_many_threads(tmp_path):
    path, slices = _run_file(tmp_path)
    reader = RangeReader(max_open=1)
    other = tmp_path / "other"
    other.write_bytes(b"x" * 100)
    wrong = []

    def work():
        for _ in range(50):
            for s, record in zip(slices, RECORDS):
                if reader.read(path, s.offset, s.length) != frame_record(record):
                    wrong.append(s)
                reader.read(str(other), 0, 10)  # evicts the run file: max_open is 1
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reader.close()
    assert wrong == []
    assert reader.read(path, slices[-1].offset, 10**9) == frame_record(RECORDS[-1])  # the file ends first
    reader.close()


def test_range_reader_pickles_without_its_open_files(tmp_path):
    path, slices = _run_file(tmp_path)
    reader = RangeReader()
    reader.read(path, 0, 4)
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.read(path, slices[1].offset, slices[1].length) == frame_record(RECORDS[1])
    reader.close()
    copy.close()


@pytest.mark.parametrize("run", [None, RunSlice("/tmp/.staging/x/runs/a.run", 1 << 40, 123_456)])
def test_image_meta_keeps_its_run_slice_through_pickling(run):
    meta = ImageMeta(SourceImage("/d/c/a.jpg", "c/a.jpg", "train", "c"), 1, "ab" * 32,
                     ImageInfo("jpeg", 3, 4, 3), 123_456, 7, (), run)
    assert pickle.loads(pickle.dumps(meta, pickle.HIGHEST_PROTOCOL)) == meta
