"""Publishing hands its renames to the workers: ``PreparePublish``, ``MoveStaged`` on every worker, ``CommitPublish``.

A set with ``folders.PARALLEL_MOVES`` renames or more has them done by the
workers, in chunks, between the step that writes the journal and the step that
writes the manifest. Here the threshold is lowered to 0 (every build hands its
renames out, in chunks of one or two) and the result must be byte for byte
what a build that renames in its one publish step gives; with two worker
processes both rename; the commit step is given counts, not the renames;
and with every bundle run three times (``--direct_runner_bundle_repeat 2``, as a
runner retries a bundle whose results it lost) the set is the same.
"""

from __future__ import annotations

import os
import pickle

import apache_beam as beam
import pytest

from tests.reliability_support import assert_only_shard_set, folder_bytes
from tests.shard_fixtures import make_class_tree, run_build
from tests.trees import Part
from transforms import shard_sink

FLAGS = ["--num_shards", "8", "--seed", "5", "--max_bad_fraction", "0.5"]
TWO_PROCESSES = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]


# An input tree and the set an unchanged build (renames in its publish step) makes of it (tests/trees.py).
TREE = (Part(per_class=4, broken=True),)
BUILD = tuple(FLAGS)


def _hand_out_every_rename(monkeypatch, chunk: int) -> list:
    """Lowers the threshold to 0 and the chunk to ``chunk``; returns the list the runs' results go to."""
    monkeypatch.setattr(shard_sink, "PARALLEL_MOVES", 0)
    monkeypatch.setattr(shard_sink, "RENAME_CHUNK", chunk)
    results, run = [], beam.Pipeline.run

    def keep_result(self, *args, **kwargs):
        results.append(run(self, *args, **kwargs))
        return results[-1]

    monkeypatch.setattr(beam.Pipeline, "run", keep_result)
    return results


def _move_processes(result) -> int:
    from apache_beam.metrics.metric import MetricsFilter

    found = result.metrics().query(MetricsFilter().with_namespace("shard_sink").with_name(
        shard_sink.MOVE_PROCESSES))["counters"]
    return sum(c.committed for c in found)


@pytest.mark.slow
def test_two_worker_processes_rename_and_publish_the_same_bytes(built, tmp_path, capsys, monkeypatch) -> None:
    inputs, reference = built.root, built.out
    results = _hand_out_every_rename(monkeypatch, chunk=1)  # 16 chunks: a shard or an .idx each
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", out, *FLAGS, *TWO_PROCESSES)
    assert status == 0, err
    assert _move_processes(results[-1]) == 2
    assert_only_shard_set(out)
    assert folder_bytes(out) == folder_bytes(reference)


@pytest.mark.slow
def test_the_commit_step_is_given_counts_not_the_renames(built, tmp_path, capsys, monkeypatch) -> None:
    inputs, reference = built.root, built.out
    results = _hand_out_every_rename(monkeypatch, chunk=2)
    from apache_beam.io.filesystems import FileSystems

    staged: list[str] = []
    rename = FileSystems.rename

    def spy(sources, destinations):
        staged.extend(s for s, d in zip(sources, destinations) if d.endswith((".tfrecord", ".idx", ".keys")))
        return rename(sources, destinations)

    given = []
    commit = shard_sink._CommitPublishFn.process

    def recording(self, element, done):
        done = list(done)
        given.append((pickle.dumps(element), done))
        return commit(self, element, done)

    monkeypatch.setattr(FileSystems, "rename", staticmethod(spy))
    monkeypatch.setattr(shard_sink._CommitPublishFn, "process", recording)
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", out, *FLAGS)
    assert status == 0, err
    assert len(staged) == 24  # 8 shards, their .idx and their keys files, renamed by MoveStaged
    ((element, done),) = given
    assert not [name for name in staged if os.path.basename(name).encode() in element]
    assert len(element) < 600  # where the commit record is staged, not the record (an entry per shard)
    assert all(isinstance(d, shard_sink.MovesDone) for d in done) and sum(d.moves for d in done) == 24
    assert _move_processes(results[-1]) == 1
    assert folder_bytes(out) == folder_bytes(reference)


@pytest.mark.slow
def test_repeated_bundles_keep_the_other_split_and_publish_the_same_bytes(tree, tmp_path, capsys, monkeypatch) -> None:
    """The prepare step run again finds the manifest it deleted (its journal, its staging); the commit
    step run again finds the set published."""
    inputs = tree
    make_class_tree(str(tmp_path / "other"), per_class=3, broken=False, seed=7)
    outs = [str(tmp_path / name) for name in ("once", "repeated")]
    for out in outs:  # a published validation split, which the train build keeps
        status, _, err = run_build(capsys, "--input", str(tmp_path / "other"), "--output_dir", out,
                                   "--split", "validation",
                                   "--num_shards", "2", "--seed", "5", "--max_bad_fraction", "0.5")
        assert status == 0, err
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", outs[0], "--split", "train", *FLAGS)
    assert status == 0, err
    _hand_out_every_rename(monkeypatch, chunk=3)
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", outs[1], "--split", "train", *FLAGS,
                               "--direct_runner_bundle_repeat", "2")
    assert status == 0, err
    assert_only_shard_set(outs[1])
    assert sorted(n for n in os.listdir(outs[1]) if n.startswith("validation-")) == [
        "validation-00000-of-00002.tfrecord", "validation-00001-of-00002.tfrecord"]
    assert folder_bytes(outs[1]) == folder_bytes(outs[0])


@pytest.mark.slow
@pytest.mark.parametrize("repeat", [[], ["--direct_runner_bundle_repeat", "2"]], ids=["once", "repeated"])
def test_an_append_hands_out_its_shard_renames_and_publishes_the_same_bytes(tmp_path, capsys, monkeypatch,
                                                                            repeat) -> None:
    make_class_tree(str(tmp_path / "day1"), per_class=6, broken=False, seed=1)
    make_class_tree(str(tmp_path / "day2"), classes=("lily",), per_class=6, broken=False, seed=2)
    flags = ["--shard_size_mb", "0.02", "--seed", "3"]
    from beam_jobs import append_shards

    outs = [str(tmp_path / name) for name in ("serial", "parallel")]
    for out in outs:
        status, _, err = run_build(capsys, "--input", str(tmp_path / "day1"), "--output_dir", out, *flags)
        assert status == 0, err
    before = sorted(os.listdir(outs[0]))
    assert append_shards.run(["--input", str(tmp_path / "day2"), "--output_dir", outs[0], *flags]) == 0
    results = _hand_out_every_rename(monkeypatch, chunk=1)
    assert append_shards.run(["--input", str(tmp_path / "day2"), "--output_dir", outs[1], *flags, *repeat]) == 0
    assert _move_processes(results[-1]) == 1
    renamed = [n for n in before if n.endswith(".tfrecord") and n not in os.listdir(outs[1])]
    assert renamed, "the append keeps every published shard's name: no published shard was renamed"
    assert_only_shard_set(outs[1])
    assert folder_bytes(outs[1]) == folder_bytes(outs[0])
