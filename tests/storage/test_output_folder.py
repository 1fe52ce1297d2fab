"""storage.output_folder: where a run's run files lie with --staging_dir, and that they go with its staging."""

from __future__ import annotations

import os
import shutil

import pytest

from transforms.errors import UsageError
from transforms.shardset.ownership import PublishPolicy
from transforms.storage.output_folder import (RUN_FILES_NAME, clear_staging, finish_output, prepare_output,
                                              run_files_folder, run_files_of, staging_folder)

RUN, OTHER = "a" * 32, "b" * 32


def _write(path: str, data: bytes = b"x") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def test_run_files_lie_in_the_staging_folder_or_in_a_folder_named_for_the_output_and_the_run(tmp_path) -> None:
    out, other_out, stage = str(tmp_path / "out"), str(tmp_path / "other"), str(tmp_path / "stage")
    assert run_files_folder(out, RUN) == f"{out}/.staging/{RUN}/runs"
    mine = run_files_folder(out, RUN, stage)
    parent, name = mine.rsplit("/", 1)
    assert parent == stage and name.startswith("tfrecord-shards-") and name.endswith("-" + RUN)
    assert len(name) == len("tfrecord-shards-") + 12 + 1 + 32
    # Two outputs sharing the staging folder, or two runs of one output, never share a folder.
    assert run_files_folder(other_out, RUN, stage) != mine
    assert run_files_folder(out, OTHER, stage) != mine
    # The output folder is named by its absolute path: a relative spelling gives the same folder.
    os.chdir(tmp_path)
    assert run_files_folder("out", RUN, stage) == mine
    assert run_files_folder("gs://b/out/", RUN, "gs://b/tmp") == run_files_folder("gs://b/out", RUN, "gs://b/tmp")


def test_a_run_names_its_folder_in_its_staging_and_it_is_removed_with_it(tmp_path) -> None:
    # Kept exactly when the run's staging folder is: a failed run's staging is cleared, so is this.
    out, stage = str(tmp_path / "out"), str(tmp_path / "stage")
    _write(os.path.join(stage, "someone_elses.txt"))
    policy = PublishPolicy(run_id=RUN, staging_dir=stage)
    prepare_output(out, policy, "build_shards")
    folder = run_files_folder(out, RUN, stage)
    assert run_files_of(out, RUN) == folder and os.listdir(folder) == []  # probed, nothing left
    _write(os.path.join(folder, "f.run"))
    finish_output(out, policy, ok=False)  # failed: its staging goes, and its run files with it
    assert not os.path.exists(staging_folder(out, RUN)) and not os.path.exists(folder)
    assert os.listdir(stage) == ["someone_elses.txt"]


def test_a_published_run_removes_its_folder_in_staging_dir_and_touches_nothing_else(tmp_path) -> None:
    out, stage = str(tmp_path / "out"), str(tmp_path / "stage")
    policy = PublishPolicy(run_id=RUN, staging_dir=stage)
    prepare_output(out, policy, "build_shards")
    _write(os.path.join(run_files_folder(out, RUN, stage), "f.run"))
    _write(os.path.join(run_files_folder(out, OTHER, stage), "f.run"))  # another run's: not resumed, not ours
    _write(os.path.join(stage, "notes.txt"))
    shutil.rmtree(os.path.join(out, ".staging"))  # as publishing does
    finish_output(out, policy, ok=True)
    assert sorted(os.listdir(stage)) == sorted([run_files_folder(out, OTHER, stage).rsplit("/", 1)[1], "notes.txt"])


def test_a_named_folder_that_is_not_the_runs_own_is_never_deleted(tmp_path) -> None:
    out, stage = str(tmp_path / "out"), str(tmp_path / "stage")
    victim = os.path.join(stage, "precious")
    _write(os.path.join(victim, "data"))
    _write(os.path.join(staging_folder(out, RUN), RUN_FILES_NAME), victim.encode() + b"\n")
    assert run_files_of(out, RUN) == run_files_folder(out, RUN)  # ignored: in its staging folder
    clear_staging(out, RUN)
    assert os.path.exists(os.path.join(victim, "data"))
    # An earlier run's folder, named by its staging, goes when a new run clears the staging.
    theirs = run_files_folder(out, OTHER, stage)
    _write(os.path.join(theirs, "f.run"))
    _write(os.path.join(staging_folder(out, OTHER), RUN_FILES_NAME), theirs.encode() + b"\n")
    prepare_output(out, PublishPolicy(run_id=RUN), "build_shards")
    assert not os.path.exists(theirs) and os.path.exists(os.path.join(victim, "data"))
    finish_output(out, PublishPolicy(run_id=RUN), ok=False)


def test_a_staging_dir_that_cannot_be_written_is_refused_before_any_input_is_read(tmp_path) -> None:
    out, stage = str(tmp_path / "out"), str(tmp_path / "a_file")
    _write(stage)
    with pytest.raises(UsageError, match=r"^--staging_dir .*a_file cannot be written: "):
        prepare_output(out, PublishPolicy(run_id=RUN, staging_dir=stage), "build_shards")
    assert not os.path.exists(os.path.join(out, ".tfrecord-shards.lock"))
