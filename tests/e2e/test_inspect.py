"""Tests of the inspect tool and the record text format it prints."""

from __future__ import annotations

import hashlib
import io

import pytest
from PIL import Image

from beam_jobs import inspect_shard as inspect_job
from tests.tfrecord_fixtures import write_file, write_shard_set, write_tfrecords
from tests.helpers import encode_example
from transforms.example.codec import format_record, format_value
from transforms.tfrecord.framing import frame_record


def _inspect(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = inspect_job.run(list(argv), out=out)
    return status, out.getvalue()


def _short(value: bytes) -> str:
    return f"<{len(value)} bytes, sha256 {hashlib.sha256(value).hexdigest()}>"


@pytest.mark.parametrize("kind, value, text", [
    ("bytes", b"rose", '"rose"'),
    ("bytes", b'say "hi"\\', '"say \\"hi\\"\\\\"'),
    ("bytes", b"\xff\x00", _short(b"\xff\x00")),
    ("bytes", b"line\nbreak", _short(b"line\nbreak")),
    ("bytes", b"a" * 65, _short(b"a" * 65)),
    ("bytes", b"a" * 64, '"' + "a" * 64 + '"'),
    ("int64", -3, "-3"),
    ("float", 0.5, "0.5"),
])
def test_format_value(kind: str, value, text: str) -> None:
    assert format_value(kind, value) == text


def test_format_record_lists_features_sorted() -> None:
    data = encode_example({"b": [1, 2], "a": "x", "c": [float(i) for i in range(10)]})
    assert format_record(3, 48, data).splitlines() == [
        f"record 3 at byte 48: {len(data)} bytes",
        '  a  bytes  ["x"]',
        "  b  int64  [1, 2]",
        "  c  float  [0, 1, 2, 3, 4, 5, 6, 7, ... (10 values)]",
    ]
    text = format_record(None, 0, b"\xff\xff")
    assert text.startswith("record at byte 0: 2 bytes\n  not a tf.train.Example")
    assert "first bytes: ff ff" in text


def test_inspect_shard_from_start_and_from_an_offset(tmp_path) -> None:
    shards = write_shard_set(str(tmp_path), splits={"train": 1}, per_shard=4)
    name = shards.shard_names[0]
    status, out = _inspect(shards.path(name), "--limit", "2")
    assert status == 0
    assert out.count("\nrecord ") + out.startswith("record ") == 2
    assert out.startswith(f"record 0 at byte 0: {len(shards.records[name][0])} bytes\n")
    assert '  image/class/text     bytes  ["daisy"]' in out
    encoded = out.split("image/encoded")[1].splitlines()[0]
    assert "bytes, sha256 " in encoded
    assert out.endswith("# stopped after 2 records (--limit); more follow\n")
    offsets = shards.record_offsets(name)
    status, out = _inspect(shards.path(name), "--offset", str(offsets[2] - 5))
    assert status == 0
    assert out.splitlines()[0] == (f"# no record starts at byte {offsets[2] - 5}; "
                                   f"the next record start is at byte {offsets[2]}")
    assert out.splitlines()[1].startswith(f"record at byte {offsets[2]}:")
    assert out.endswith("# end of file: 2 records shown\n")


@pytest.mark.parametrize("suffix, compression", [(".gz", "gzip"), (".zz", "zlib")])
def test_inspect_compressed_files(tmp_path, suffix: str, compression: str) -> None:
    records = [encode_example({"id": i}) for i in range(5)]
    path = str(tmp_path / f"a.tfrecord{suffix}")
    write_tfrecords(path, records, compression)
    status, out = _inspect(path, "--offset", "1")
    assert status == 0
    assert out.splitlines()[0] == f"record at byte {len(records[0]) + 16}: {len(records[1])} bytes"
    assert out.endswith("# end of file: 4 records shown\n")


def test_inspect_reports_a_damaged_record(tmp_path) -> None:
    path = str(tmp_path / "a.tfrecord")
    data = bytearray(frame_record(encode_example({"id": 1})) + frame_record(encode_example({"id": 2})))
    data[-2] ^= 1
    write_file(path, bytes(data))
    status, out = _inspect(path)
    assert status == 1
    assert out.splitlines()[-1].startswith(f"# damaged record: crc_mismatch: {path} at byte {len(data) // 2}")


@pytest.mark.parametrize("argv, words", [
    (["{tmp}/missing.tfrecord"], "does not exist"),
    (["{tmp}/a.tfrecord", "--limit", "0"], "--limit"),
    (["{tmp}/a.tfrecord", "--offset", "-1"], "--offset"),
    ([], "shard"),
    (["{tmp}"], "is a folder; give one TFRecord file in it"),
    (["{tmp}/photo.jpg"], "photo.jpg is not a TFRecord file: it starts like a JPEG image"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, argv, words) -> None:
    write_tfrecords(str(tmp_path / "a.tfrecord"), [b"x"])
    jpeg = io.BytesIO()
    Image.new("RGB", (8, 8)).save(jpeg, format="JPEG")
    write_file(str(tmp_path / "photo.jpg"), jpeg.getvalue())
    status, out = _inspect(*[a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err


def _gzip_bomb(path: str, claimed: int, zeros: int) -> None:
    """A small .tfrecord.gz: one good record, then a header claiming ``claimed`` bytes and ``zeros`` zeros."""
    import struct
    import zlib

    from transforms.tfrecord.framing import masked_crc32c

    length = struct.pack("<Q", claimed)
    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    pieces = [packer.compress(frame_record(encode_example({"id": 1})) + length
                              + struct.pack("<I", masked_crc32c(length)))]
    block = bytes(1 << 20)
    pieces += [packer.compress(block) for _ in range(zeros >> 20)]
    write_file(path, b"".join(pieces) + packer.flush())


_PEAK_RSS = """
import io, resource, sys
from beam_jobs import inspect_shard
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()
before = rss()
status = inspect_shard.run(sys.argv[1:], out=io.StringIO())
# VmHWM is this process's own peak; ru_maxrss also keeps the peak of the process that forked
# it (the test runner, which may hold a gigabyte by then), carried across exec.
with open("/proc/self/status") as fh:
    peak = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
print(status, peak - before)
"""


@pytest.mark.slow
def test_inspect_of_a_small_gzip_whose_header_claims_3_gib_stays_small(tmp_path) -> None:
    """A5: 3 GiB claimed, 600 MiB of zeros inflated: reported as damage, without the memory."""
    import os
    import subprocess
    import sys

    path = str(tmp_path / "bomb.tfrecord.gz")
    _gzip_bomb(path, 3 << 30, 600 << 20)
    assert os.path.getsize(path) < 4 << 20
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS, path], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))},
                          check=True)
    status, grown = map(int, done.stdout.split())
    assert status == 1
    assert grown < 200 << 20, f"peak RSS grew by {grown >> 20} MiB"
    status, out = _inspect(path)
    first = len(frame_record(encode_example({"id": 1})))
    assert status == 1
    assert out.splitlines()[-1].startswith(f"# damaged record: bad_length: {path} at byte {first}")
    assert "--max_record_mb" in out
    status, out = _inspect(path, "--max_record_mb", "0.0001")  # 104 bytes
    assert status == 1 and "over the 104-byte record-size limit" in out.splitlines()[-1]
