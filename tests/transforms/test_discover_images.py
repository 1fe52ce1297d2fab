"""DiscoverImages lists in many elements: folder inputs by folder, manifests by byte range.

The outputs must be what listing each input whole gives (``tree_entries`` over the
whole tree, ``manifest_entries`` over the whole manifest, as the step did before).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import tempfile

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline

from tests.helpers import discover_images_of
from transforms.images.items import SourceImage
from transforms.shardset.dead_letters import DeadLetter
from tests.helpers import list_local_tree
from transforms.images.inputs import LabelRules, is_hidden
from tests.helpers import decode_manifest, manifest_entries, tree_entries, unreadable_folder_entries


def _keep(items: list, path: str) -> None:
    with open(path, "wb") as fh:
        pickle.dump(items, fh)


def _discover(inputs: list[str], rules: LabelRules, range_bytes: int = 64 << 20, **listing):
    """(entries, dead letters, classes, metrics) of DiscoverImages on ``inputs`` (``listing``: discover_images_of's)."""
    out = tempfile.mkdtemp(prefix="discover_")
    p = TestPipeline()
    listed = p | discover_images_of(inputs, rules, range_bytes=range_bytes, **listing)
    for name, kind in (("main", SourceImage), ("dead", DeadLetter), ("classes", str)):
        (listed
         | f"Only{name}" >> beam.Filter(lambda entry, kind=kind: isinstance(entry, kind))
         | f"Collect{name}" >> beam.combiners.ToList()
         | f"Keep{name}" >> beam.Map(_keep, os.path.join(out, name)))
    result = p.run()
    result.wait_until_finish()
    found = {}
    for name in ("main", "dead", "classes"):
        with open(os.path.join(out, name), "rb") as fh:
            found[name] = pickle.load(fh)
    shutil.rmtree(out)
    counters: dict[str, int] = {}
    for counter in result.metrics().query(MetricsFilter().with_namespace("build"))["counters"]:
        name = counter.key.metric.name  # one per step that counts it
        counters[name] = counters.get(name, 0) + counter.committed
    return found["main"], found["dead"], found["classes"], counters


def _whole_tree(root: str, rules: LabelRules):
    """What listing the folder whole gives: entries, dead letters, classes, hidden files."""
    listing = list_local_tree(root)
    prefix = root + "/"
    rels = [p[len(prefix):] for p in listing.files]
    hidden = [r for r in rels if is_hidden(r)]
    rels = [r for r in rels if not is_hidden(r)]
    folders = [(f[len(prefix):] if f.startswith(prefix) else "", f"{type(e).__name__}: {e.strerror or e}")
               for f, e in listing.unreadable]
    folders = [(rel, why) for rel, why in folders if not is_hidden(rel)]
    entries = list(tree_entries(root, rels, rules))
    unreadable = list(unreadable_folder_entries(root, folders, rels, rules))
    dead = [e for e in entries if not hasattr(e, "relpath")] + [d for d, _ in unreadable]
    return ([e for e in entries if hasattr(e, "relpath")], dead,
            [label for _, label in unreadable if label is not None], len(hidden))


def _touch(root, rel: str) -> None:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"x")


def _class_tree(root) -> None:
    for rel in ["rose/a.jpg", "rose/deep/b.jpg", "rose/deep/er/c.jpg", "tulip/d.jpg", "tulip/.DS_Store",
                ".git/objects/x", "stray.jpg", "daisy/sub1/e.jpg", "daisy/sub2/f.jpg", "daisy/g.jpg"]:
        _touch(root, rel)
    os.symlink(os.path.join(root, "rose"), os.path.join(root, "linked"))  # not followed
    os.symlink(os.path.join(root, "rose", "a.jpg"), os.path.join(root, "tulip", "link.jpg"))  # a file
    os.symlink(os.path.join(root, "nowhere"), os.path.join(root, "tulip", "dangling.jpg"))  # left out
    with open(os.path.join(os.fsencode(str(root)), b"rose", b"caf\xe9.jpg"), "wb") as fh:
        fh.write(b"x")


def _split_tree(root) -> None:
    for rel in ["train/rose/a.jpg", "train/rose/x/b.jpg", "test/tulip/c.jpg", "test/d.jpg",
                "val/rose/.hidden.jpg", "bad split/rose/e.jpg", "f.jpg"]:
        _touch(root, rel)


@pytest.mark.slow
@pytest.mark.parametrize("make, rules", [
    (_class_tree, LabelRules()),
    (_split_tree, LabelRules()),
    (_class_tree, LabelRules(layout="splits")),
    (_split_tree, LabelRules(label_regex=r"([a-f])\.jpg")),
])
def test_a_tree_listed_in_many_elements_gives_what_the_whole_listing_gave(tmp_path, make, rules) -> None:
    root = tmp_path / "in"
    make(root)
    want_entries, want_dead, want_classes, hidden = _whole_tree(str(root), rules)
    entries, dead, classes, counters = _discover([str(root)], rules)
    assert sorted(entries, key=repr) == sorted(want_entries, key=repr)
    assert sorted(dead, key=repr) == sorted(want_dead, key=repr)
    assert sorted(classes) == sorted(want_classes)
    assert counters["hidden_files_skipped"] == hidden > 0
    assert counters["inputs_listed"] == len(entries) + len(dead)


def test_an_unreadable_folder_is_one_dead_letter_and_keeps_its_class(tmp_path, monkeypatch) -> None:
    root = tmp_path / "in"
    _class_tree(root)
    locked = {str(root / "tulip"), str(root / "daisy" / "sub2")}
    real_scandir = os.scandir

    def scandir(path="."):  # root may read any folder: refuse these two as a mode-000 folder is refused
        if isinstance(path, (str, bytes)) and os.fsdecode(path) in locked:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)  # used by both os.walk and the level listing
    want_entries, want_dead, want_classes, _ = _whole_tree(str(root), LabelRules())
    entries, dead, classes, _ = _discover([str(root)], LabelRules())
    assert sorted(entries, key=repr) == sorted(want_entries, key=repr)
    assert sorted(dead, key=repr) == sorted(want_dead, key=repr)
    assert sorted(classes) == sorted(want_classes) == ["daisy", "tulip"]
    assert {(d.path, d.reason) for d in dead if d.reason == "unreadable"} == {
        (str(root / "tulip"), "unreadable"), (str(root / "daisy" / "sub2"), "unreadable")}


def test_a_huge_folder_is_listed_in_parts_each_file_once(tmp_path, monkeypatch) -> None:
    """A class folder of more than names_per_part files: several tasks, each lists its share; together
    they give what one listing gives (each file, hidden file and unreadable folder once)."""
    root = tmp_path / "in"
    for i in range(20):
        _touch(root, f"cat/{i:02d}.jpg")
    for i in range(5):
        _touch(root, f"cat/sub/{i}.png")
    _touch(root, "cat/.hidden.jpg")
    _touch(root, "cat/locked/x.jpg")
    _touch(root, "dog/a.jpg")
    _touch(root, "dog/b.jpg")
    locked = str(root / "cat" / "locked")
    real_scandir = os.scandir

    def scandir(path="."):  # refuse it as a mode-000 folder is refused
        if isinstance(path, (str, bytes)) and os.fsdecode(path) == locked:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    tasks = discover_images_of([str(root)], LabelRules(), names_per_part=4)._tasks
    cat = [t for t in tasks if t.folder == str(root / "cat")]
    assert [(t.part, t.parts) for t in cat] == [(i, 7) for i in range(7)]  # 26 files, 4 a part
    assert [(t.part, t.parts) for t in tasks if t.folder == str(root / "dog")] == [(0, 1)]
    want_entries, want_dead, want_classes, want_hidden = _whole_tree(str(root), LabelRules())
    entries, dead, classes, counters = _discover([str(root)], LabelRules(), names_per_part=4)
    assert sorted(entries, key=repr) == sorted(want_entries, key=repr) and len(entries) == 27
    assert sorted(dead, key=repr) == sorted(want_dead, key=repr)
    assert [(d.path, d.reason) for d in dead] == [(locked, "unreadable")]
    assert sorted(classes) == sorted(want_classes)
    assert counters["hidden_files_skipped"] == want_hidden == 1
    assert counters["folders_listed"] == 1 + 2  # the input folder, each class folder once


def test_folders_of_up_to_names_per_part_files_are_one_task_each(tmp_path) -> None:
    root = tmp_path / "in"
    for i in range(4):
        _touch(root, f"cat/{i}.jpg")
    tasks = discover_images_of([str(root)], LabelRules(), names_per_part=4)._tasks
    assert [(t.folder, t.part, t.parts) for t in tasks] == [(str(root), 0, 1), (str(root / "cat"), 0, 1)]


def test_a_folder_listed_in_parts_adds_no_step(tmp_path) -> None:
    """The parts are more elements of the same tasks' step: the pipeline has the same steps."""
    root = tmp_path / "in"
    for i in range(8):
        _touch(root, f"cat/{i}.jpg")

    def labels(**listing) -> list[str]:
        p = beam.Pipeline()
        _ = p | "Discover" >> discover_images_of([str(root)], LabelRules(), **listing)
        return sorted(p.to_runner_api().components.transforms[t].unique_name
                      for t in p.to_runner_api().components.transforms)

    assert labels(names_per_part=2) == labels()
    assert len(discover_images_of([str(root)], LabelRules(), names_per_part=2)._tasks) == 1 + 4


@pytest.mark.slow
def test_each_class_folder_is_an_element_of_its_own(tmp_path) -> None:
    counts = {}
    for tops in (2, 6):
        root = tmp_path / f"tree{tops}"
        for t in range(tops):
            _touch(root, f"c{t}/a.jpg")
            _touch(root, f"c{t}/s/b.jpg")
            _touch(root, f"c{t}/s/t/c.jpg")  # deeper folders are listed with their class folder
        entries, dead, _, counters = _discover([str(root)], LabelRules())
        assert len(entries) == 3 * tops and not dead
        assert {e.label for e in entries} == {f"c{t}" for t in range(tops)}
        counts[tops] = counters["folders_listed"]
    assert counts == {2: 1 + 2, 6: 1 + 6}  # the input folder's own files, then each class folder


def test_each_split_folder_and_each_class_folder_in_it_is_an_element_of_its_own(tmp_path) -> None:
    root = tmp_path / "in"
    for split in ("train", "test"):
        for c in range(3):
            _touch(root, f"{split}/c{c}/a.jpg")
            _touch(root, f"{split}/c{c}/s/b.jpg")
    entries, dead, _, counters = _discover([str(root)], LabelRules())
    assert len(entries) == 12 and not dead
    assert {(e.split, e.label) for e in entries} == {(s, f"c{c}") for s in ("train", "test") for c in range(3)}
    assert counters["folders_listed"] == 1 + 2 + 2 * 3  # the input folder, each split's files, each class


def test_the_layout_is_found_without_listing_a_class_folder_whole(tmp_path, monkeypatch) -> None:
    root = tmp_path / "in"
    for name in ("a.jpg", "b.jpg", "sub/c.jpg"):
        _touch(root, f"rose/{name}")
    _touch(root, "tulip/d.jpg")
    seen = []
    real_scandir = os.scandir

    def scandir(path="."):
        seen.append(os.fsdecode(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    tasks = discover_images_of([str(root)], LabelRules())._tasks
    assert sorted((t.folder, t.below, t.layout) for t in tasks) == [
        (str(root), False, "classes"), (str(root / "rose"), True, "classes"),
        (str(root / "tulip"), True, "classes")]
    # The root, then one class folder up to its first file: that shows the layout. Then each folder
    # below a class folder once, to count its files (folder_parts: a huge one is listed in parts).
    assert seen[0] == str(root) and seen[1] in (str(root / "rose"), str(root / "tulip"))
    assert sorted(seen[2:]) == [str(root / "rose"), str(root / "rose" / "sub"), str(root / "tulip")]


# --- manifests ------------------------------------------------------------------------------------

_CSV = (b"\xef\xbb\xbfpath,label,split\r\n"
        b"imgs/a.jpg,rose,train\r\n"
        b"\r\n"
        b"imgs/b\xff.jpg,rose\r\n"  # not UTF-8
        b'"imgs/c,1.jpg",tulip,test\r\n'
        b"imgs/d.jpg,,train\r\n"  # no label
        b"imgs/e.jpg,rose,train,extra\r\n"  # too many columns
        b"imgs/f.jpg,tulip\rimgs/g.jpg,rose,bad split\r"  # lone "\r" ends CSV lines
        + b"".join(b"imgs/%d.jpg,c%d\n" % (i, i % 7) for i in range(60))
        + b"imgs/last.jpg,rose")  # no "\n" at the end

_JSONL = (b"\xef\xbb\xbf" + json.dumps({"path": "imgs/a.jpg", "label": "rose"}).encode() + b"\r\n"
          + b"\n  \n"
          + b'{"path": "imgs/b\xff.jpg", "label": "rose"}\n'
          + b"not json\n[1, 2]\n"
          + json.dumps({"path": "imgs/c.jpg", "label": "tulip\u2028x"}, ensure_ascii=False).encode() + b"\n"
          + b'{"path": "imgs/d.jpg", "label": "rose"}\rstill line 8\n'
          + b"".join(json.dumps({"path": f"imgs/{i}.jpg", "label": f"c{i % 5}", "split": "val"}).encode()
                     + b"\n" for i in range(60))
          + json.dumps({"path": "imgs/last.jpg", "label": 3}).encode())


@pytest.mark.slow
@pytest.mark.parametrize("name, data", [("list.csv", _CSV), ("list.jsonl", _JSONL)])
@pytest.mark.parametrize("range_bytes", [1, 7, 100, 1 << 20])
def test_a_manifest_read_in_many_ranges_gives_what_reading_it_whole_gave(tmp_path, name, data,
                                                                         range_bytes) -> None:
    manifest = tmp_path / name
    manifest.write_bytes(data)
    rules = LabelRules()
    whole = list(manifest_entries(decode_manifest(data), str(manifest), rules))
    entries, dead, classes, counters = _discover([str(manifest)], rules, range_bytes=range_bytes)
    assert sorted(entries, key=repr) == sorted([e for e in whole if hasattr(e, "relpath")], key=repr)
    assert sorted(dead, key=repr) == sorted([e for e in whole if not hasattr(e, "relpath")], key=repr)
    assert not classes
    assert len(entries) > 60 and len(dead) >= 4
    assert counters["manifest_ranges_read"] == -(-len(data) // range_bytes)
    last = max(entries, key=lambda e: int(e.origin.rsplit(":", 1)[1]))
    lines = len(re.split(rb"\r\n|\r|\n", data)) if name.endswith(".csv") else data.count(b"\n") + 1
    assert last.relpath == "imgs/last.jpg" and last.origin == f"{manifest}:{lines}"


def test_manifest_line_numbers_are_those_of_the_file(tmp_path) -> None:
    manifest = tmp_path / "list.csv"
    manifest.write_bytes(_CSV)
    _, dead, _, _ = _discover([str(manifest)], LabelRules(), range_bytes=5)
    got = sorted((int(d.path.rsplit(":", 1)[1]), d.reason) for d in dead)
    assert got == [(4, "bad_manifest_row"), (6, "bad_label"), (7, "bad_manifest_row"),
                   (9, "bad_split")]


def test_a_csv_row_with_a_line_break_in_quotes_is_a_dead_letter(tmp_path) -> None:
    manifest = tmp_path / "list.csv"
    manifest.write_bytes(b'path,label,caption\na.jpg,rose,"one\ntwo"\nb.jpg,rose,x\n')
    entries, dead, _, _ = _discover([str(manifest)], LabelRules(features={"caption": "bytes"}), range_bytes=4)
    assert [e.origin for e in entries] == [f"{manifest}:4"]
    assert sorted((d.path, d.reason) for d in dead) == [(f"{manifest}:2", "bad_manifest_row"),
                                                        (f"{manifest}:3", "bad_manifest_row")]
    assert "line break inside a quoted field is not supported" in min(dead, key=lambda d: d.path).error


def test_a_manifest_and_a_folder_together(tmp_path) -> None:
    root = tmp_path / "in"
    _class_tree(root)
    manifest = tmp_path / "list.jsonl"
    manifest.write_bytes(_JSONL)
    entries, dead, _, counters = _discover([str(root), str(manifest)], LabelRules(), range_bytes=50)
    tree_entries_, tree_dead, _, _ = _whole_tree(str(root), LabelRules())
    whole = list(manifest_entries(decode_manifest(_JSONL), str(manifest), LabelRules()))
    assert len(entries) + len(dead) == len(tree_entries_) + len(tree_dead) + len(whole)
    assert counters["inputs_listed"] == len(entries) + len(dead)


def test_a_parquet_pattern_lists_each_file_and_a_broken_one_is_its_own_dead_letter(tmp_path) -> None:
    from tests.archive_fixtures import make_parquet
    from tests.shard_fixtures import make_class_tree

    make_class_tree(str(tmp_path / "tree"), classes=("cat", "dog"), per_class=2, broken=False)
    (tmp_path / "hf").mkdir()
    make_parquet(str(tmp_path / "tree"), str(tmp_path / "hf" / "a.parquet"), classes=("cat", "dog"))
    (tmp_path / "hf" / "b.parquet").write_bytes(b"PAR1 this is not Parquet")
    make_parquet(str(tmp_path / "tree"), str(tmp_path / "hf" / "c.parquet"), classes=("cat", "dog"))
    entries, dead, _, _ = _discover([str(tmp_path / "hf" / "*.parquet")], LabelRules())
    assert sorted(e.path.rsplit("/", 1)[1] for e in entries) == [f"{f}.parquet!{i}" for f in "ac" for i in range(4)]
    assert [(d.path, d.reason) for d in dead] == [(str(tmp_path / "hf" / "b.parquet"), "unreadable")]
