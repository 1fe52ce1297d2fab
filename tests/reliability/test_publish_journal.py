"""Reliability: once a publish's journal is written, nothing deletes what it needs, and it goes forward.

A run whose publish fails after its journal is written (a worker died while
renaming) goes through the launcher's failure path, which clears staging
that nothing needs. The journal still needs the staged shards and files:
they must stay, and the next run into the folder must finish the publish
first, so the folder holds the new set whole (never neither set).
"""

from __future__ import annotations

import os
import re
import shutil

import pytest
from apache_beam.io.filesystems import FileSystems

from tests.reliability_support import assert_only_shard_set, folder_bytes, manifest_problems
from tests.shard_fixtures import make_class_tree
from transforms.shardset.ownership import PublishPolicy
from transforms.shardset.resume import RunMarker
from transforms.storage.run_lock_files import release_lock
from transforms.storage.output_folder import prepare_output

NEW = ["--num_shards", "2", "--split", "train"]
OLD = ["--num_shards", "3", "--split", "train"]


def _reshard(capsys, *argv: str) -> tuple[int, str]:
    from beam_jobs import reshard

    capsys.readouterr()
    status = reshard.run(list(argv))
    return status, capsys.readouterr().err


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """A source set to reshard, an older set in the output folder, and the uninterrupted result."""
    base = tmp_path_factory.mktemp("journal")
    tree, src = str(base / "in"), str(base / "src")
    make_class_tree(tree, per_class=3)
    from beam_jobs import build_shards

    assert build_shards.run(["--input", tree, "--output_dir", src, "--num_shards", "2", "--seed", "1",
                             "--max_bad_fraction", "0.5"]) == 0
    old, reference = str(base / "old"), str(base / "reference")
    from beam_jobs import reshard

    assert reshard.run(["--input", src + "/train-*", "--output_dir", old, *OLD]) == 0
    shutil.copytree(old, reference)
    assert reshard.run(["--input", src + "/train-*", "--output_dir", reference, *NEW]) == 0
    return src, old, reference


def _failing_rename(monkeypatch, pattern: str) -> None:
    """Makes the first ``FileSystems.rename`` to a path matching ``pattern`` fail, as a dying worker's would."""
    original = FileSystems.rename
    wanted = re.compile(pattern)

    def rename(sources, targets, *args, **kwargs):
        if any(wanted.search(t) for t in targets):
            raise OSError(f"worker lost while renaming to {targets[0]}")
        return original(sources, targets, *args, **kwargs)

    monkeypatch.setattr(FileSystems, "rename", staticmethod(rename))


@pytest.mark.parametrize("pattern", [r"/train-\d+-of-00002\.tfrecord$", r"/manifest\.json$"],
                         ids=["renaming_shards", "renaming_the_manifest"])
@pytest.mark.cpu_budget(6.0)  # the first test pays the sets the module builds once for all three
def test_a_publish_that_fails_after_its_journal_keeps_what_it_needs_and_the_next_run_finishes_it(
        sets, tmp_path, capsys, monkeypatch, pattern) -> None:
    src, old, reference = sets
    out = str(tmp_path / "out")
    shutil.copytree(old, out)
    _failing_rename(monkeypatch, pattern)
    status, err = _reshard(capsys, "--input", src + "/train-*", "--output_dir", out, *NEW)
    monkeypatch.undo()
    assert status != 0 and "worker lost while renaming" in err, err
    manifest = os.path.join(out, "manifest.json")
    if os.path.exists(manifest):  # a reader sees a whole set, or none
        assert manifest_problems(out, open(manifest, "rb").read()) == []
    # What the next run into the folder does first (any job): the interrupted publish is finished.
    policy = PublishPolicy("f" * 32)
    prepare_output(out, policy, "reshard")
    release_lock(out, policy.run_id)
    assert_only_shard_set(out)
    assert folder_bytes(out) == folder_bytes(reference)


@pytest.mark.cpu_budget(6.0)  # the first test pays the sets the module builds once for all three
def test_fresh_finishes_a_pending_publish_before_it_clears_staging(sets, tmp_path, capsys, monkeypatch) -> None:
    src, old, reference = sets
    out = str(tmp_path / "out")
    shutil.copytree(old, out)
    _failing_rename(monkeypatch, r"/manifest\.json$")
    assert _reshard(capsys, "--input", src + "/train-*", "--output_dir", out, *NEW)[0] != 0
    monkeypatch.undo()
    # The start of a build with --fresh (which clears every run's staging): the publish is finished first.
    policy = PublishPolicy("f" * 32, resume=RunMarker("f" * 32, "0" * 64, {}), fresh=True)
    prepare_output(out, policy, "build_shards")
    release_lock(out, policy.run_id)
    shutil.rmtree(os.path.join(out, ".staging"))  # the build's own marker
    assert_only_shard_set(out)
    assert folder_bytes(out) == folder_bytes(reference)
