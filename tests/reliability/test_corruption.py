"""Reliability: damaged shards are detected, with the file named, without huge allocations.

The exhaustive loops (every single-byte flip and every cut of a small shard
set, plain and gzip) run the single-process reference
``tests.helpers.verify_in_memory`` in tests/verify/test_checks.py; it is the
same checks the verify job runs, and the job is tested equal to it there on
one damaged set and here on a seeded random sample of flips and cuts. This
file adds length fields that claim up to 2^64-1 bytes (checked in a fresh
process for time and memory) and gzip shards missing their last 1 to 8 bytes.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import struct
import subprocess
import sys

import pytest

from tests.reliability_support import folder_bytes
from tests.tfrecord_fixtures import write_file, write_shard_set, write_tfrecords
from tests.helpers import encode_example
from transforms.tfrecord.framing import masked_crc32c
from transforms.shardset.manifest import Manifest
from transforms.verify.checks import Report
from tests.helpers import verify_in_memory

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HUGE_LENGTHS = [2**33, 2**40, 2**63, 2**64 - 1]


def _files(folder: str) -> dict[str, bytes]:
    """Relative path -> bytes of the files in ``folder`` and its ``index/`` folder."""
    return folder_bytes(folder)


def _verify_job(capsys, tmp_path, *argv: str) -> Report:
    """Runs the verify job in this process with a JSON report; returns the report."""
    from beam_jobs import verify_shards

    report = tmp_path / f"report{len(os.listdir(tmp_path))}.json"
    capsys.readouterr()
    status = verify_shards.run([*argv, "--report", str(report)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    result = Report.loads(report.read_bytes())
    assert status == (0 if result.ok else 1), out + err
    return result


def test_sampled_flips_and_cuts_are_found_by_the_job_as_by_the_reference(tmp_path, capsys) -> None:
    """Twelve shards, each damaged once at a seeded random place: the job names every one."""
    folder = str(tmp_path / "set")
    shards = write_shard_set(folder, splits={"train": 8, "validation": 4}, per_shard=3, sides=(4, 12))
    rng = random.Random(20240607)
    damaged = {}
    for number, name in enumerate(shards.shard_names):
        data = bytearray(open(shards.path(name), "rb").read())
        if number % 3 == 2:  # every third shard is cut, the others get one flipped byte
            at = rng.randrange(1, len(data))
            data = data[:at]
        else:
            at = rng.randrange(len(data))
            data[at] ^= 1 << rng.randrange(8)
        write_file(shards.path(name), bytes(data))
        damaged[name] = at
    reference = verify_in_memory(_files(folder), Manifest.loads(open(os.path.join(folder, "manifest.json"),
                                                                     "rb").read()), folder=folder)
    report = _verify_job(capsys, tmp_path, "--output_dir", folder)
    # Reading a byte range stops at its damaged record, so how many records are counted
    # depends on where the runner split the file; the problems do not.
    assert (report.files, report.bytes, report.problems) == (
        reference.files, reference.bytes, reference.problems)
    named = {os.path.basename(p.file) for p in report.problems}
    assert set(damaged) <= named
    for name, at in damaged.items():
        starts = [o for o in shards.record_offsets(name) if o <= at]
        record_problems = [p for p in report.problems if os.path.basename(p.file) == name and p.offset is not None]
        if record_problems:  # a cut between records leaves every record whole: the counts say it
            assert record_problems[0].offset == starts[-1], (name, at, report.problems)
        kinds = {p.kind for p in report.problems if os.path.basename(p.file) == name}
        assert "sha256_mismatch" in kinds, (name, kinds)


GOOD_RECORD = encode_example({"id": 1, "text": "a good record"})


def _huge_shard(path: str, length: int, compression: str = "none") -> None:
    """One good record, then a header claiming ``length`` data bytes with a valid length CRC."""
    header = struct.pack("<Q", length)
    tail = header + struct.pack("<I", masked_crc32c(header)) + b"\x00" * 64
    write_tfrecords(path, [GOOD_RECORD], compression=compression, index=False)
    if compression == "none":
        with open(path, "ab") as fh:
            fh.write(tail)
        return
    with open(path, "rb") as fh:
        good = gzip.decompress(fh.read())
    write_file(path, gzip.compress(good + tail, mtime=0))


_HUGE_PROBE = r"""
import glob, io, json, os, sys
from transforms.errors import RecordError
from transforms.tfrecord.framing import iter_records
from transforms.tfrecord.record_ranges import ByteRange, find_record_start, read_range, read_stream
from transforms.tfrecord.compression import open_decompressed
from tests.verify_reference import verify_in_memory

def peak_mib():
    # VmHWM: this program's peak RSS. ru_maxrss would include the parent's peak, which a
    # child started by fork/vfork and exec inherits on Linux.
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024

folder = sys.argv[1]
result = {"pure": {}, "inspect": {}, "pure_peak_mib": None}
plain = sorted(glob.glob(os.path.join(folder, "*.tfrecord")))
packed = sorted(glob.glob(os.path.join(folder, "*.tfrecord.gz")))
class Counted(io.BytesIO):
    # A file whose reads are counted: reads[0] bytes in reads[1] calls.
    reads = [0, 0]
    def read(self, size=-1):
        data = super().read(size)
        Counted.reads[0] += len(data)
        Counted.reads[1] += 1
        return data
    def readinto(self, buffer):
        got = super().readinto(buffer)
        Counted.reads[0] += got
        Counted.reads[1] += 1
        return got

def bytes_read():
    # rchar: bytes this process read through read(2) and the like, from any file.
    with open("/proc/self/io") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("rchar:"))

for path in plain + packed:
    with open(path, "rb") as fh:
        data = fh.read()
    kinds, Counted.reads = [], [0, 0]
    readers = [lambda fh: read_stream(open_decompressed(fh, "gzip"), path)] if path in packed else [
        lambda fh: read_range(fh, len(data), ByteRange(0), path),
        lambda fh: read_stream(fh, path),
        lambda fh: iter_records(fh, path, 0, len(data))]
    for read in readers:
        try:
            list(read(Counted(data)))
            kinds.append(None)
        except RecordError as err:
            kinds.append([err.kind, err.offset])
    if path in plain:
        kinds.append(find_record_start(Counted(data), len(data), 1))
    report = verify_in_memory({os.path.basename(path): data})
    kinds.append([[p.kind, p.offset] for p in report.problems])
    result["pure"][os.path.basename(path)] = [kinds, Counted.reads, len(data)]
result["pure_peak_mib"] = peak_mib()

from beam_jobs import inspect_shard as inspect, verify_shards  # Beam itself takes about 160 MiB
good = os.path.join(folder, "good", "good.tfrecord")
assert inspect.run([good], out=io.StringIO()) == 0
assert verify_shards.run(["--files", good]) == 0
warm = peak_mib()
for path in plain + packed:
    out, start = io.StringIO(), bytes_read()
    status = inspect.run([path], out=out)
    result["inspect"][os.path.basename(path)] = [status, out.getvalue(), bytes_read() - start]
result["verify"] = verify_shards.run(["--files", os.path.join(folder, "*.tfrecord*"),
                                      "--report", os.path.join(folder, "good", "report.json")])
result["job_growth_mib"] = peak_mib() - warm
print(json.dumps(result))
"""


@pytest.mark.slow
def test_huge_length_fields_are_rejected_at_once_without_allocating(tmp_path) -> None:
    folder = tmp_path / "huge"
    for length in HUGE_LENGTHS:
        _huge_shard(str(folder / f"len{length}.tfrecord"), length)
        _huge_shard(str(folder / f"len{length}.tfrecord.gz"), length, "gzip")
    write_tfrecords(str(folder / "good" / "good.tfrecord"), [GOOD_RECORD], index=False)
    proc = subprocess.run([sys.executable, "-c", _HUGE_PROBE, str(folder)], capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    record_end = 16 + len(GOOD_RECORD)  # the damaged header follows the good record
    for name, (kinds, (read, calls), size) in result["pure"].items():
        *errors, problems = kinds
        if name.endswith(".gz"):  # a stream: the length is over the record-size limit
            assert errors == [["bad_length", record_end]], name
        else:  # read_range and iter_records know the file size: the length is impossible at once
            reads, start = errors[:3], errors[3]
            assert reads == [["bad_length", record_end], ["bad_length", record_end],
                             ["bad_length", record_end]], name
            assert start == os.path.getsize(folder / name), name  # no record start after byte 1
        assert problems and all(offset == record_end for _, offset in problems), (name, problems)
        # Each reader stops at the header: it reads no more than the file, in a few reads.
        readers = 1 if name.endswith(".gz") else 4
        assert read <= readers * size and calls <= 4 * readers, (name, read, calls, size)
    assert result["pure_peak_mib"] < 100, result["pure_peak_mib"]
    for name, (status, text, read) in result["inspect"].items():
        assert status == 1 and f"at byte {record_end}" in text and name in text, (name, text)
        assert read < 64 * 1024, (name, read)  # bytes read from any file, against 2**33 and more claimed
    assert result["verify"] == 1
    report = json.loads((folder / "good" / "report.json").read_bytes())
    assert sorted(os.path.basename(p["file"]) for p in report["problems"]) == sorted(
        n for n in os.listdir(folder) if ".tfrecord" in n)
    assert all(p["offset"] == record_end for p in report["problems"])
    assert result["job_growth_mib"] < 50, result["job_growth_mib"]


@pytest.mark.slow
def test_gzip_shards_missing_their_last_1_to_8_bytes(tmp_path, capsys) -> None:
    folder = str(tmp_path / "set")
    shards = write_shard_set(folder, splits={"train": 8}, per_shard=2, compression="gzip", sides=(4, 10))
    for cut, name in enumerate(shards.shard_names, start=1):  # the gzip trailer is the last 8 bytes
        data = open(shards.path(name), "rb").read()
        write_file(shards.path(name), data[:-cut])
    manifest = Manifest.loads(open(os.path.join(folder, "manifest.json"), "rb").read())
    reference = verify_in_memory(_files(folder), manifest, folder=folder)
    with_manifest = _verify_job(capsys, tmp_path, "--output_dir", folder)
    assert with_manifest == reference  # gzip files are read whole: the counts agree too
    without = _verify_job(capsys, tmp_path, "--files", os.path.join(folder, "*.tfrecord.gz"))
    for report in (with_manifest, without):  # without a manifest there is no size or sha256 to compare
        truncated = sorted(os.path.basename(p.file) for p in report.problems if p.kind == "truncated")
        assert truncated == shards.shard_names, report.problems
