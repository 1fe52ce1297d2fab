"""Reliability: the tool never follows a link when it deletes or overwrites.

A run deletes and writes only inside ``--output_dir``: its staging folder
``OUTPUT/.staging`` and the ``.idx`` folder ``OUTPUT/index`` are the tool's own.
A symbolic link at either place would send deletions and renames into
whatever folder the link points at, so a link there is refused with one line
before anything is read, and the local deletions themselves never descend
through a link (a link found below a folder being removed is removed as a link).
"""

from __future__ import annotations

import os

import pytest

from tests.reliability_support import tree_state
from tests.shard_fixtures import load_manifest, run_build
from tests.trees import Part

FLAGS = ["--num_shards", "2", "--seed", "3"]


TREE = (Part(per_class=4),)  # the module's input tree (tests/trees.py)


def _victim(tmp_path, name: str) -> str:
    folder = tmp_path / "victim" / name
    folder.mkdir(parents=True)
    (folder / "precious.txt").write_text("x\n")
    return str(folder)


def _one_line(err: str, job: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{job}:"), err
    return lines[0]


def test_a_linked_staging_folder_is_refused_and_its_target_kept(tree, tmp_path, capsys):
    """Before: every file in the link's target was deleted, then a 25-line traceback."""
    victim = _victim(tmp_path, "stg")
    out = tmp_path / "o"
    out.mkdir()
    os.symlink(os.path.relpath(victim, out), out / ".staging")
    before = tree_state(str(tmp_path))
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", str(out), *FLAGS)
    assert status == 2, err
    line = _one_line(err, "build_shards")
    assert ".staging" in line and "link" in line, line
    assert tree_state(str(tmp_path)) == before


@pytest.mark.slow
def test_a_linked_index_folder_is_refused_and_its_idx_files_kept(tree, tmp_path, capsys):
    """Before: the old set's ``.idx`` files were deleted in the link's target on a rebuild."""
    out = tmp_path / "o"
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", str(out), *FLAGS)
    assert status == 0, err
    victim = tmp_path / "victim" / "idx"
    victim.parent.mkdir()
    os.rename(out / "index", victim)
    assert sorted(os.listdir(victim)), "the build wrote no .idx files"
    os.symlink(os.path.relpath(victim, out), out / "index")
    before = tree_state(str(tmp_path))
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", str(out),
                               "--num_shards", "3", "--seed", "3")
    assert status == 2, err
    line = _one_line(err, "build_shards")
    assert "index" in line and "link" in line, line
    assert tree_state(str(tmp_path)) == before


def test_reshard_refuses_a_linked_staging_folder(tree, tmp_path, capsys):
    from beam_jobs import reshard

    built = tmp_path / "built"
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", str(built), *FLAGS)
    assert status == 0, err
    victim = _victim(tmp_path, "stg")
    out = tmp_path / "o"
    out.mkdir()
    os.symlink(victim, out / ".staging")
    before = tree_state(str(tmp_path))
    capsys.readouterr()
    status = reshard.run(["--input", str(built / "train-*"), "--output_dir", str(out),
                          "--split", "train"])
    _, err = capsys.readouterr()
    assert status == 2, err
    assert "link" in _one_line(err, "reshard")
    assert tree_state(str(tmp_path)) == before


def test_a_dangling_link_as_staging_is_refused(tree, tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    os.symlink(str(tmp_path / "nowhere"), out / ".staging")
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", str(out), *FLAGS)
    assert status == 2, err
    assert ".staging" in _one_line(err, "build_shards")
    assert not (tmp_path / "nowhere").exists()


def test_clearing_staging_removes_links_below_it_as_links(tmp_path):
    """A link found inside the staging folder is unlinked; what it points at stays."""
    from transforms.storage.output_folder import clear_staging, staging_folder

    victim = _victim(tmp_path, "stg")
    out = tmp_path / "o"
    inner = os.path.join(staging_folder(str(out)), "run1")
    os.makedirs(inner)
    with open(os.path.join(inner, "part.tfrecord"), "wb") as fh:
        fh.write(b"x")
    os.symlink(victim, os.path.join(inner, "folder-link"))
    os.symlink(os.path.join(victim, "precious.txt"), os.path.join(inner, "file-link"))
    clear_staging(str(out))
    assert not os.path.lexists(staging_folder(str(out)))
    assert sorted(os.listdir(victim)) == ["precious.txt"]


def test_clearing_a_linked_staging_folder_refuses(tmp_path):
    from transforms.errors import PublishError
    from transforms.storage.output_folder import clear_staging, staging_folder

    victim = _victim(tmp_path, "stg")
    out = tmp_path / "o"
    out.mkdir()
    os.symlink(victim, staging_folder(str(out)))
    with pytest.raises(PublishError, match="link"):
        clear_staging(str(out))
    assert sorted(os.listdir(victim)) == ["precious.txt"]
    assert os.path.islink(staging_folder(str(out)))


def test_the_published_set_is_unchanged_by_a_refused_run(tree, tmp_path, capsys):
    out = tmp_path / "o"
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", str(out), *FLAGS)
    assert status == 0, err
    manifest = load_manifest(str(out))
    victim = _victim(tmp_path, "stg")
    os.symlink(victim, out / ".staging")
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", str(out), "--num_shards", "3")
    assert status == 2, err
    assert load_manifest(str(out)) == manifest


@pytest.mark.slow
def test_a_link_made_while_the_job_runs_is_refused_before_publishing(tree, tmp_path, capsys):
    """The publish checks the names again: a link made after the start check deletes nothing."""
    import subprocess
    import sys

    from tests.reliability.test_kill import REPO, _log_tail, _wait_for

    out = tmp_path / "o"
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", str(out), *FLAGS)
    assert status == 0, err
    old_manifest = load_manifest(str(out))
    marker = str(tmp_path / "marker.json")
    log = str(tmp_path / "job.log")
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.pause_at", "create", r"/\.staging/.*train-", "1", marker, "--",
             "--input", tree, "--output_dir", str(out), "--num_shards", "3", "--seed", "3"],
            cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait_for(marker, proc, log)
        victim = tmp_path / "victim" / "idx"
        victim.parent.mkdir()
        os.rename(out / "index", victim)  # the old set's .idx files, which the rebuild would delete
        os.symlink(victim, out / "index")
        before = tree_state(str(victim))
        open(marker + ".go", "w").close()
        assert proc.wait(timeout=180) == 1, _log_tail(log)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "index" in _log_tail(log) and "link" in _log_tail(log)
    assert "Traceback" not in _log_tail(log)
    assert tree_state(str(victim)) == before
    assert load_manifest(str(out)) == old_manifest
