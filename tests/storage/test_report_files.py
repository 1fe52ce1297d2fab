"""Verify's problems are staged in sorted parts and merged into the report, never held in one list."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import build_report, report_bytes, report_dict
from tests.tfrecord_fixtures import write_file, write_shard_set
from transforms.errors import ShardsError
from transforms.verify.checks import PROBLEM_KINDS, Problem, Report

_KINDS = sorted(PROBLEM_KINDS)


def _problems(count: int) -> list[Problem]:
    return [Problem(f"{'ab'[i % 2]}/shard-{i % 7}.tfrecord", None if i % 5 == 0 else (i * 37) % 1000,
                    _KINDS[i % len(_KINDS)], f"detail {i} \"é\"") for i in range(count)]


@pytest.mark.parametrize("count", [0, 1, 2, 9])
def test_report_pieces_give_the_bytes_of_the_report_json(count) -> None:
    report = build_report(3, 10, 1234, _problems(count))
    assert report_bytes(report) == (json.dumps(report_dict(report), indent=2) + "\n").encode("utf-8")
    assert Report.loads(report_bytes(report)) == report


@pytest.mark.parametrize("cuts,fan_in", [([], 32), ([40], 32), ([3, 10, 11, 20, 33], 2), ([1] * 9, 3)])
def test_the_report_is_the_same_however_the_problems_were_dealt_into_parts(tmp_path, monkeypatch, cuts,
                                                                           fan_in) -> None:
    from transforms.storage import report_files

    monkeypatch.setattr(report_files, "MERGE_FAN_IN", fan_in)
    problems = _problems(sum(cuts))
    path = str(tmp_path / "report.json")
    folder = report_files.parts_folder(path)
    parts, start = [], 0
    for cut in cuts:
        parts.append(report_files.write_problem_part(problems[start:start + cut], folder))
        start += cut
    found = report_files.write_report(path, 4, 99, 2048, parts, folder)
    assert found == len(problems)
    with open(path, "rb") as fh:
        assert fh.read() == report_bytes(build_report(4, 99, 2048, problems))
    assert os.listdir(tmp_path) == ["report.json"]  # the parts' folder is gone


def test_a_part_holding_other_than_its_count_is_refused(tmp_path) -> None:
    from transforms.storage import report_files

    path = str(tmp_path / "report.json")
    folder = report_files.parts_folder(path)
    part = report_files.write_problem_part(_problems(3), folder)
    with pytest.raises(ShardsError, match="the staged problems hold 3 lines but 4 were counted"):
        report_files.write_report(path, 1, 1, 1, [type(part)(part.path, 4)], folder)


def test_the_report_step_gets_parts_not_problems(tmp_path, capsys, monkeypatch) -> None:
    """A damaged set: the report is the same, the step that writes it is given parts, and none is left."""
    from beam_jobs import verify_shards
    from transforms import verify_steps

    folder = str(tmp_path / "set")
    shards = write_shard_set(folder, splits={"train": 3}, per_shard=5)
    for name in ("train-00000-of-00003.tfrecord", "train-00002-of-00003.tfrecord"):
        data = bytearray(open(shards.path(name), "rb").read())
        data[shards.record_offsets(name)[1] + 1] ^= 0x01
        write_file(shards.path(name), bytes(data))
    seen = tmp_path / "given.txt"  # the step runs on a pickled copy: it reports through a file
    write = verify_steps._write_report

    def recording(path, records, sizes, *rest):
        with open(seen, "a") as fh:
            fh.writelines(f"{type(item).__name__}\n" for group in rest if not isinstance(group, str)
                          for item in group)
        return write(path, records, sizes, *rest)

    monkeypatch.setattr(verify_steps, "_write_report", recording)
    report = tmp_path / "out" / "report.json"
    capsys.readouterr()
    status = verify_shards.run(["--output_dir", folder, "--report", str(report)])
    out = capsys.readouterr().out
    assert status == 1
    assert out.startswith(f"FAILED: {folder}: 4 problems"), out
    given = seen.read_text().split()
    assert given and set(given) == {"ProblemPart"}, given
    rows = [(p["file"].rsplit("/", 1)[-1], p["kind"]) for p in json.loads(report.read_bytes())["problems"]]
    assert rows == [("train-00000-of-00003.tfrecord", "sha256_mismatch"),
                    ("train-00000-of-00003.tfrecord", "crc_mismatch"),
                    ("train-00002-of-00003.tfrecord", "sha256_mismatch"),
                    ("train-00002-of-00003.tfrecord", "crc_mismatch")]
    assert os.listdir(report.parent) == ["report.json"]
