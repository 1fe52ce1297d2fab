"""Reliability: paths the reading jobs are given are files, read once, never matched again.

Beam's ``FileSystems.match`` reads ``*``, ``?`` and ``[`` anywhere in a path as
wildcards and cannot quote them, so a file named ``b[1].tfrecord`` matched again
by its own name is ``b1.tfrecord``. Every job here is given such names next to
the file they would wrongly match, and must read each file exactly once. Also:
verify must not overwrite the set it verifies (``--report``/``--preview``), and
a folder given where a file or pattern is expected fails at once with one line.
"""

from __future__ import annotations

import io
import json
import os
import re

import pytest

from tests.reliability_support import tree_state
from tests.shard_fixtures import load_manifest, records, shard_files
from tests.tfrecord_fixtures import write_shard_set, write_tfrecords
from tests.helpers import encode_example
from transforms.verify.checks import Report


def _examples(count: int, first: int = 0) -> list[bytes]:
    return [encode_example({"id": first + i, "image/class/label": i % 2,
                            "image/class/text": ["cat", "dog"][i % 2]}) for i in range(count)]


def _run(capsys, module, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = module.run(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return status, out, err


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# --- literal paths holding wildcard characters ----------------------------------------------------

@pytest.fixture
def bracket_pair(tmp_path):
    """``b1.tfrecord`` (8 records) beside ``b[1].tfrecord`` (5 records), no .idx files."""
    folder = tmp_path / "in"
    plain = _examples(8)
    bracket = _examples(5, first=100)
    write_tfrecords(str(folder / "b1.tfrecord"), plain, index=False)
    write_tfrecords(str(folder / "b[1].tfrecord"), bracket, index=False)
    return folder, plain, bracket


def _output_records(folder: str) -> list[bytes]:
    return [d for name in shard_files(folder) for _, d in records(os.path.join(folder, name))]


def test_reshard_reads_every_matched_file_once(tmp_path, capsys, bracket_pair) -> None:
    """Before: ``b[1].tfrecord`` was matched again as ``b1.tfrecord``: 8 of 13 records, exit 0."""
    from beam_jobs import reshard

    folder, plain, bracket = bracket_pair
    out = str(tmp_path / "out")
    status, _, err = _run(capsys, reshard, "--input", str(folder / "*"), "--output_dir", out,
                          "--split", "train")
    assert status == 0, err
    assert sorted(_output_records(out)) == sorted(plain + bracket)
    assert load_manifest(out)["records"] == 13


def test_reshard_input_naming_a_file_with_brackets_is_that_file(tmp_path, capsys, bracket_pair) -> None:
    from beam_jobs import reshard

    folder, _, bracket = bracket_pair
    out = str(tmp_path / "out")
    status, _, err = _run(capsys, reshard, "--input", str(folder / "b[1].tfrecord"), "--output_dir", out,
                          "--split", "train")
    assert status == 0, err
    assert sorted(_output_records(out)) == sorted(bracket)


def test_verify_files_reads_the_corrupt_file_with_brackets(tmp_path, capsys) -> None:
    """Before: ``part[1].tfrecord`` (corrupt) was matched again as ``part1.tfrecord``: OK, exit 0."""
    from beam_jobs import verify_shards

    folder = tmp_path / "in"
    write_tfrecords(str(folder / "part1.tfrecord"), _examples(4), index=False)
    data = bytearray(write_tfrecords(str(folder / "part[1].tfrecord"), _examples(4, 50), index=False))
    data[30] ^= 0xFF  # inside the first record's data
    (folder / "part[1].tfrecord").write_bytes(bytes(data))
    report = tmp_path / "report.json"
    status, _, err = _run(capsys, verify_shards, "--files", str(folder / "*.tfrecord"),
                          "--report", str(report))
    assert status == 1, err
    result = Report.loads(report.read_bytes())
    assert result.files == 2
    assert [(os.path.basename(p.file), p.offset, p.kind) for p in result.problems] == [
        ("part[1].tfrecord", 0, "crc_mismatch")]


def test_verify_files_naming_a_file_with_brackets_is_that_file(tmp_path, capsys) -> None:
    from beam_jobs import verify_shards

    folder = tmp_path / "in"
    write_tfrecords(str(folder / "x1.tfrecord"), _examples(4), index=False)
    write_tfrecords(str(folder / "x[1].tfrecord"), _examples(3, 50), index=False)
    report = tmp_path / "report.json"
    status, _, err = _run(capsys, verify_shards, "--files", str(folder / "x[1].tfrecord"),
                          "--report", str(report))
    assert status == 0, err
    result = Report.loads(report.read_bytes())
    assert (result.files, result.records) == (1, 3)


@pytest.mark.parametrize("twin", [True, False], ids=["beside-b1", "alone"])
def test_inspect_opens_the_file_it_is_given(tmp_path, twin: bool) -> None:
    """Before: with ``b1.tfrecord`` beside it, its size was taken from b1; alone, an IndexError."""
    from beam_jobs import inspect_shard

    folder = tmp_path / "in"
    if twin:
        write_tfrecords(str(folder / "b1.tfrecord"), _examples(40), index=False)
    write_tfrecords(str(folder / "b[1].tfrecord"), _examples(3, 100), index=False)
    out = io.StringIO()
    status = inspect_shard.run([str(folder / "b[1].tfrecord")], out=out)
    assert status == 0, out.getvalue()
    assert out.getvalue().rstrip().endswith("# end of file: 3 records shown")
    assert re.findall(r"^  id +int64 +\[(\d+)\]$", out.getvalue(), re.M) == ["100", "101", "102"]


# --- folders given where files are expected -------------------------------------------------------

def test_reshard_input_folder_fails_at_once(tmp_path, capsys, bracket_pair) -> None:
    from beam_jobs import reshard

    folder, _, _ = bracket_pair
    out = tmp_path / "out"
    status, _, err = _run(capsys, reshard, "--input", str(folder), "--output_dir", str(out))
    assert status == 2
    line = _one_line_error(err)
    assert "is a folder" in line and f"{folder}/*" in line
    assert not out.exists()


def test_verify_files_folder_fails_at_once(tmp_path, capsys, bracket_pair) -> None:
    from beam_jobs import verify_shards

    folder, _, _ = bracket_pair
    status, _, err = _run(capsys, verify_shards, "--files", str(folder))
    assert status == 2
    line = _one_line_error(err)
    assert "is a folder" in line and f"{folder}/*" in line


def test_verify_output_dir_that_is_a_file_fails_at_once(tmp_path, capsys, bracket_pair) -> None:
    from beam_jobs import verify_shards

    folder, _, _ = bracket_pair
    status, _, err = _run(capsys, verify_shards, "--output_dir", str(folder / "b1.tfrecord"))
    assert status == 2
    line = _one_line_error(err)
    assert "is a file" in line and "--files" in line


def test_inspect_folder_fails_with_one_line(tmp_path, capsys, bracket_pair) -> None:
    """Before: a traceback (IsADirectoryError)."""
    from beam_jobs import inspect_shard

    folder, _, _ = bracket_pair
    capsys.readouterr()
    status = inspect_shard.run([str(folder)], out=io.StringIO())
    _, err = capsys.readouterr()
    assert status == 2
    assert "is a folder" in _one_line_error(err)


# --- verify never overwrites the set it verifies ---------------------------------------------------

def _set_files(folder: str) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("flag", ["--report", "--preview"])
@pytest.mark.parametrize("target", ["manifest.json", "train-00000-of-00002.tfrecord",
                                    "train-00001-of-00002.tfrecord.idx", "labels.txt",
                                    "index/train-00001-of-00002.tfrecord.idx", "dataset_info.json",
                                    "dead_letters.jsonl", "./manifest.json"])
def test_verify_refuses_to_write_over_the_set(tmp_path, capsys, flag: str, target: str) -> None:
    """Before: the named file was replaced by the report (or PNG) and verify said OK."""
    from beam_jobs import verify_shards

    folder = str(tmp_path / "set")
    write_shard_set(folder)
    (tmp_path / "set" / "labels.txt").write_text("daisy\nrose\ntulip\n")
    (tmp_path / "set" / "dead_letters.jsonl").write_text("")
    (tmp_path / "set" / "dataset_info.json").write_text("{}")
    before = tree_state(str(tmp_path))
    path = os.path.join(folder, target)
    status, _, err = _run(capsys, verify_shards, "--output_dir", folder, flag, path)
    assert status == 2
    line = _one_line_error(err)
    assert path in line and "shard set" in line
    assert tree_state(str(tmp_path)) == before


@pytest.mark.parametrize("flag", ["--report", "--preview"])
def test_verify_files_refuses_to_write_over_a_file_it_reads(tmp_path, capsys, flag: str) -> None:
    from beam_jobs import verify_shards

    folder = tmp_path / "in"
    write_tfrecords(str(folder / "a.tfrecord"), _examples(3))  # with its .idx
    before = tree_state(str(tmp_path))
    for target in ("a.tfrecord", "a.tfrecord.idx", "index/a.tfrecord.idx"):
        status, _, err = _run(capsys, verify_shards, "--files", str(folder / "*.tfrecord"),
                              flag, str(folder / target))
        assert status == 2
        assert str(folder / target) in _one_line_error(err)
    assert tree_state(str(tmp_path)) == before


def test_verify_refuses_a_link_to_the_manifest(tmp_path, capsys) -> None:
    from beam_jobs import verify_shards

    folder = str(tmp_path / "set")
    write_shard_set(folder)
    link = tmp_path / "report.json"
    link.symlink_to(os.path.join(folder, "manifest.json"))
    before = tree_state(str(tmp_path))
    status, _, err = _run(capsys, verify_shards, "--output_dir", folder, "--report", str(link))
    assert status == 2
    assert str(link) in _one_line_error(err)
    assert tree_state(str(tmp_path)) == before


def test_verify_refuses_report_and_preview_at_one_path(tmp_path, capsys) -> None:
    from beam_jobs import verify_shards

    folder = str(tmp_path / "set")
    write_shard_set(folder)
    same = str(tmp_path / "out.bin")
    status, _, err = _run(capsys, verify_shards, "--output_dir", folder, "--report", same,
                          "--preview", same)
    assert status == 2
    assert same in _one_line_error(err)


@pytest.mark.parametrize("flag", ["--report", "--preview"])
def test_verify_output_below_a_file_or_at_a_folder_fails_at_once(tmp_path, capsys, flag: str) -> None:
    """Before: the whole set was read, then writing failed (exit 1)."""
    from beam_jobs import verify_shards

    folder = str(tmp_path / "set")
    write_shard_set(folder)
    (tmp_path / "note.txt").write_text("mine")
    for path, words in ((str(tmp_path / "note.txt" / "r.out"), "lies below"),
                        (str(tmp_path), "is a folder")):
        status, _, err = _run(capsys, verify_shards, "--output_dir", folder, flag, path)
        assert status == 2
        line = _one_line_error(err)
        assert path in line and words in line


def test_verify_writes_a_report_beside_the_set(tmp_path, capsys) -> None:
    """A new file in the set's folder is not part of the set: allowed, and verify passes."""
    from beam_jobs import verify_shards

    folder = str(tmp_path / "set")
    write_shard_set(folder)
    report = os.path.join(folder, "report.json")
    status, _, err = _run(capsys, verify_shards, "--output_dir", folder, "--report", report)
    assert status == 0, err
    assert json.loads(open(report).read())["ok"] is True


def test_verify_refuses_a_report_over_an_unreadable_manifest(tmp_path, capsys) -> None:
    """An unreadable manifest is reported (and --report written) without reading shards: not over it."""
    from beam_jobs import verify_shards

    folder = str(tmp_path / "set")
    write_shard_set(folder)
    manifest = os.path.join(folder, "manifest.json")
    with open(manifest, "w") as fh:
        fh.write("{not json")
    before = tree_state(str(tmp_path))
    for target in ("manifest.json", "train-00000-of-00002.tfrecord"):
        path = os.path.join(folder, target)
        status, _, err = _run(capsys, verify_shards, "--output_dir", folder, "--report", path)
        assert status == 2
        assert path in _one_line_error(err)
    assert tree_state(str(tmp_path)) == before
