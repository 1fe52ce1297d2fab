"""Reliability: hostile zip and Parquet inputs, read in bounded memory and time.

Each file is small, built here (a "1.6 GB" zip is a sparse file): a zip whose
central directory lies about a member's sizes, whose local header disagrees
with it, whose member is a deflate bomb; a Parquet file whose rows decompress
to far more than the file holds. Every hostile member or row is one dead
letter naming ``ARCHIVE!MEMBER``; the peak memory of reading one is measured
in a child process (``ru_maxrss``) and bounded.
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import imagegen
from tests.shard_fixtures import dead_letters, load_manifest, run_build
from transforms.archives.members import MemberRef
from transforms.archives.zip_index import zip_members
from transforms.errors import ImageError
from transforms.storage import member_reads as storage_members
from transforms.storage.member_reads import read_member

_MIB = 1 << 20
_CD_COMPRESSED = 20  # offset of the compressed size in a central directory entry
_CD_SIZE = 24  # of the uncompressed size
_LOCAL_METHOD = 8  # offsets in a local header: the method, the CRC-32, the sizes
_LOCAL_CRC, _LOCAL_COMPRESSED, _LOCAL_SIZE = 14, 18, 22
_CD_CRC = 16
_EOCD_OFFSET = 16  # offset of the central directory's offset in the end record


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _entries(data: bytes) -> tuple[int, int]:
    """(offset of the central directory, offset of the end record)."""
    end = data.rindex(b"PK\5\6")
    return struct.unpack_from("<I", data, end + _EOCD_OFFSET)[0], end


def _patched(data: bytes, cd_field: int, value: int, entry: int = 0) -> bytes:
    """``data`` with one 4-byte field of the ``entry``-th central directory entry set to ``value``."""
    out = bytearray(data)
    at, _ = _entries(data)
    for _ in range(entry):
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", out, at + 28)
        at += 46 + name_len + extra_len + comment_len
    struct.pack_into("<I", out, at + cd_field, value)
    return bytes(out)


def _both(data: bytes, local_field: int, cd_field: int, value: int) -> bytes:
    """``data`` with a field of its first member set to ``value`` in its local header and its directory entry."""
    out = bytearray(_patched(data, cd_field, value))
    struct.pack_into("<I", out, local_field, value)
    return bytes(out)


def _write_sparse(path, data: bytes, size: int) -> None:
    """``data`` as a file of ``size`` bytes: its members, a hole, then its central directory at the end."""
    cd, end = _entries(data)
    tail = bytearray(data[cd:])
    struct.pack_into("<I", tail, end - cd + _EOCD_OFFSET, size - len(tail))
    with open(path, "wb") as fh:
        fh.write(data[:cd])
        fh.seek(size - len(tail))
        fh.write(tail)


def _lying_zip(path) -> str:
    """A "1.6 GB" zip (sparse) whose directory says its first member holds 1.5 GB compressed."""
    data = _zip({"rose/a.jpg": imagegen.jpeg(), "rose/b.jpg": imagegen.jpeg(size=(20, 20))})
    _write_sparse(path, _patched(data, _CD_COMPRESSED, 1_500_000_000), 1_600_000_000)
    return str(path)


_IMPORTS = """
import resource
from transforms.archives.members import MemberRef
from transforms.archives.zip_index import zip_members
from transforms.errors import ImageError
from transforms.storage.member_reads import read_member
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""


def _peak_growth_mib(code: str) -> float:
    """How far (MiB) ``code`` raises the peak resident memory of a child Python that has imported the
    project's readers (this worktree's modules)."""
    script = _IMPORTS + textwrap.dedent(code) + (
        "\nprint('GROWTH', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    growth = next(line for line in done.stdout.splitlines() if line.startswith("GROWTH"))
    return int(growth.split()[1]) / 1024


# Zip: sizes in the central directory are claims, checked before and after reading.


def test_a_compressed_size_claimed_over_max_image_mb_is_a_dead_letter_unread(tmp_path, capsys):
    path = _lying_zip(tmp_path / "lying.zip")
    out = str(tmp_path / "out")
    status, stdout, err = run_build(capsys, "--input", path, "--output_dir", out, "--max_bad_fraction", "0.9",
                                    "--direct_num_workers", "1")
    assert status == 0, err
    (dead,) = dead_letters(out)
    assert (dead["path"], dead["reason"]) == (f"{path}!rose/a.jpg", "too_large"), dead
    assert "1500000000" in dead["error"] and "compressed" in dead["error"], dead
    assert load_manifest(out)["records"] == 1
    assert "written + dead-lettered = 2 inputs" in stdout


def test_reading_a_lying_zip_member_reads_no_more_than_max_image_mb(tmp_path, monkeypatch):
    path = _lying_zip(tmp_path / "lying.zip")
    with open(path, "rb") as fh:
        member = next(iter(zip_members(fh)))
    ref = MemberRef(path, "zip", member.header_offset, member.compressed, member.size, member.method, member.crc)
    asked = []
    real = storage_members._RANGES.read
    monkeypatch.setattr(storage_members._RANGES, "read",
                        lambda p, offset, length: asked.append(length) or real(p, offset, length))
    with pytest.raises(ImageError) as caught:
        read_member(ref, 10 * _MIB)
    assert caught.value.reason == "too_large" and asked == [], (caught.value, asked)


@pytest.mark.cpu_budget(6.0)  # a hostile input stays in the fast tier; its check runs a fresh process
def test_the_peak_memory_of_reading_a_lying_zip_member_stays_small(tmp_path):
    path = _lying_zip(tmp_path / "lying.zip")
    peak = _peak_growth_mib(f"""
        with open({path!r}, "rb") as fh:
            m = next(iter(zip_members(fh)))
        try:
            read_member(MemberRef({path!r}, "zip", m.header_offset, m.compressed, m.size, m.method, m.crc),
                        256 << 20)
        except ImageError:
            pass
    """)
    assert peak < 64, f"{peak:.0f} MiB"  # the whole claim read: over 1,500 MiB


def test_a_member_running_past_the_end_of_the_archive_is_a_dead_letter(tmp_path, capsys):
    data = _zip({"rose/a.jpg": imagegen.jpeg(), "rose/b.jpg": imagegen.jpeg(size=(20, 20))})
    path = tmp_path / "short.zip"
    path.write_bytes(_patched(data, _CD_COMPRESSED, 5 * _MIB))  # the file has a few KB
    out = str(tmp_path / "out")
    status, stdout, err = run_build(capsys, "--input", str(path), "--output_dir", out, "--max_bad_fraction", "0.9")
    assert status == 0, err
    (dead,) = dead_letters(out)
    assert (dead["path"], dead["reason"]) == (f"{path}!rose/a.jpg", "unreadable"), dead
    assert "past the end" in dead["error"], dead
    assert "written + dead-lettered = 2 inputs" in stdout


def test_bytes_after_the_end_of_a_deflate_stream_are_damage(tmp_path, capsys):
    data = _zip({"rose/a.jpg": imagegen.jpeg(), "rose/b.jpg": imagegen.jpeg(size=(20, 20))})
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        compressed = archive.infolist()[0].compress_size
    path = tmp_path / "longer.zip"  # the claim takes in the next member's local header
    path.write_bytes(_both(data, _LOCAL_COMPRESSED, _CD_COMPRESSED, compressed + 20))
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", str(path), "--output_dir", out, "--max_bad_fraction", "0.9")
    assert status == 0, err
    (dead,) = dead_letters(out)
    assert (dead["path"], dead["reason"]) == (f"{path}!rose/a.jpg", "unreadable"), dead
    assert "after the end of its deflate stream" in dead["error"], dead


@pytest.mark.cpu_budget(6.0)  # a hostile input stays in the fast tier; its check runs a fresh process
def test_a_deflate_bomb_member_is_inflated_no_further_than_its_claimed_size(tmp_path):
    data = _zip({"rose/bomb.jpg": b"\0" * (64 * _MIB)})  # 64 MiB of zeros: about 64 KB deflated
    data = _both(_both(data, _LOCAL_SIZE, _CD_SIZE, 100_000), _LOCAL_CRC, _CD_CRC, zlib.crc32(b"\0" * 100_000))
    path = tmp_path / "bomb.zip"
    path.write_bytes(data)
    peak = _peak_growth_mib(f"""
        with open({str(path)!r}, "rb") as fh:
            m = next(iter(zip_members(fh)))
        try:
            read_member(MemberRef({str(path)!r}, "zip", m.header_offset, m.compressed, m.size, m.method, m.crc),
                        256 << 20)
            raise SystemExit("the bomb was read")
        except ImageError as err:
            assert "more than the 100000 bytes" in err.detail, err.detail
    """)
    assert peak < 32, f"{peak:.0f} MiB"  # inflated whole: 64 MiB


def test_a_local_header_that_disagrees_with_the_central_directory_is_damage(tmp_path, capsys):
    data = bytearray(_zip({"rose/a.jpg": imagegen.jpeg(), "rose/b.jpg": imagegen.jpeg(size=(20, 20))}))
    struct.pack_into("<H", data, _LOCAL_METHOD, zipfile.ZIP_STORED)  # the first member's local header
    path = tmp_path / "disagree.zip"
    path.write_bytes(bytes(data))
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", str(path), "--output_dir", out, "--max_bad_fraction", "0.9")
    assert status == 0, err
    (dead,) = dead_letters(out)
    assert (dead["path"], dead["reason"]) == (f"{path}!rose/a.jpg", "unreadable"), dead
    assert "local header" in dead["error"] and "central directory" in dead["error"], dead


# Parquet: a row group's image column is bounded by its footer, kept as the file stores it, measured per row.


def _zeros_parquet(path, rows: int, dictionary: bool = True, jpegs: int = 0) -> str:
    """``rows`` rows of 1 MiB of zeros (zstd: a few KB in all), then ``jpegs`` rows of real images in a row
    group of their own."""
    schema = pa.schema([("image", pa.binary()), ("label", pa.string())])
    with pq.ParquetWriter(str(path), schema, compression="zstd", use_dictionary=dictionary) as writer:
        writer.write_table(pa.table({"image": [b"\0" * _MIB] * rows, "label": ["rose"] * rows}, schema))
        if jpegs:
            writer.write_table(pa.table({"image": [imagegen.jpeg(size=(16 + i, 16)) for i in range(jpegs)],
                                         "label": ["tulip"] * jpegs}, schema))
    return str(path)


@pytest.mark.cpu_budget(6.0)  # a hostile input stays in the fast tier; its check runs a fresh process
def test_the_peak_memory_of_reading_a_parquet_bomb_stays_small(tmp_path):
    path = _zeros_parquet(tmp_path / "bomb.parquet", 300)  # 300 MiB in rows
    assert os.path.getsize(path) < 10_000
    peak = _peak_growth_mib(f"""
        read = 0
        for row in range(300):
            read += len(read_member(MemberRef({path!r}, "parquet", 0, row, -1, column="image"), 256 << 20))
        assert read == 300 << 20, read
    """)
    assert peak < 48, f"{peak:.0f} MiB"  # the row group decoded whole, then as Python bytes: 600 MiB


def test_a_parquet_bomb_through_the_build_is_one_dead_letter_a_row(tmp_path, capsys):
    path = _zeros_parquet(tmp_path / "bomb.parquet", 20, jpegs=3)
    out = str(tmp_path / "out")
    status, stdout, err = run_build(capsys, "--input", path, "--output_dir", out, "--max_bad_fraction", "0.9")
    assert status == 0, err
    dead = dead_letters(out)
    assert sorted(d["path"] for d in dead) == sorted(f"{path}!{row}" for row in range(20))
    assert {d["reason"] for d in dead} == {"not_an_image"}
    assert load_manifest(out)["records"] == 3
    assert "written + dead-lettered = 23 inputs" in stdout


def test_a_row_group_over_the_bound_is_refused_unread_each_row_a_dead_letter(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(storage_members, "PARQUET_GROUP_BYTES", 4 * _MIB)
    path = _zeros_parquet(tmp_path / "plain.parquet", 10, dictionary=False, jpegs=3)  # 10 MiB uncompressed
    read = []
    real = storage_members.image_column
    monkeypatch.setattr(storage_members, "image_column", lambda pf, group, column: read.append(group) or
                        real(pf, group, column))
    out = str(tmp_path / "out")
    status, stdout, err = run_build(capsys, "--input", path, "--output_dir", out, "--max_bad_fraction", "0.9",
                                    "--max_image_mb", "1")
    assert status == 0, err
    dead = dead_letters(out)
    assert sorted(d["path"] for d in dead) == sorted(f"{path}!{row}" for row in range(10))
    assert {d["reason"] for d in dead} == {"too_large"}
    assert all("row group 0's column 'image' holds" in d["error"] for d in dead), dead[0]
    assert read == [1], read  # only the small row group was read
    assert load_manifest(out)["records"] == 3
    assert "written + dead-lettered = 13 inputs" in stdout


def _label_bomb(path, rows: int, label_mib: int = 1) -> str:
    """``rows`` rows whose label is one class name of ``label_mib`` MiB repeated (zstd and a dictionary:
    a few KB in all), each with a tiny image."""
    schema = pa.schema([("image", pa.binary()), ("label", pa.string())])
    with pq.ParquetWriter(str(path), schema, compression="zstd", use_dictionary=True) as writer:
        writer.write_table(pa.table({"image": [b"x"] * rows, "label": ["a" * (label_mib * _MIB)] * rows}, schema))
    return str(path)


@pytest.mark.cpu_budget(6.0)  # a hostile input stays in the fast tier; its check runs a fresh process
def test_listing_a_label_column_bomb_keeps_one_copy_of_each_distinct_label(tmp_path):
    path = _label_bomb(tmp_path / "labels.parquet", 300)  # 300 MiB of labels once decoded row by row
    assert os.path.getsize(path) < 10_000
    peak = _peak_growth_mib(f"""
        from transforms.archives.parquet_rows import open_rows, row_group_entries
        from transforms.images.inputs import LabelRules
        with open({path!r}, "rb") as fh:
            entries = list(row_group_entries({path!r}, open_rows(fh, "image", "label"), 0, 0, "image", "label",
                                             LabelRules(), None))
        assert len(entries) == 300 and {{e.reason for e in entries}} == {{"bad_label"}}, entries[:1]
    """)
    assert peak < 48, f"{peak:.0f} MiB"  # the label column decoded row by row, then as Python str: 600 MiB
