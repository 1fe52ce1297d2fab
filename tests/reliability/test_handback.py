"""What workers hand back to the launcher goes through storage, never the launcher's temporary folder.

Workers on Dataflow or Flink share no disk with the process that launched the
job: a plan's tally or verify's report written to that process's temporary
folder lands on the worker's own disk. Here the launcher's temporary folder is
one of the test's (``tempfile.tempdir``) and no file the jobs write through
storage may lie below it; and a tally or report that the workers did not
write is an error in one line, never read as an empty tally.
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest

from tests.shard_fixtures import run_build
from tests.trees import Part
from transforms import plan_steps, verify_steps


@pytest.fixture()
def no_local_temp(tmp_path, monkeypatch):
    """The launcher's temporary folder: a write below it through storage fails the step that makes it."""
    from apache_beam.io.filesystems import FileSystems

    launcher = str(tmp_path / "launcher-temp")
    os.makedirs(launcher)
    monkeypatch.setattr(tempfile, "tempdir", launcher)
    create = FileSystems.create

    def refusing(path, *args, **kwargs):
        if os.path.abspath(path).startswith(launcher + os.sep):
            raise OSError(13, "the launcher's temporary folder is not the workers'", path)
        return create(path, *args, **kwargs)

    monkeypatch.setattr(FileSystems, "create", staticmethod(refusing))
    return launcher


TREE = (Part(per_class=2),)  # the module's input tree (tests/trees.py)


def _run(capsys, job: str, *argv: str) -> tuple[int, str, str]:
    from beam_jobs.cli import main

    capsys.readouterr()
    status = main.main([job, *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _one_line(err: str, job: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith(f"{job}:")]
    assert len(lines) == 1, err
    return lines[0]


def test_plan_hands_its_tally_back_through_storage(tree, tmp_path, capsys, no_local_temp) -> None:
    out, plan_json = str(tmp_path / "out"), str(tmp_path / "plan.json")
    status, text, err = _run(capsys, "plan", "--input", tree, "--output_dir", out, "--plan_json", plan_json)
    assert status == 0, err
    assert json.loads(open(plan_json, encoding="utf-8").read())["found"]["inputs"] == 6
    assert "inputs: 6 found" in text
    assert not os.path.exists(out)  # the run's folder in out/.staging is gone, with the folders it made


def test_plan_with_temp_location_hands_its_tally_back_there(tree, tmp_path, capsys, no_local_temp) -> None:
    temp = str(tmp_path / "temp")
    os.makedirs(temp)
    status, text, err = _run(capsys, "plan", "--input", tree, "--output_dir", str(tmp_path / "out"),
                             "--temp_location", temp)
    assert status == 0, err
    assert "inputs: 6 found" in text
    assert os.listdir(temp) == []


def test_a_missing_tally_is_an_error_not_an_empty_plan(tree, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(plan_steps, "_write_tally", lambda tally, path: None)  # a worker that wrote elsewhere
    status, text, err = _run(capsys, "plan", "--input", tree, "--output_dir", str(tmp_path / "out"))
    line = _one_line(err, "plan_build")
    assert status == 1 and text == ""
    assert line.startswith("plan_build: failed: the plan's tally the workers write is missing: "), line
    assert f"{tmp_path / 'out'}/.staging/plan_build-" in line


@pytest.mark.slow
def test_verify_hands_its_report_back_through_storage(tree, tmp_path, capsys, no_local_temp) -> None:
    out, report = str(tmp_path / "out"), str(tmp_path / "report.json")
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, "--num_shards", "2")
    assert status == 0, err
    status, text, err = _run(capsys, "verify", "--output_dir", out)
    assert status == 0, err
    assert text.startswith(f"OK: {out}:")
    status, text, err = _run(capsys, "verify", "--output_dir", out, "--report", report)
    assert status == 0, err
    assert json.loads(open(report, encoding="utf-8").read())["ok"] is True
    assert not os.path.exists(os.path.join(out, ".staging"))
    status, text, err = _run(capsys, "verify", "--files", os.path.join(out, "*.tfrecord"))
    assert status == 0, err
    assert not os.path.exists(os.path.join(out, ".staging"))


@pytest.mark.slow
def test_a_missing_verify_report_is_an_error_in_one_line(tree, tmp_path, capsys, monkeypatch) -> None:
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, "--num_shards", "2")
    assert status == 0, err
    monkeypatch.setattr(verify_steps, "_write_report", lambda *args: None)
    status, text, err = _run(capsys, "verify", "--output_dir", out)
    line = _one_line(err, "verify_shards")
    assert status == 1 and text == ""
    assert line.startswith("verify_shards: failed: the verify report the workers write is missing: "), line
