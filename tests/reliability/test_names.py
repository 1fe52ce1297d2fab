"""Reliability: hostile labels, split names, folder names and symlinks.

Labels are stored as text and never become paths; split names become parts of
shard file names, so they must match ``[A-Za-z0-9_-]+`` (and be short enough
for a file name). Every job here writes into a folder two levels below the
test's tmp folder, and the whole tmp tree is compared before and after: only
the output folder may change.
"""

from __future__ import annotations

import csv
import json
import os

import pytest

from tests import imagegen
from tests.reliability_support import assert_only_shard_set, changed_outside, tree_state
from tests.shard_fixtures import dead_letters, examples, load_manifest, run_build, shard_files, write


def _jpeg(index: int) -> bytes:
    """A distinct small JPEG per index (distinct bytes: no duplicate_image)."""
    return imagegen.jpeg("RGB", size=(8 + index % 29, 8 + index // 29))


# --- labels ---------------------------------------------------------------------------------

STORED_LABELS = ["../x", "/etc/x", "a*b", "..", "a/b", "-rf", "$(touch pwned)", "ü😀", "x" * 1000,
                 "%s%n", "C:\\evil", "train-00000-of-00001.tfrecord"]
REJECTED_LABELS = ["x\x00y", "x\ny", "x\r", "tab\tx", "del\x7f", "nel\x85x", "line\u2028sep",
                   "para\u2029sep", ""]


@pytest.mark.slow
def test_hostile_labels_are_stored_as_text_or_rejected(tmp_path, capsys) -> None:
    work = tmp_path / "work"
    rows = []
    for i, label in enumerate(STORED_LABELS + REJECTED_LABELS):
        write(str(work / "imgs" / f"{i}.jpg"), _jpeg(i))
        rows.append({"path": f"imgs/{i}.jpg", "label": label})
    half = len(rows) // 2
    with open(work / "a.csv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, ["path", "label"])
        writer.writeheader()
        writer.writerows(rows[:half])
    with open(work / "b.jsonl", "w", encoding="utf-8") as fh:  # raw U+2028 etc.: ensure_ascii=False
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows[half:])
    out = work / "deep" / "out"
    before = tree_state(str(tmp_path))
    status, stdout, err = run_build(capsys, "--input", str(work / "a.csv"), "--input", str(work / "b.jsonl"),
                                    "--output_dir", str(out), "--max_bad_fraction", "1")
    assert status == 0, err
    assert changed_outside(before, tree_state(str(tmp_path)), os.path.relpath(out, tmp_path)) == []
    assert_only_shard_set(str(out))

    manifest = load_manifest(str(out))
    assert manifest["labels"] == sorted(STORED_LABELS)
    with open(out / "labels.txt", encoding="utf-8") as fh:
        assert fh.read().splitlines() == sorted(STORED_LABELS)  # one name per line, whatever reads it
    texts = {ex["image/filename"].decode(): ex["image/class/text"].decode()
             for n in shard_files(str(out)) for ex in examples(str(out / n))}
    assert texts == {f"imgs/{i}.jpg": label for i, label in enumerate(STORED_LABELS)}
    reasons = sorted(d["reason"] for d in dead_letters(str(out)))
    assert reasons == ["bad_label"] * len(REJECTED_LABELS)
    assert manifest["records"] + manifest["dead_letters"] == len(rows)

    # labels.txt read back as --labels_file gives the same classes in the same order.
    again = work / "again"
    status, _, err = run_build(capsys, "--input", str(work / "a.csv"), "--input", str(work / "b.jsonl"),
                               "--output_dir", str(again), "--max_bad_fraction", "1",
                               "--labels_file", str(out / "labels.txt"))
    assert status == 0, err
    assert load_manifest(str(again))["splits"] == manifest["splits"]


def test_hostile_class_folder_names(tmp_path, capsys) -> None:
    root = tmp_path / "in"
    stored = ["a*b", "x?y", "[z]", "-rf", "ü", "sp ace", "x..y"]
    rejected = ["new\nline", "tab\tname", "cr\rname"]
    for i, name in enumerate(stored + rejected):
        write(str(root / name / f"{i}.jpg"), _jpeg(i))
    out = tmp_path / "deep" / "out"
    before = tree_state(str(tmp_path))
    status, _, err = run_build(capsys, "--input", str(root), "--output_dir", str(out), "--max_bad_fraction", "1")
    assert status == 0, err
    assert changed_outside(before, tree_state(str(tmp_path)), os.path.relpath(out, tmp_path)) == []
    assert_only_shard_set(str(out))
    assert load_manifest(str(out))["labels"] == sorted(stored)
    assert sorted((os.path.relpath(d["path"], root), d["reason"]) for d in dead_letters(str(out))) == sorted(
        (f"{name}/{len(stored) + i}.jpg", "bad_label") for i, name in enumerate(rejected))


# --- split names ----------------------------------------------------------------------------

BAD_SPLITS = ["../x", "/etc", "a b", "a.b", ".", "..", "x/y", "tr\nain", "s" * 200, "ünï", "a*b", "-" * 300]


def test_hostile_split_names_in_a_manifest_are_dead_letters(tmp_path, capsys) -> None:
    work = tmp_path / "work"
    rows = [{"path": "imgs/ok.jpg", "label": "rose", "split": "ok-Split_1"}]
    write(str(work / "imgs" / "ok.jpg"), _jpeg(0))
    for i, split in enumerate(BAD_SPLITS, start=1):
        write(str(work / "imgs" / f"{i}.jpg"), _jpeg(i))
        rows.append({"path": f"imgs/{i}.jpg", "label": "rose", "split": split})
    with open(work / "list.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in rows)
    out = work / "deep" / "out"
    before = tree_state(str(tmp_path))
    status, _, err = run_build(capsys, "--input", str(work / "list.jsonl"), "--output_dir", str(out),
                               "--max_bad_fraction", "1")
    assert status == 0, err
    assert changed_outside(before, tree_state(str(tmp_path)), os.path.relpath(out, tmp_path)) == []
    assert_only_shard_set(str(out))
    assert shard_files(str(out)) == ["ok-Split_1-00000-of-00001.tfrecord"]
    assert [d["reason"] for d in dead_letters(str(out))] == ["bad_split"] * len(BAD_SPLITS)


def test_hostile_split_folders_are_dead_letters(tmp_path, capsys) -> None:
    root = tmp_path / "in"
    write(str(root / "train" / "rose" / "0.jpg"), _jpeg(0))
    for i, split in enumerate(["a b", "a.b", "s" * 200, "ü"], start=1):
        write(str(root / split / "rose" / f"{i}.jpg"), _jpeg(i))
    out = tmp_path / "deep" / "out"
    before = tree_state(str(tmp_path))
    status, _, err = run_build(capsys, "--input", str(root), "--output_dir", str(out), "--max_bad_fraction", "1")
    assert status == 0, err
    assert changed_outside(before, tree_state(str(tmp_path)), os.path.relpath(out, tmp_path)) == []
    assert shard_files(str(out)) == ["train-00000-of-00001.tfrecord"]
    assert [d["reason"] for d in dead_letters(str(out))] == ["bad_split"] * 4


@pytest.mark.parametrize("flags", [
    ["--split", "../up"], ["--split", "a.b"], ["--split", "s" * 200],
    ["--split_fractions", "../x=0.5,train=0.5"], ["--split_fractions", "a/b=1"],
], ids=["split_up", "split_dot", "split_long", "fractions_up", "fractions_slash"])
def test_hostile_split_flags_fail_at_once(tmp_path, capsys, flags) -> None:
    write(str(tmp_path / "in" / "rose" / "0.jpg"), _jpeg(0))
    before = tree_state(str(tmp_path))
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir",
                               str(tmp_path / "out"), *flags)
    assert status == 2
    lines = [line for line in err.splitlines() if line.startswith("build_shards:")]
    assert len(lines) == 1 and "split name" in lines[0], err
    assert tree_state(str(tmp_path)) == before  # nothing written at all


# --- glob characters in folder names ----------------------------------------------------------

@pytest.mark.parametrize("name", ["out[1]", "out*", "out?"])
def test_output_folder_with_glob_characters_is_refused_and_siblings_are_untouched(tmp_path, capsys, name) -> None:
    """Beam's FileSystems.match reads ``[1]``, ``*`` and ``?`` as wildcards and cannot quote them.

    Publishing lists the output folder to delete stale shards: ``out[1]/*``
    also matches ``out1/...``, so a shard set in a sibling folder would lose
    its shards. The job refuses such a folder with one line, before writing.
    """
    write(str(tmp_path / "in" / "rose" / "0.jpg"), _jpeg(0))
    write(str(tmp_path / "out1" / "train-00002-of-00005.tfrecord"), b"a sibling's shard")
    write(str(tmp_path / "outX" / "train-00000-of-00002.tfrecord"), b"another sibling's shard")
    before = tree_state(str(tmp_path))
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(tmp_path / name))
    assert status == 2, err
    lines = [line for line in err.splitlines() if line.startswith("build_shards:")]
    assert len(lines) == 1 and "--output_dir" in lines[0] and "wildcard" in lines[0], err
    assert tree_state(str(tmp_path)) == before


def test_input_folder_with_glob_characters_is_refused(tmp_path, capsys) -> None:
    write(str(tmp_path / "set[1]" / "rose" / "0.jpg"), _jpeg(0))
    write(str(tmp_path / "set1" / "tulip" / "1.jpg"), _jpeg(1))  # what "set[1]/**" would list
    status, _, err = run_build(capsys, "--input", str(tmp_path / "set[1]"), "--output_dir", str(tmp_path / "out"))
    assert status == 2, err
    lines = [line for line in err.splitlines() if line.startswith("build_shards:")]
    assert len(lines) == 1 and "--input" in lines[0] and "wildcard" in lines[0], err
    assert not (tmp_path / "out").exists()
    # Files in such a folder can still be listed one by one in an input manifest.
    (tmp_path / "list.csv").write_text("path,label\nset[1]/rose/0.jpg,rose\n")
    status, _, err = run_build(capsys, "--input", str(tmp_path / "list.csv"), "--output_dir", str(tmp_path / "out"))
    assert status == 0, err
    assert load_manifest(str(tmp_path / "out"))["records"] == 1


# --- symlinks -------------------------------------------------------------------------------


def test_symlinks_follow_the_documented_policy(tmp_path, capsys) -> None:
    """Links to files are inputs; links to folders are not followed; dangling links are skipped.

    This is what Beam's LocalFileSystem listing (``os.walk`` without
    ``followlinks``) does; README states it under the build job's inputs. A
    linked folder given as an ``--input`` of its own is listed.
    """
    root, outside = tmp_path / "in", tmp_path / "elsewhere"
    write(str(root / "rose" / "a.jpg"), _jpeg(0))
    write(str(outside / "b.jpg"), _jpeg(1))
    write(str(outside / "set" / "tulip" / "c.jpg"), _jpeg(2))
    os.symlink(outside / "b.jpg", root / "rose" / "linked_file.jpg")  # a file outside the tree
    os.symlink("a.jpg", root / "rose" / "same_file.jpg")  # a second name for a.jpg: same bytes
    os.symlink(outside / "set" / "tulip", root / "tulip")  # a class folder: not followed
    os.symlink(outside / "set", root / "linked_set")  # given as its own --input below
    os.makedirs(root / "rose" / "deeper")
    os.symlink("../..", root / "rose" / "deeper" / "loop")  # a folder loop: not followed
    os.symlink("self.jpg", root / "rose" / "self.jpg")  # a link to itself
    os.symlink(tmp_path / "nowhere.jpg", root / "rose" / "dangling.jpg")
    out = tmp_path / "deep" / "out"
    before = tree_state(str(tmp_path))
    status, stdout, err = run_build(capsys, "--input", str(root), "--input", str(root / "linked_set"),
                                    "--output_dir", str(out), "--max_bad_fraction", "1")
    assert status == 0, err
    assert changed_outside(before, tree_state(str(tmp_path)), os.path.relpath(out, tmp_path)) == []
    names = sorted(ex["image/filename"].decode() for n in shard_files(str(out)) for ex in examples(str(out / n)))
    assert names == ["rose/a.jpg", "rose/linked_file.jpg", "tulip/c.jpg"]
    assert [(os.path.relpath(d["path"], root), d["reason"]) for d in dead_letters(str(out))] == [
        ("rose/same_file.jpg", "duplicate_image")]
    assert load_manifest(str(out))["labels"] == ["rose", "tulip"]
    assert "written + dead-lettered = 4 inputs" in stdout
