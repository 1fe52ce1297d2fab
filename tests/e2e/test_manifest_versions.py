"""Manifest format 2 end to end: ``manifest.json`` plus ``shards.jsonl``, and format-1 folders still work.

A format-1 folder is made by rewriting a fresh build's manifest in the old layout
(``shard_fixtures.write_v1_manifest``: every shard inside ``manifest.json``, no
``shards.jsonl``); verify, reshard and a ``--split`` build that keeps its other
split must all work on it.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.reliability_support import assert_only_shard_set
from tests.shard_fixtures import load_manifest, make_class_tree, run_build, write_v1_manifest
from tests.trees import Part

FLAGS = ["--num_shards", "2", "--seed", "3"]


def _run(capsys, module: str, *argv: str) -> tuple[int, str]:
    import importlib

    job = importlib.import_module(f"beam_jobs.{module}")
    capsys.readouterr()
    status = job.run(list(argv))
    out, err = capsys.readouterr()
    return status, out + err


def _report(path) -> list[tuple[str, str]]:
    with open(path, "rb") as fh:
        return sorted((os.path.basename(p["file"]), p["kind"]) for p in json.load(fh)["problems"])


TREES = {"train": (Part(per_class=3, seed=1),), "val": (Part(per_class=2, seed=2),)}  # tests/trees.py


def _build(capsys, tree: str, out: str, *extra: str) -> None:
    status, text = _run(capsys, "build_shards", "--input", tree, "--output_dir", out, *FLAGS, *extra)
    assert status == 0, text


@pytest.mark.slow
def test_a_build_writes_a_small_manifest_and_its_shard_list(tmp_path, capsys, trees):
    out = str(tmp_path / "out")
    _build(capsys, trees["train"], out)
    with open(os.path.join(out, "manifest.json"), "rb") as fh:
        raw = json.load(fh)
    assert raw["format_version"] == 2 and "shards" not in raw["splits"]["train"]
    assert raw["splits"]["train"]["num_shards"] == 2 and raw["shards"]["file"] == "shards.jsonl"
    with open(os.path.join(out, "shards.jsonl"), "rb") as fh:
        lines = fh.read().splitlines()
    assert raw["shards"]["lines"] == len(lines) == 2
    assert [(json.loads(l)["split"], json.loads(l)["index"]) for l in lines] == [("train", 0), ("train", 1)]
    # The per-split totals are the sums of the lines.
    totals: dict[str, int] = {}
    for line in lines:
        for label, count in json.loads(line)["label_counts"].items():
            totals[label] = totals.get(label, 0) + count
    assert totals == raw["splits"]["train"]["label_counts"]


@pytest.mark.slow
def test_verify_reports_a_tampered_or_missing_shard_list(tmp_path, capsys, trees):
    out = str(tmp_path / "out")
    _build(capsys, trees["train"], out)
    path = os.path.join(out, "shards.jsonl")
    with open(path, "rb") as fh:
        original = fh.read()
    with open(path, "wb") as fh:
        fh.write(original.replace(b'"records":', b'"records": ', 1))  # same content, other bytes
    report = tmp_path / "report.json"
    status, text = _run(capsys, "verify_shards", "--output_dir", out, "--report", str(report))
    assert status == 1, text
    assert _report(report) == [("shards.jsonl", "parse_error")]
    size = len(original)  # 386 with the shards' keys_crc32c
    assert json.loads(report.read_bytes())["problems"][0]["detail"].endswith(
        f"{size + 1} bytes, manifest.json says {size}")
    os.remove(path)
    status, text = _run(capsys, "verify_shards", "--output_dir", out, "--report", str(report))
    assert status == 1, text
    assert _report(report) == [("shards.jsonl", "missing_file")]


@pytest.mark.slow
def test_a_version_1_folder_verifies_and_reshards(tmp_path, capsys, trees):
    out = str(tmp_path / "v1")
    _build(capsys, trees["train"], out)
    before = load_manifest(out)
    write_v1_manifest(out)
    assert not os.path.exists(os.path.join(out, "shards.jsonl"))
    status, text = _run(capsys, "verify_shards", "--output_dir", out)
    assert status == 0, text
    again = str(tmp_path / "again")
    status, text = _run(capsys, "reshard", "--input", os.path.join(out, "*"), "--output_dir", again,
                        "--num_shards", "3")
    assert status == 0, text
    after = load_manifest(again)
    assert after["format_version"] == 2 and after["records"] == before["records"]
    assert after["splits"]["train"]["label_counts"] == before["splits"]["train"]["label_counts"]
    # A pattern over a format-2 set leaves its shards.jsonl out, as it does manifest.json.
    third = str(tmp_path / "third")
    status, text = _run(capsys, "reshard", "--input", os.path.join(again, "*"), "--output_dir", third,
                        "--num_shards", "2")
    assert status == 0, text
    assert load_manifest(third)["records"] == before["records"]


@pytest.mark.slow
def test_a_split_build_into_a_version_1_folder_keeps_its_other_split(tmp_path, capsys, trees):
    out = str(tmp_path / "out")
    _build(capsys, trees["train"], out, "--split", "train")
    train = load_manifest(out)["splits"]["train"]
    write_v1_manifest(out)
    _build(capsys, trees["val"], out, "--split", "validation")
    manifest = load_manifest(out)
    assert manifest["format_version"] == 2 and sorted(manifest["splits"]) == ["train", "validation"]
    assert manifest["splits"]["train"]["shards"] == train["shards"]  # label counts carried over
    assert manifest["splits"]["train"]["label_counts"] == train["label_counts"]
    assert_only_shard_set(out)
    status, text = _run(capsys, "verify_shards", "--output_dir", out)
    assert status == 0, text
    # Keeping a split from a format-2 folder copies its lines from the old shards.jsonl.
    _build(capsys, trees["val"], out, "--split", "validation")
    assert load_manifest(out) == manifest


@pytest.mark.slow
def test_a_split_build_refuses_a_folder_whose_shard_list_was_changed(tmp_path, capsys, trees):
    out = str(tmp_path / "out")
    _build(capsys, trees["train"], out, "--split", "train")
    path = os.path.join(out, "shards.jsonl")
    with open(path, "ab") as fh:
        fh.write(b"\n")
    status, text = _run(capsys, "build_shards", "--input", trees["val"], "--output_dir", out, *FLAGS,
                        "--split", "validation")
    assert status != 0
    assert "its manifest.json cannot be read (shards.jsonl line 3: not a JSON line" in text, text
    assert sorted(n for n in os.listdir(out) if n.endswith(".tfrecord")) == [
        "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]  # nothing was touched


def test_publish_is_given_only_the_shard_list_parts(tmp_path, monkeypatch):
    from transforms.shardset import staged
    from transforms.shardset.ownership import PublishPolicy
    from transforms.shardset.planning import SplitTotals
    from transforms.storage.run_lock_files import acquire_lock
    from tests.helpers import publish_shards
    from transforms.storage.shard_files import write_shard, write_shard_list_part

    out = str(tmp_path / "out")
    os.makedirs(out)
    policy = PublishPolicy("a" * 32)
    acquire_lock(out, policy, "build_shards")
    monkeypatch.setattr(staged, "PART_SHARDS", 2)  # three parts over five shards
    written = [write_shard(out, ("train", i, 5), [(b"x" * (i + 1), i % 3)], "none", policy.run_id)
               for i in range(4)]  # shard 4 is empty: publish writes it
    parts = [write_shard_list_part((("train", p), [r for r in written if r.index // 2 == p]), out,
                                   policy.run_id) for p in (0, 1)]
    totals = [SplitTotals("train", 100, 4, 20, 5)]
    manifest = publish_shards(
        out, parts, totals, [], ["a", "b", "c"], 4, "none",
        {"created_by": "build_shards", "options": {}, "seed": 0, "feature_spec": {}}, None, policy)
    listed = load_manifest(out)
    assert listed["splits"]["train"]["label_counts"] == {"0": 2, "1": 1, "2": 1}
    assert [s["label_counts"] for s in listed["splits"]["train"]["shards"]] == [
        {"0": 1}, {"1": 1}, {"2": 1}, {"0": 1}, {}]
    assert manifest.splits["train"].label_counts() == {"0": 2, "1": 1, "2": 1}
    assert [p.records for p in parts] == [2, 2]
    assert sorted(n for n in os.listdir(out) if n.endswith(".tfrecord")) == [
        f"train-0000{i}-of-00005.tfrecord" for i in range(5)]


def test_the_publish_step_gets_no_side_input_element_per_shard(tmp_path, capsys, monkeypatch):
    """A build of 12 shards: every side input of ``PreparePublish`` has one element per part or fewer."""
    from transforms import shard_sink

    make_class_tree(str(tmp_path / "in"), per_class=4, broken=False)
    seen: list[tuple[str, int]] = []
    publish = shard_sink._PreparePublishFn.process

    def recording(self, element, *args, **kwargs):
        args = [a if isinstance(a, (dict, str, int)) else list(a) for a in args]
        seen.extend((type(a[0]).__name__, len(a)) for a in args
                    if isinstance(a, list) and a and not isinstance(a[0], str))  # not the class names
        return publish(self, element, *args, **kwargs)

    monkeypatch.setattr(shard_sink._PreparePublishFn, "process", recording)
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(tmp_path / "out"),
                               "--num_shards", "12")
    assert status == 0, err
    assert len(load_manifest(str(tmp_path / "out"))["splits"]["train"]["shards"]) == 12
    assert {kind for kind, _ in seen} == {"ShardListPart", "SplitTotals"}, seen
    assert all(count == 1 for _, count in seen), seen


@pytest.mark.slow
def test_renames_run_in_parallel_chunks_and_all_before_the_manifest(tmp_path, capsys, trees, monkeypatch):
    import threading

    from apache_beam.io.filesystems import FileSystems
    from transforms.storage import folders

    monkeypatch.setattr(folders, "RENAME_CHUNK", 1)
    calls, threads = [], set()
    main = threading.get_ident()
    rename = FileSystems.rename

    def spy(sources, destinations):
        calls.append([os.path.basename(d) for d in destinations])
        if any(d.endswith((".tfrecord", ".idx")) for d in destinations):
            threads.add(threading.get_ident())
        if any(d.endswith(".tfrecord") for d in destinations):
            assert not os.path.exists(os.path.join(out, "manifest.json"))
        return rename(sources, destinations)

    out = str(tmp_path / "out")
    monkeypatch.setattr(FileSystems, "rename", staticmethod(spy))
    _build(capsys, trees["train"], out, "--num_shards", "4")
    shard_calls = [c for c in calls if any(n.endswith((".tfrecord", ".idx")) for n in c)]
    assert len(shard_calls) == 8 and all(len(c) == 1 for c in shard_calls)  # 4 shards + 4 indexes
    assert main not in threads  # more than one chunk: all renamed by the pool
    assert calls[-1] == ["manifest.json"] and ["shards.jsonl"] in calls
