"""A small disk for the output: --staging_dir elsewhere makes a build fit that did not.

The output folder is a 2 MiB tmpfs (``small_disk``): it holds the shards of
about 1.2 MB of inputs, but not the shards and the run files at once. Without
the flag the build fails with the disk-full line; with ``--staging_dir`` on
another disk it publishes the bytes a build on a roomy disk publishes. With
the staging folder on the small disk instead, the line names that folder.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.reliability.test_publish import _noise_tree, _one_line, small_disk  # noqa: F401 (a fixture)
from tests.reliability_support import assert_only_shard_set, folder_bytes
from tests.shard_fixtures import run_build
from transforms.shardset.disk_needs import size_text

FLAGS = ["--num_shards", "1"]


def _inputs(tmp_path) -> tuple[str, int]:
    inputs = str(tmp_path / "in")
    _noise_tree(inputs, classes=2, per_class=5, side=200, seed=3)  # about 1.2 MB of PNGs kept as they are
    size = sum(os.path.getsize(os.path.join(where, name)) for where, _, names in os.walk(inputs) for name in names)
    return inputs, size


@pytest.mark.slow
def test_a_build_that_does_not_fit_beside_its_output_publishes_with_staging_dir_elsewhere(tmp_path, small_disk,
                                                                                         capsys) -> None:
    inputs, size = _inputs(tmp_path)
    free = shutil.disk_usage(small_disk).free
    assert size < free < 2 * size  # the shards fit; shards and run files do not
    reference = str(tmp_path / "reference")
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", reference, *FLAGS)
    assert status == 0, err

    out = os.path.join(small_disk, "out")
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", out, *FLAGS)
    line = _one_line(err)
    # The run files fit; the shards, staged beside them, do not.
    assert status == 1 and f"no space left in {out} writing {out}/.staging/" in line, line
    assert "free there at its peak (twice its inputs'" in line, line
    assert os.listdir(out) == [".staging"]  # kept for a rerun; one with other flags clears it first

    stage = str(tmp_path / "stage")
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", out, "--staging_dir", stage, *FLAGS)
    assert status == 0, err
    assert folder_bytes(out) == folder_bytes(reference)
    assert_only_shard_set(out)
    assert os.listdir(stage) == []  # the run's own folder there, removed once it published


@pytest.mark.slow
def test_a_full_staging_dir_is_named_in_the_disk_full_line(tmp_path, small_disk, capsys) -> None:
    inputs, _ = _inputs(tmp_path)
    _noise_tree(inputs, classes=2, per_class=9, side=200, seed=4)  # more: over the 2 MiB
    size = sum(os.path.getsize(os.path.join(where, name)) for where, _, names in os.walk(inputs) for name in names)
    out, stage = str(tmp_path / "out"), os.path.join(small_disk, "stage")
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", out, "--staging_dir", stage, *FLAGS)
    line = _one_line(err)
    assert status == 1
    assert f"no space left in {stage} writing {stage}/tfrecord-shards-" in line, line
    assert "run files need free space in --staging_dir" in line, line
    free_stage, free_out = shutil.disk_usage(small_disk).free, shutil.disk_usage(str(tmp_path)).free
    kept = sum(os.path.getsize(os.path.join(where, name)) for where, _, names in os.walk(stage) for name in names)
    assert line.endswith(f"; this build needs about {size_text(size)} free in {stage} for its run files "
                         f"({size_text(free_stage)} free now besides the {size_text(kept)} it staged: free about "
                         f"{size_text(size - kept - free_stage)} more) "
                         f"and about {size_text(size)} in {out} for its shards ({size_text(free_out)} free now)"), line
    # Kept for a rerun, in both places (the run files in the run's own folder of --staging_dir).
    assert len(os.listdir(stage)) == 1 and os.path.exists(os.path.join(out, ".staging"))
