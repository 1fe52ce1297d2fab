"""--staging_dir: a build's run files (and their done lists) lie in another folder; its shards do not.

The build runs for real: uninterrupted, killed (SIGKILL) or stopped by Ctrl-C at a
known moment (``tests.pause_at``) and run again, and failing. It must publish
the bytes a build without the flag publishes, write nothing in the staging
folder but its own folder (named for the output folder and the run), remove
that folder once it published, keep it exactly when it keeps its staging in
the output folder, and resume from it.
"""

from __future__ import annotations

import glob
import os
import re
import signal

import pytest

# The module's tree and build are test_resume's (TREE, BUILD): tests/trees.py makes them once per process.
from tests.e2e.test_resume import BUILD, FLAGS, RESUMED, STAGED_SHARD, TREE, _stopped_at  # noqa: F401
from tests.reliability_support import assert_only_shard_set, folder_bytes
from tests.shard_fixtures import run_build
from transforms.storage.output_folder import run_files_folder, run_files_of

RUN_FOLDER = re.compile(r"^tfrecord-shards-[0-9a-f]{12}-([0-9a-f]{32})$")


@pytest.fixture
def stage(tmp_path) -> str:
    """A staging folder that also holds a file of someone else's."""
    folder = str(tmp_path / "stage")
    os.makedirs(folder)
    with open(os.path.join(folder, "other.txt"), "wb") as fh:
        fh.write(b"not the build's")
    return folder


def _run_folders(stage: str) -> list[str]:
    return sorted(name for name in os.listdir(stage) if name != "other.txt")


def _assert_left_as_it_was(stage: str) -> None:
    assert os.listdir(stage) == ["other.txt"]
    with open(os.path.join(stage, "other.txt"), "rb") as fh:
        assert fh.read() == b"not the build's"


def _stage_done_lists(stage: str) -> list[str]:
    return glob.glob(os.path.join(stage, "tfrecord-shards-*", "*.run.done"))


@pytest.mark.slow
def test_a_build_with_staging_dir_publishes_the_same_bytes_and_removes_its_folder(built, tmp_path, stage,
                                                                                  capsys) -> None:
    inputs, reference = built.root, built.out
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", out, "--staging_dir", stage + "/", *FLAGS)
    assert status == 0, err
    assert folder_bytes(out) == folder_bytes(reference)
    assert_only_shard_set(out)
    _assert_left_as_it_was(stage)


@pytest.mark.slow
def test_a_killed_build_keeps_its_run_files_in_staging_dir_and_the_rerun_reuses_them(built, tmp_path, stage,
                                                                                   capsys) -> None:
    inputs, reference = built.root, built.out
    out = str(tmp_path / "out")
    argv = ["--input", inputs, "--output_dir", out, "--staging_dir", stage, *FLAGS]
    stopped = _stopped_at(tmp_path, "create", STAGED_SHARD, 1, argv)  # every input read; no shard yet
    run_id = stopped["path"].split("/.staging/")[1].split("/")[0]
    # The run files and their done lists lie in the run's own folder there; none in the output folder.
    [name] = _run_folders(stage)
    assert RUN_FOLDER.match(name)[1] == run_id
    assert os.path.join(stage, name) == run_files_folder(out, run_id, stage) == run_files_of(out, run_id)
    assert glob.glob(os.path.join(stage, name, "*.run")) and _stage_done_lists(stage)
    assert not glob.glob(os.path.join(out, ".staging", "*", "runs"))
    status, stdout, err = run_build(capsys, *argv)
    assert status == 0, err
    assert folder_bytes(out) == folder_bytes(reference)
    found = RESUMED.search(stdout)
    assert found and (found[1], found[2], found[4]) == ("24", "27", run_id), stdout
    assert_only_shard_set(out)
    _assert_left_as_it_was(stage)


@pytest.mark.slow
def test_a_build_with_staging_dir_stopped_by_ctrl_c_while_reading_resumes_from_it(built, tmp_path, stage,
                                                                                 capsys) -> None:
    inputs, reference = built.root, built.out
    out = str(tmp_path / "out")
    argv = ["--input", inputs, "--output_dir", out, "--staging_dir", stage, *FLAGS]
    _stopped_at(tmp_path, "read", "^" + re.escape(inputs) + "/", 20, argv, sig=signal.SIGINT,
                until=lambda: len(_stage_done_lists(stage)) >= 2, env={"PAUSE_AT_DONE_EVERY": "4"})
    assert len(_run_folders(stage)) == 1  # kept, as its staging in the output folder is
    with open(tmp_path / "job.log", encoding="utf-8", errors="replace") as fh:
        assert f"the finished work is kept in {out}/.staging and {stage}: run the same command" in fh.read()
    left = sum(len(open(p, "rb").read().splitlines()) - 1 for p in _stage_done_lists(stage))
    status, stdout, err = run_build(capsys, *argv)
    assert status == 0, err
    assert folder_bytes(out) == folder_bytes(reference)
    found = RESUMED.search(stdout)
    assert found and 0 < int(found[1]) == left < 24 and found[2] == "27", stdout
    _assert_left_as_it_was(stage)


@pytest.mark.slow
def test_a_rerun_without_the_staging_dir_reuses_nothing_and_removes_the_old_run_files(built, tmp_path, stage,
                                                                                      capsys) -> None:
    inputs, reference = built.root, built.out
    out = str(tmp_path / "out")
    _stopped_at(tmp_path, "create", STAGED_SHARD, 1,
                ["--input", inputs, "--output_dir", out, "--staging_dir", stage, *FLAGS])
    assert len(_run_folders(stage)) == 1
    status, stdout, err = run_build(capsys, "--input", inputs, "--output_dir", out, *FLAGS)
    assert status == 0, err
    assert folder_bytes(out) == folder_bytes(reference)
    assert not RESUMED.search(stdout), stdout
    _assert_left_as_it_was(stage)


@pytest.mark.slow
def test_a_failed_build_keeps_its_run_files_exactly_when_it_keeps_its_staging(tree, tmp_path, stage,
                                                                              capsys) -> None:
    inputs = tree
    out = str(tmp_path / "out")
    # 3 of 27 inputs are broken: over --max_bad_fraction 0.01, the build fails once every input is read.
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", out, "--staging_dir", stage,
                               "--num_shards", "4", "--max_bad_fraction", "0.01", "--seed", "9")
    assert status == 1, err
    staged = os.path.join(out, ".staging")
    kept = sorted(os.listdir(staged)) if os.path.isdir(staged) else []
    assert [RUN_FOLDER.match(name)[1] for name in _run_folders(stage)] == kept
    for run in kept:
        assert run_files_of(out, run) == run_files_folder(out, run, stage)


@pytest.mark.slow  # the module's reference build
def test_a_staging_dir_inside_an_input_folder_is_refused_before_anything_is_written(tree, tmp_path, capsys) -> None:
    inputs = tree
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", out, "--staging_dir",
                               os.path.join(inputs, "tmp"), *FLAGS)
    assert status == 2
    assert f"--staging_dir {inputs}/tmp lies in --input {inputs}: a later run would read the run files" in err, err
    assert not os.path.exists(out) and not os.path.exists(os.path.join(inputs, "tmp"))


@pytest.mark.slow
def test_a_relative_staging_dir_resumes_from_another_working_folder(built, tmp_path, stage, capsys,
                                                                    monkeypatch) -> None:
    from tests.e2e.test_resume import REPO

    inputs, reference = built.root, built.out
    out = str(tmp_path / "out")
    _stopped_at(tmp_path, "create", STAGED_SHARD, 1,  # run from the repository's folder
                ["--input", inputs, "--output_dir", out, "--staging_dir", os.path.relpath(stage, REPO), *FLAGS])
    monkeypatch.chdir(tmp_path)
    status, stdout, err = run_build(capsys, "--input", inputs, "--output_dir", out, "--staging_dir", "stage", *FLAGS)
    assert status == 0, err
    found = RESUMED.search(stdout)
    assert found and found[1] == "24", stdout
    assert folder_bytes(out) == folder_bytes(reference)
    _assert_left_as_it_was(stage)
