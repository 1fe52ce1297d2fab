"""The pure plan of a publish: splits kept, replaced and appended, renames in order, deletions after."""

from __future__ import annotations

import pytest

from transforms.errors import PublishError
from transforms.shardset.manifest import Manifest, ShardEntry, ShardsFile, SplitCounts, SplitEntry
from transforms.shardset.ownership import owned_files
from transforms.shardset.planning import SplitTotals
from transforms.shardset.publish_plan import (new_manifest, plan_journal, plan_publish, relative_name,
                                              staged_name, unwritten_shards)
from transforms.shardset.staged import StagedShard

OUT = "/data/out"
STAGING = ".staging/" + "a" * 32
FIELDS = {"created_by": "build_shards", "options": {"input": ["/in"]}, "seed": 1, "feature_spec": {}}


def _shard(name: str, records: int = 2, counts: dict | None = None) -> ShardEntry:
    return ShardEntry(name, records, 10 * records, name[:1] * 64, counts or {})


def _split(name: str, count: int, counts: dict | None = None) -> SplitEntry:
    shards = [_shard(f"{name}-{i:05d}-of-{count:05d}.tfrecord", counts=counts) for i in range(count)]
    return SplitEntry(name, shards, SplitCounts(2 * count, 20 * count, count,
                                                {k: v * count for k, v in (counts or {}).items()}))


def _old(*splits: SplitEntry) -> Manifest:
    return Manifest(created_by="build_shards", options={"input": ["/old"]}, seed=1, compression="none",
                    feature_spec={}, labels=["a", "b"], splits={s.name: s for s in splits},
                    dead_letters=3, images={"source_formats": {"jpeg": 4}}, built_from={},
                    object_labels=((1, "cat"),))


def _files(manifest: Manifest) -> set[str]:
    return {name for shard in manifest.shard_files() for name in (shard, f"index/{shard}.idx")}


def _staged(split: str, index: int, count: int, index_file: bool = True) -> StagedShard:
    name = f"{split}-{index:05d}-of-{count:05d}.tfrecord"
    staged = f"{OUT}/{STAGING}/{name}.{index}.tmp"
    return StagedShard(name, staged, staged + ".idx" if index_file else None, 3, 30, "c" * 64)


def _all_staged(split: str, count: int) -> dict:
    return {(split, i): _staged(split, i, count) for i in range(count)}


def test_a_build_into_an_empty_folder_renames_every_staged_shard_and_deletes_nothing() -> None:
    plan = plan_publish(OUT, None, _all_staged("train", 2), [SplitTotals("train", 60, 6, 10, 2)], {},
                        {"train": {"0": 6}}, (), set(), "none")
    assert plan.shard_moves == (
        (f"{STAGING}/train-00000-of-00002.tfrecord.0.tmp", "train-00000-of-00002.tfrecord"),
        (f"{STAGING}/train-00000-of-00002.tfrecord.0.tmp.idx", "index/train-00000-of-00002.tfrecord.idx"),
        (f"{STAGING}/train-00001-of-00002.tfrecord.1.tmp", "train-00001-of-00002.tfrecord"),
        (f"{STAGING}/train-00001-of-00002.tfrecord.1.tmp.idx", "index/train-00001-of-00002.tfrecord.idx"))
    assert plan.remove == ()
    assert plan.splits["train"].counts == SplitCounts(6, 60, 2, {"0": 6})


def test_a_replaced_split_deletes_the_old_shards_it_does_not_overwrite_and_keeps_the_other_split() -> None:
    old = _old(_split("train", 3), _split("validation", 1))
    present = _files(old) | {"manifest.json", "notes.txt"}
    kept = {"validation": old.splits["validation"]}
    plan = plan_publish(OUT, old, _all_staged("train", 2), [SplitTotals("train", 60, 6, 10, 2)], kept,
                        {}, present, owned_files(old, None), "none")
    assert list(plan.splits) == ["validation", "train"]  # kept splits first, as listed before
    assert plan.splits["validation"].shards == old.splits["validation"].shards
    # Other names (-of-00003): every old train shard and its .idx go; nothing else of the folder.
    assert set(plan.remove) == {f"{p}train-0000{i}-of-00003.tfrecord{s}" for i in range(3)
                                for p, s in (("", ""), ("index/", ".idx"))}
    assert not set(plan.remove) & plan.keep
    assert "notes.txt" not in plan.remove and "validation-00000-of-00001.tfrecord" in plan.keep
    assert set(plan.remove) <= plan.claimed and plan.keep <= plan.claimed


def test_a_build_with_the_same_shard_names_overwrites_them_and_deletes_none() -> None:
    old = _old(_split("train", 2))
    plan = plan_publish(OUT, old, _all_staged("train", 2), [SplitTotals("train", 60, 6, 10, 2)], {}, {},
                        _files(old), owned_files(old, None), "none")
    assert plan.remove == ()
    assert [target for _, target in plan.shard_moves if not target.startswith("index/")] == [
        "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]


@pytest.mark.parametrize("overwrite, removed", [(False, ()), (True, ("train-00009-of-00010.tfrecord",))])
def test_unlisted_shard_named_files_are_deleted_only_when_told(overwrite, removed) -> None:
    plan = plan_publish(OUT, None, _all_staged("train", 1), [SplitTotals("train", 30, 3, 10, 1)], {}, {},
                        {"train-00009-of-00010.tfrecord", "README"}, set(), "none", overwrite_unlisted=overwrite)
    assert plan.remove == removed


def test_an_append_keeps_published_shards_renamed_to_the_new_count_and_merges_counts() -> None:
    old = _old(_split("train", 3, counts={"0": 1, "1": 1}))
    totals = SplitTotals("train", 90, 9, 10, 2, published=3, merged=1, lead_bytes=20)
    assert unwritten_shards([totals], {}) == [("train", 1, 4), ("train", 3, 4)]
    staged = {("train", 1): _staged("train", 1, 4), ("train", 3): _staged("train", 3, 4)}
    plan = plan_publish(OUT, old, staged, [totals], {}, {"train": {"0": 4, "1": 3}}, _files(old),
                        owned_files(old, None), "none", appending=True, merged_counts={"train": {"0": 1, "1": 1}})
    assert set(plan.shard_moves) == {
        ("train-00000-of-00003.tfrecord", "train-00000-of-00004.tfrecord"),
        ("index/train-00000-of-00003.tfrecord.idx", "index/train-00000-of-00004.tfrecord.idx"),
        ("train-00002-of-00003.tfrecord", "train-00002-of-00004.tfrecord"),
        ("index/train-00002-of-00003.tfrecord.idx", "index/train-00002-of-00004.tfrecord.idx"),
        (f"{STAGING}/train-00001-of-00004.tfrecord.1.tmp", "train-00001-of-00004.tfrecord"),
        (f"{STAGING}/train-00001-of-00004.tfrecord.1.tmp.idx", "index/train-00001-of-00004.tfrecord.idx"),
        (f"{STAGING}/train-00003-of-00004.tfrecord.3.tmp", "train-00003-of-00004.tfrecord"),
        (f"{STAGING}/train-00003-of-00004.tfrecord.3.tmp.idx", "index/train-00003-of-00004.tfrecord.idx")}
    # The merged shard (rewritten with the new records) goes; the renamed ones are not deleted.
    assert set(plan.remove) == {"train-00001-of-00003.tfrecord", "index/train-00001-of-00003.tfrecord.idx"}
    train = plan.splits["train"]
    assert [e.file for e in train.shards] == [f"train-0000{i}-of-00004.tfrecord" for i in range(4)]
    assert train.counts.label_counts == {"0": 3 - 1 + 4, "1": 3 - 1 + 3}
    assert train.counts.records == 2 + 3 + 2 + 3


def test_an_append_refuses_a_published_shard_without_its_index() -> None:
    old = _old(_split("train", 2))
    totals = SplitTotals("train", 60, 6, 10, 1, published=2)
    with pytest.raises(PublishError, match="the index of train-00000-of-00002.tfrecord is missing"):
        plan_publish(OUT, old, {("train", 2): _staged("train", 2, 3)}, [totals], {}, {},
                     {"train-00000-of-00002.tfrecord"}, owned_files(old, None), "none", appending=True)


def test_the_journal_renames_shards_then_set_files_with_the_manifest_last_then_deletes() -> None:
    old = _old(_split("train", 3))
    plan = plan_publish(OUT, old, _all_staged("train", 1), [SplitTotals("train", 30, 3, 10, 1)], {}, {},
                        _files(old), owned_files(old, None), "none")
    files = [(staged_name(STAGING, name), name) for name in
             ("manifest.json", "dead_letters.jsonl", "labels.txt", "shards.jsonl", "near_duplicates.jsonl")]
    journal = plan_journal("r" * 32, plan, files, removed=["old_sidecar.jsonl"])
    targets = [target for _, target in journal.moves]
    assert targets[:2] == ["train-00000-of-00001.tfrecord", "index/train-00000-of-00001.tfrecord.idx"]
    assert targets[2:] == ["dead_letters.jsonl", "labels.txt", "shards.jsonl", "near_duplicates.jsonl",
                           "manifest.json"]
    assert journal.moves[-1] == (f"{STAGING}/manifest.json.next", "manifest.json")
    # The old set's files go only after the new manifest is in place, and the journal claims them.
    assert set(journal.remove) == ({f"{p}train-0000{i}-of-00003.tfrecord{s}" for i in range(3)
                                    for p, s in (("", ""), ("index/", ".idx"))} | {"old_sidecar.jsonl"})
    assert not {target for _, target in journal.moves} & set(journal.remove)
    assert set(journal.remove) <= set(journal.claimed)
    assert type(journal).loads(journal.dumps()) == journal
    with pytest.raises(PublishError, match="stages no manifest.json"):
        plan_journal("r" * 32, plan, files[1:])


def test_the_new_manifest_of_a_build_and_of_an_append() -> None:
    old = _old(_split("train", 1), _split("validation", 1))
    plan = plan_publish(OUT, old, _all_staged("train", 1), [SplitTotals("train", 30, 3, 10, 1)],
                        {"validation": old.splits["validation"]}, {}, _files(old), owned_files(old, None), "none")
    listed = ShardsFile("shards.jsonl", "d" * 64, 100, 2)
    fields = {**FIELDS, "images": {"source_formats": {"png": 2}}, "object_labels": ((1, "cat"), (2, "dog"))}
    built = new_manifest(fields, "none", ["a", "b"], plan, old, ["validation"], ["train"], 1, listed, ("/in",))
    assert (built.dead_letters, built.images, built.written_splits, built.appended) == (
        1, {"source_formats": {"png": 2}}, ["train"], {})
    assert built.built_from == {"validation": ("/old",), "train": ("/in",)}
    appended = new_manifest(fields, "none", ["a", "b"], plan, old, ["validation"], ["train"], 1, listed,
                            ("/in",), appending=True)
    assert appended.dead_letters == 4 and appended.images == {"source_formats": {"jpeg": 4, "png": 2}}
    assert appended.appended == {"train": 2} and appended.built_from["train"] == ("/old", "/in")
    assert appended.object_labels == ((1, "cat"), (2, "dog"))
    with pytest.raises(PublishError, match="object class id 1 is 'cat' in /data/out but 'cow'"):
        new_manifest({**fields, "object_labels": ((1, "cow"),)}, "none", [], plan, old, [], ["train"], 0,
                     listed, None, appending=True, where=OUT)


def test_relative_names_are_below_the_folder() -> None:
    assert relative_name(OUT, OUT + "/.staging/x/a.tmp") == ".staging/x/a.tmp"
    with pytest.raises(PublishError, match="is not in /data/out"):
        relative_name(OUT, "/data/outside/a.tmp")


def test_keys_files_are_renamed_kept_and_removed_with_their_shards() -> None:
    import dataclasses

    old = _old(_split("train", 3))
    split = old.splits["train"]
    old = dataclasses.replace(old, splits={"train": dataclasses.replace(split, shards=[
        dataclasses.replace(s, keys_crc32c="AAAAAA==") for s in split.shards])})
    present = _files(old) | {f"index/{s}.keys" for s in old.shard_files()}
    totals = SplitTotals("train", 90, 9, 10, 2, published=3, merged=1, lead_bytes=20)
    staged = {(s, i): dataclasses.replace(shard, staged_keys=shard.staged + ".keys", keys_crc32c="BBBBBB==")
              for (s, i), shard in {("train", 1): _staged("train", 1, 4), ("train", 3): _staged("train", 3, 4)}.items()}
    plan = plan_publish(OUT, old, staged, [totals], {}, {"train": {}}, present, owned_files(old, None), "none",
                        appending=True, merged_counts={"train": {}})
    moves = set(plan.shard_moves)
    assert ("index/train-00000-of-00003.tfrecord.keys", "index/train-00000-of-00004.tfrecord.keys") in moves
    assert (f"{STAGING}/train-00001-of-00004.tfrecord.1.tmp.keys", "index/train-00001-of-00004.tfrecord.keys") in moves
    assert "index/train-00001-of-00003.tfrecord.keys" in plan.remove  # the merged shard's
    assert [e.keys_crc32c for e in plan.splits["train"].shards] == ["AAAAAA==", "BBBBBB==", "AAAAAA==", "BBBBBB=="]
    assert {f"index/train-0000{i}-of-00004.tfrecord.keys" for i in range(4)} <= plan.keep
