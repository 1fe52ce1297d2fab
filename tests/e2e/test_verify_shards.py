"""End-to-end tests of the verify job: the real job module on real shard files."""

from __future__ import annotations

import json
import os
import random
import shutil

import apache_beam as beam
import pytest
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.testing import test_pipeline
from PIL import Image

from tests.reliability_support import folder_bytes
from tests.shard_fixtures import make_class_tree, run_build, write_set_manifest
from tests.tfrecord_fixtures import (ShardSet, image_example, make_examples, write_file, write_shard_set,
                                     write_tfrecords)
from tests.helpers import encode_example
from transforms.shardset.manifest import MANIFEST_NAME, Manifest, ShardEntry, SplitEntry
from transforms.verify.checks import Report
from tests.helpers import verify_in_memory


def run_verify(capsys, *argv: str) -> tuple[int, str, str]:
    """Runs the verify job in this process; returns (exit status, stdout, stderr)."""
    from beam_jobs import verify_shards

    capsys.readouterr()
    status = verify_shards.run(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _report(path) -> dict:
    with open(path, "rb") as fh:
        return json.load(fh)


def _files(folder: str) -> dict[str, bytes]:
    """Relative path -> bytes of the files in ``folder`` and its ``index/`` folder."""
    return folder_bytes(folder)


def _row_order(row: tuple) -> tuple:
    return row[0], -1 if row[1] is None else row[1], row[2]


def _problem_rows(report: dict, folder: str) -> list[tuple]:
    rows = [(os.path.relpath(p["file"], folder), p["offset"], p["kind"]) for p in report["problems"]]
    return sorted(rows, key=_row_order)


def test_good_shard_set_passes_with_report_and_preview(tmp_path, capsys) -> None:
    shards = write_shard_set(str(tmp_path / "set"), per_shard=8, raw_every=5)
    report, preview = tmp_path / "report.json", tmp_path / "sheet" / "preview.png"
    status, out, err = run_verify(capsys, "--output_dir", shards.folder, "--decode_images",
                                  "--report", str(report), "--preview", str(preview))
    assert status == 0, (out, err)
    assert out.startswith(f"OK: {shards.folder}: 3 files, 24 records")
    assert _report(report) == {"ok": True, "files": 3, "records": 24, "problems": [],
                               "bytes": sum(os.path.getsize(shards.path(n)) for n in shards.shard_names)}
    with Image.open(preview) as img:
        assert img.format == "PNG" and img.width >= 640 and img.height > 3 * 96


def test_build_job_output_verifies(tmp_path, capsys) -> None:
    make_class_tree(str(tmp_path / "in"), per_class=5, broken=False)
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir",
                               str(tmp_path / "out"), "--num_shards", "2")
    assert status == 0, err
    status, out, err = run_verify(capsys, "--output_dir", str(tmp_path / "out"), "--decode_images")
    assert status == 0, (out, err)
    assert "15 records" in out


def _big_raw_shard(folder: str, name: str, count: int = 4) -> tuple[list[bytes], list[int]]:
    """A shard of large raw-pixel records, big enough for the runner to split it."""
    rng = random.Random(7)
    records = []
    for i in range(count):
        pixels = rng.randbytes(512 * 512 * 3)
        records.append(image_example(i % 3, ("daisy", "rose", "tulip")[i % 3], pixels, "raw", 512, 512))
    write_tfrecords(os.path.join(folder, name), records)
    offsets, at = [], 0
    for record in records:
        offsets.append(at)
        at += len(record) + 16
    return records, offsets


def _add_to_manifest(shards: ShardSet, name: str, split: str, records: int, labels: dict) -> None:
    import hashlib

    data = open(shards.path(name), "rb").read()
    entry = ShardEntry(name, records, len(data), hashlib.sha256(data).hexdigest(), labels)
    splits = dict(shards.manifest.splits)
    splits[split] = SplitEntry(split, [entry])
    manifest = Manifest(**{**shards.manifest.__dict__, "splits": splits})
    write_set_manifest(shards.folder, manifest)
    shards.manifest = manifest


def test_damage_is_reported_once_with_file_and_offset(tmp_path, capsys) -> None:
    folder = str(tmp_path / "set")
    shards = write_shard_set(folder, splits={"train": 3, "validation": 2}, per_shard=5)
    big, big_offsets = _big_raw_shard(folder, "test-00000-of-00001.tfrecord")
    _add_to_manifest(shards, "test-00000-of-00001.tfrecord", "test", 4, {"0": 2, "1": 1, "2": 1})
    os.remove(shards.path("index/test-00000-of-00001.tfrecord.idx"))  # read it by scanning
    expected = []

    def flip(name: str, position: int) -> None:
        data = bytearray(open(shards.path(name), "rb").read())
        data[position] ^= 0x01
        write_file(shards.path(name), bytes(data))

    # A flip in a record's length field, in the data of the last record, and in
    # the second half of the big shard (which the runner reads in two ranges).
    a, b = "train-00000-of-00003.tfrecord", "train-00001-of-00003.tfrecord"
    flip(a, shards.record_offsets(a)[2] + 1)
    flip(b, os.path.getsize(shards.path(b)) - 10)
    flip("test-00000-of-00001.tfrecord", big_offsets[3] + 5000)
    expected += [(a, shards.record_offsets(a)[2], "crc_mismatch"), (a, None, "sha256_mismatch"),
                 (b, shards.record_offsets(b)[4], "crc_mismatch"), (b, None, "sha256_mismatch"),
                 ("test-00000-of-00001.tfrecord", big_offsets[3], "crc_mismatch"),
                 ("test-00000-of-00001.tfrecord", None, "sha256_mismatch"),
                 ("index/test-00000-of-00001.tfrecord.idx", None, "missing_file")]
    # A cut inside a record; a deleted shard; an unlisted one.
    c = "train-00002-of-00003.tfrecord"
    cut_at = shards.record_offsets(c)[3] + 30
    write_file(shards.path(c), open(shards.path(c), "rb").read()[:cut_at])
    expected += [(c, shards.record_offsets(c)[3], "bad_length"), (c, None, "sha256_mismatch"),
                 (c, None, "size_mismatch"), ("index/" + c + ".idx", cut_at, "size_mismatch")]
    os.remove(shards.path("validation-00000-of-00002.tfrecord"))
    expected.append(("validation-00000-of-00002.tfrecord", None, "missing_file"))
    shutil.copy(shards.path("validation-00001-of-00002.tfrecord"), shards.path("validation-00002-of-00003.tfrecord"))
    expected.append(("validation-00002-of-00003.tfrecord", None, "extra_file"))

    report_path = tmp_path / "report.json"
    status, out, err = run_verify(capsys, "--output_dir", folder, "--report", str(report_path))
    assert status == 1, err
    assert out.startswith(f"FAILED: {folder}: {len(expected)} problems")
    assert "Traceback" not in out + err
    report = _report(report_path)
    assert _problem_rows(report, folder) == sorted(expected, key=_row_order)
    # The job and the single-process reference find the same problems.
    reference = verify_in_memory(_files(folder), Manifest.loads(open(os.path.join(folder, MANIFEST_NAME), "rb").read()),
                                 folder=folder)
    assert Report.loads(report_path.read_bytes()) == reference


def test_gzip_set_with_cut_trailer_and_flipped_byte(tmp_path, capsys) -> None:
    folder = str(tmp_path / "set")
    shards = write_shard_set(folder, splits={"train": 2}, per_shard=4, compression="gzip")
    a, b = shards.shard_names
    data = open(shards.path(a), "rb").read()
    write_file(shards.path(a), data[:-3])  # inside the gzip trailer
    data = bytearray(open(shards.path(b), "rb").read())
    data[len(data) // 2] ^= 0x08
    write_file(shards.path(b), bytes(data))
    report_path = tmp_path / "report.json"
    status, out, _ = run_verify(capsys, "--output_dir", folder, "--report", str(report_path))
    assert status == 1
    rows = _problem_rows(_report(report_path), folder)
    assert (a, None, "size_mismatch") in rows and (a, None, "sha256_mismatch") in rows
    assert any(r[0] == a and r[2] == "truncated" for r in rows)
    assert (b, None, "sha256_mismatch") in rows
    assert any(r[0] == b and r[1] is not None for r in rows)  # the damaged record


def _beam_written(prefix: str, compression_type, suffix: str) -> list[bytes]:
    records = [record for _, record in make_examples(30, seed=3)]
    records += [encode_example({"id": i, "text": "x" * i, "score": i / 7}) for i in range(60)]
    with test_pipeline.TestPipeline(runner="FnApiRunner") as p:
        _ = (p | beam.Create(records)
             | beam.io.WriteToTFRecord(prefix, file_name_suffix=".tfrecord" + suffix, num_shards=3,
                                       compression_type=compression_type))
    return records


@pytest.mark.slow
@pytest.mark.parametrize("compression_type, suffix", [
    (CompressionTypes.UNCOMPRESSED, ""), (CompressionTypes.GZIP, ".gz")])
def test_files_mode_on_beam_written_tfrecords(tmp_path, capsys, compression_type, suffix) -> None:
    _beam_written(str(tmp_path / "beam"), compression_type, suffix)
    report_path = tmp_path / "r.json"
    status, out, err = run_verify(capsys, "--files", str(tmp_path / "beam*"), "--report",
                                  str(report_path), "--decode_images")
    assert status == 0, (out, err)
    assert _report(report_path) == {"ok": True, "files": 3, "records": 90, "problems": [],
                                    "bytes": sum(os.path.getsize(tmp_path / n) for n in os.listdir(tmp_path)
                                                 if n.startswith("beam"))}


def test_files_mode_finds_damage_in_examples(tmp_path, capsys) -> None:
    shards = write_shard_set(str(tmp_path / "set"), splits={"train": 2}, per_shard=4)
    pattern = str(tmp_path / "set" / "*")  # also matches manifest.json and the .idx files
    status, out, _ = run_verify(capsys, "--files", str(tmp_path / "set" / "*.tfrecord"))
    assert status == 0 and out.startswith("OK:") and "2 files, 8 records" in out
    name = shards.shard_names[1]
    data = bytearray(open(shards.path(name), "rb").read())
    data[shards.record_offsets(name)[1] + 14] ^= 0x40
    write_file(shards.path(name), bytes(data))
    os.remove(os.path.join(shards.folder, MANIFEST_NAME))
    status, out, _ = run_verify(capsys, "--files", pattern)
    assert status == 1
    assert f"crc_mismatch: {shards.path(name)} at byte {shards.record_offsets(name)[1]}" in out


@pytest.mark.parametrize("argv, words", [
    ([], "say what to verify: --output_dir FOLDER"),
    (["--output_dir", "{tmp}/set", "--files", "{tmp}/*"], "not both"),
    (["--output_dir", "{tmp}/nowhere"], "does not exist"),
    (["--output_dir", "{tmp}/plain"], "is not a shard set: it has no manifest.json"),
    (["--output_dir", "{tmp}/plain"], "to check TFRecord files without one, use --files"),
    (["--output_dir", "{tmp}/empty"], "is not a shard set: it has no manifest.json"),
    (["--files", "{tmp}/none-*.tfrecord"], "matches no files"),
    (["--output_dir", "{tmp}/set", "--decode_images=yes"], "--decode_images"),
    (["--output_dir", "{tmp}/set", "--decode-image"], "unknown flag --decode-image; did you mean --decode_images?"),
    (["{tmp}/set"], "give a shard set as --output_dir"),
    (["--output_dir", "{tmp}/set", "--direct_num_workers=two"], "--direct_num_workers"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path, capsys, argv, words) -> None:
    write_shard_set(str(tmp_path / "set"), splits={"train": 1}, per_shard=1)
    write_tfrecords(str(tmp_path / "plain" / "a.tfrecord"), [b"x"])
    (tmp_path / "empty").mkdir()
    status, out, err = run_verify(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert status == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and words in err, err


def test_unreadable_manifest_is_a_problem(tmp_path, capsys) -> None:
    shards = write_shard_set(str(tmp_path / "set"), splits={"train": 1}, per_shard=1)
    write_file(os.path.join(shards.folder, MANIFEST_NAME), b"{not json")
    report_path = tmp_path / "r.json"
    status, out, _ = run_verify(capsys, "--output_dir", shards.folder, "--report", str(report_path))
    assert status == 1
    [problem] = _report(report_path)["problems"]
    assert (problem["file"], problem["kind"]) == (os.path.join(shards.folder, MANIFEST_NAME), "parse_error")
    assert "parse_error" in out


def test_files_mode_on_a_jpeg_says_not_a_tfrecord_file(tmp_path, capsys) -> None:
    import io as _io

    from PIL import Image

    buf = _io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="JPEG")
    write_file(str(tmp_path / "photo.jpg"), buf.getvalue())
    status, out, _ = run_verify(capsys, "--files", str(tmp_path / "photo.jpg"))
    assert status == 1
    assert "not_tfrecord" in out and "not a TFRecord file: it starts like a JPEG image" in out
    assert "crc_mismatch" not in out


def test_files_mode_reports_a_header_over_max_record_mb_as_bad_length(tmp_path, capsys) -> None:
    """A5: a gzip file whose second header claims 3 GiB is one bad_length problem at that record."""
    from tests.e2e.test_inspect import _gzip_bomb
    from transforms.tfrecord.framing import frame_record

    path = str(tmp_path / "bomb.tfrecord.gz")
    _gzip_bomb(path, 3 << 30, 64 << 20)
    report = str(tmp_path / "report.json")
    status, out, _ = run_verify(capsys, "--files", path, "--report", report)
    assert status == 1
    first = len(frame_record(encode_example({"id": 1})))
    problems = [(p["file"], p["offset"], p["kind"]) for p in _report(report)["problems"]]
    assert problems == [(path, first, "bad_length")]
    assert "over the 536870912-byte record-size limit" in out
    write_file(str(tmp_path / "plain.tfrecord"), frame_record(bytes(200)) + frame_record(b"x"))
    status, out, _ = run_verify(capsys, "--files", str(tmp_path / "plain.tfrecord"), "--report", report,
                                "--max_record_mb", "0.0001")  # 104 bytes
    assert status == 1
    assert [(p["offset"], p["kind"]) for p in _report(report)["problems"]] == [(0, "bad_length")]


_SPLIT = ["--direct_num_workers", "4", "--direct_running_mode", "multi_threading"]  # 3 shards < 4 workers


@pytest.mark.slow
@pytest.mark.parametrize("manifest, split, preview, most", [
    (True, False, False, 5),  # read whole: at least as many shards as workers
    (True, True, False, 5),  # split into byte ranges: fewer shards than workers
    (False, False, False, 5),
    (False, True, False, 5),
    (True, False, True, 7),
    (False, False, True, 7),
])
def test_verify_runs_in_few_fused_stages(tmp_path, capsys, monkeypatch, manifest, split, preview,
                                         most) -> None:
    """The FnApiRunner runs at most 5 fused stages (7 with --preview), and the job still passes.

    Counted as ``benchmarks/common.py child_usage --count_stages`` counts them: the
    stage list ``FnApiRunner.run_stages`` receives after fusion (checked on
    apache-beam 2.77.0). Before the steps were folded, verify ran 10 (12 with
    a preview).
    """
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    shards = write_shard_set(str(tmp_path / "set"))
    runs: list[list[str]] = []
    run_stages = fn_runner.FnApiRunner.run_stages

    def counting(self, stage_context, stage_list):
        runs.append([stage.name for stage in stage_list])
        return run_stages(self, stage_context, stage_list)

    monkeypatch.setattr(fn_runner.FnApiRunner, "run_stages", counting)
    report = tmp_path / "report.json"
    pattern = os.path.join(shards.folder, "*.tfrecord")
    argv = ["--output_dir", shards.folder] if manifest else ["--files", pattern]
    argv += ["--report", str(report)] + (_SPLIT if split else [])
    argv += ["--preview", str(tmp_path / "preview.png")] if preview else []
    status, out, err = run_verify(capsys, *argv)
    assert status == 0, (out, err)
    assert _report(report)["records"] == 18
    assert len(runs) == 1
    assert len(runs[0]) <= most, runs[0]
    assert any("ReadWhole" in name for name in runs[0]) == (not split)  # the case read as it says
