"""Unit tests of transforms.shardset.replacing, the manifest's ``built_from`` and
``written_splits``, and ``discover_images.folder_tasks`` against the build's own layout rule."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from transforms.errors import ManifestError
from transforms.discover_images import folder_tasks
from transforms.images.inputs import is_hidden
from tests.helpers import detect_layout
from transforms.shardset.manifest import Manifest, ShardEntry, SplitEntry
from transforms.shardset.replacing import (SplitChange, change_line, kept_built_from, replace_problem,
                                           same_inputs, split_changes, split_inputs)
from tests.helpers import shard_list_bytes


def _manifest(built_from=None, options_input=("photos/",), written=None, records=None) -> Manifest:
    records = records or {"train": 2715, "validation": 291}
    splits = {name: SplitEntry(name, [ShardEntry(f"{name}-00000-of-00001.tfrecord", count, 10, "0" * 64, {})])
              for name, count in records.items()}
    options = {"input": list(options_input)} if options_input is not None else {}
    return Manifest("build_shards", options, 0, "none", {}, [], splits, 0,
                    built_from=built_from or {}, written_splits=written)


def _written(manifest: Manifest) -> Manifest:
    """``manifest`` as written to and read back from ``manifest.json``."""
    data, _ = shard_list_bytes(manifest)
    return Manifest.loads(data)


@pytest.mark.parametrize("a, b, same", [
    (["photos/"], ["photos"], True),
    (["photos//"], ["photos"], True),
    (["a", "b"], ["b/", "a"], True),
    (["a", "a"], ["a"], True),
    (["/"], ["/"], True),
    (["gs://bucket/photos/"], ["gs://bucket/photos"], True),
    (["photos"], ["new"], False),
    (["photos"], ["photos", "new"], False),
    (["photos"], ["./photos"], False),  # only trailing slashes are normalised
])
def test_same_inputs(a, b, same):
    assert same_inputs(a, b) is same


def test_split_inputs_are_recorded_per_split_else_the_options():
    manifest = _manifest(built_from={"validation": ["val/"]})
    assert split_inputs(manifest, "validation") == ("val/",)
    assert split_inputs(manifest, "train") == ("photos/",)
    assert split_inputs(_manifest(options_input=None), "train") is None
    assert kept_built_from(manifest, ["train", "validation"]) == {"train": ("photos/",), "validation": ("val/",)}
    assert kept_built_from(_manifest(options_input=None), ["train"]) == {}


@pytest.mark.parametrize("splits, inputs, refused", [
    (["train"], ["new/"], "train"),
    (["train"], ["photos"], None),  # the same inputs: a rebuild
    (["test"], ["new/"], None),  # a new split
    (["validation", "train"], ["new/"], "train"),  # the first by name
    (["validation"], ["photos/"], "validation"),  # recorded per split: val/ built it
    (["train"], None, None),  # the run's inputs unknown: nothing to compare
])
def test_replace_problem(splits, inputs, refused):
    old = _manifest(built_from={"validation": ["val/"]})
    problem = replace_problem("out/photos", old, splits, inputs)
    if refused is None:
        assert problem is None
    else:
        assert problem is not None and f"split {refused!r}" in problem and "--replace" in problem


def test_replace_problem_names_the_split_its_records_and_both_inputs():
    problem = replace_problem("out/photos", _manifest(), ["train"], ["new/", "more/"])
    assert problem == ("--output_dir out/photos holds split 'train' (2715 records) built from --input "
                       "photos/; this run would replace it with one built from --input new/ --input "
                       "more/: pass --replace to rebuild split 'train' from these inputs, or choose "
                       "another --split or --output_dir (nothing was changed)")
    assert replace_problem("out/photos", None, ["train"], ["new/"]) is None


def test_split_changes_and_their_lines():
    old = _manifest()
    new = _manifest(records={"train": 100, "validation": 291}, written=["train"])
    changes = split_changes(old, new)
    assert changes == [SplitChange("train", "replaced", 2715, 100), SplitChange("validation", "kept", 291, 291)]
    assert [change_line(c) for c in changes] == ["replaced split train: 2715 -> 100 records", None]
    dropped = split_changes(old, _manifest(records={"train": 1}, written=["train"]))
    assert [change_line(c) for c in dropped] == ["replaced split train: 2715 -> 1 record",
                                                 "removed split validation: 291 records (--drop_other_splits)"]
    assert split_changes(None, new) == []
    # A manifest that does not say which splits its run wrote: every split counts as written.
    assert [c.kind for c in split_changes(old, _manifest(records={"train": 1, "validation": 2}))] == [
        "replaced", "replaced"]


def test_built_from_and_written_splits_round_trip_through_manifest_json():
    manifest = _manifest(built_from={"train": ["new/"], "validation": ["val/"]}, written=["train"])
    data, _ = shard_list_bytes(manifest)
    raw = json.loads(data)
    assert raw["written_splits"] == ["train"]
    assert raw["splits"]["train"]["built_from"] == ["new/"]
    back = Manifest.loads(data)
    assert back.built_from == {"train": ["new/"], "validation": ["val/"]}
    assert back.written_splits == ["train"]
    assert shard_list_bytes(dataclasses.replace(back, splits=manifest.splits))[0] == data
    # Older manifests have neither field, and none is written for them.
    plain = _written(_manifest())
    assert plain.built_from == {} and plain.written_splits is None
    assert "written_splits" not in json.loads(shard_list_bytes(_manifest())[0])


@pytest.mark.parametrize("edit, message", [
    (lambda raw: raw["splits"]["train"].update(built_from="photos/"), "built_from"),
    (lambda raw: raw["splits"]["train"].update(built_from=[]), "built_from"),
    (lambda raw: raw["splits"]["train"].update(built_from=[1]), "built_from"),
    (lambda raw: raw.update(written_splits="train"), "written_splits"),
    (lambda raw: raw.update(written_splits=["test"]), "written_splits"),
])
def test_bad_built_from_or_written_splits_are_refused(edit, message):
    raw = json.loads(shard_list_bytes(_manifest(written=["train"]))[0])
    edit(raw)
    with pytest.raises(ManifestError, match=message):
        Manifest.loads(json.dumps(raw))


def _tree(root, files) -> str:
    for rel in files:
        path = os.path.join(root, rel)
        if rel.endswith("/"):
            os.makedirs(path, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(b"x")
    return str(root)


@pytest.mark.parametrize("files", [
    ["daisy/a.jpg", "rose/b.jpg"],
    ["train/daisy/a.jpg", "validation/rose/b.jpg"],
    ["train/a.jpg"],  # a known split name decides
    ["part1/daisy/a.jpg", "part2/rose/b.jpg"],  # three levels deep: split folders
    ["a.jpg", "x/daisy/b.jpg"],
    ["x/daisy/a.jpg", "y/b.jpg"],
    ["x/daisy/a.jpg", "y/.hidden", ".git/y/z"],  # hidden names do not count
])
def test_the_surveyed_layout_agrees_with_the_whole_listing(tmp_path, files):
    root = _tree(tmp_path / "in", files)
    listed = [rel for rel in files if not rel.endswith("/") and not is_hidden(rel)]
    assert {t.layout for t in folder_tasks(root, "auto")} == {detect_layout(listed)}
    assert {t.layout for t in folder_tasks(root + "/", "auto")} == {detect_layout(listed)}


def test_the_survey_counts_folders_as_the_build_lists_them(tmp_path):
    # The build lists levels, so a top folder holding an (empty) folder counts as deeper.
    assert {t.layout for t in folder_tasks(_tree(tmp_path / "in", ["x/", "y/daisy/"]), "auto")} == {"splits"}


def test_the_layout_is_left_to_the_listing_where_the_survey_cannot_tell(tmp_path):
    assert [t.layout for t in folder_tasks("mem://bucket/in", "auto")] == [None]
    assert [t.layout for t in folder_tasks(str(tmp_path / "in"), "auto", offline=True)] == [None]


def test_the_listed_splits_are_those_named_and_the_fractions_for_inputs_their_bytes_place() -> None:
    from transforms.shardset.replacing import listed_splits

    assert listed_splits(["train", "validation"]) == {"train", "validation"}
    assert listed_splits(["", "test"], ["train", "validation"]) == {"test", "train", "validation"}
    assert listed_splits(["train"], ["a", "b"]) == {"train"}
    assert listed_splits([]) == set()
