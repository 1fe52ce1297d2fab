"""Splits never leak and labels are reconciled: build, reshard and verify on real files.

Each case runs the real job modules on real files:

- ``--split_fractions`` places identical bytes in one split (by sha256), user-given splits
  holding the same bytes keep one copy (evaluation splits win), and verify reports a key in
  two splits, with a manifest and with ``--files``;
- reshard keeps each file's split (from its shard name), ``--split`` merges explicitly, and a
  file whose name states no split is refused without ``--split``;
- verify checks every record's label and class text against the manifest's labels,
  ``labels.txt`` against the manifest and the manifest's label counts against its labels,
  which catches a shard spliced in from another build with its manifest entry fixed up.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from collections import defaultdict

import pytest

from tests.reliability_support import folder_bytes
from tests.shard_fixtures import (read_set_manifest, write_set_manifest, dead_letters, examples, image_bytes, load_manifest, make_class_tree,
                                  records, run_build, shard_files, write)
from tests.tfrecord_fixtures import image_example, write_shard_set, write_tfrecords
from transforms.shardset.manifest import Manifest, ShardEntry, SplitEntry
from tests.helpers import verify_in_memory


def run_reshard(capsys, *argv: str) -> tuple[int, str, str]:
    from beam_jobs import reshard

    capsys.readouterr()
    status = reshard.run(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def run_verify(capsys, *argv: str) -> tuple[int, str, str]:
    from beam_jobs import verify_shards

    capsys.readouterr()
    status = verify_shards.run(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _verify_report(capsys, tmp_path, *argv: str) -> tuple[int, list[dict]]:
    report = tmp_path / f"report-{random.random()}.json"
    status, out, err = run_verify(capsys, *argv, "--report", str(report))
    assert status in (0, 1), err
    return status, json.loads(report.read_text())["problems"]


def _files(folder: str) -> dict[str, bytes]:
    """Relative path -> bytes of the files in ``folder`` and its ``index/`` folder."""
    return folder_bytes(folder)


def _in_memory(folder: str):
    manifest = read_set_manifest(folder)
    return verify_in_memory(_files(folder), manifest, folder=folder)


def keys_by_split(folder: str) -> dict[str, list[str]]:
    """Split -> the ``image/key/sha256`` of every record of its shards."""
    out = defaultdict(list)
    for name in shard_files(folder):
        for ex in examples(os.path.join(folder, name)):
            out[name.split("-")[0]].append(ex["image/key/sha256"].decode())
    return dict(out)


def replace_shard(folder: str, name: str, datas: list[bytes], label_counts: dict[str, int]) -> None:
    """Rewrites one shard (and its ``.idx``) and fixes its manifest entry up to match, as a
    careful person splicing files by hand would: records, bytes, sha256, label counts."""
    data = write_tfrecords(os.path.join(folder, name), datas)
    manifest = read_set_manifest(folder)
    splits = {}
    for split, entry in manifest.splits.items():
        shards = [ShardEntry(name, len(datas), len(data), hashlib.sha256(data).hexdigest(), label_counts)
                  if s.file == name else s for s in entry.shards]
        splits[split] = SplitEntry(split, shards)
    fixed = Manifest(manifest.created_by, manifest.options, manifest.seed, manifest.compression,
                     manifest.feature_spec, manifest.labels, splits, manifest.dead_letters)
    write_set_manifest(folder, fixed)


def _label_counts(datas: list[bytes]) -> dict[str, int]:
    from transforms.example.codec import decode_example
    counts: dict[str, int] = {}
    for data in datas:
        label = str(decode_example(data)["image/class/label"][1][0])
        counts[label] = counts.get(label, 0) + 1
    return counts


# --- 1. --split_fractions assigns by content ----------------------------------------------


def _tree_with_copies(root: str, groups: int = 10, copies: int = 3) -> dict[str, str]:
    """Unsplit class folders where each of ``groups`` images is stored under ``copies`` names
    (in different class folders too, as scraped data often has it). Returns name -> sha256."""
    rng = random.Random(14)
    names = {}
    for g in range(groups):
        data = image_bytes("rose", "PNG", rng)
        for c in range(copies):
            rel = f"{('rose', 'tulip')[c % 2]}/img_{g:02d}_copy{c}.png"
            write(os.path.join(root, rel), data)
            names[rel] = hashlib.sha256(data).hexdigest()
    for i in range(10):
        data = image_bytes("tulip", "JPEG", rng)
        write(os.path.join(root, f"tulip/single_{i:02d}.jpg"), data)
        names[f"tulip/single_{i:02d}.jpg"] = hashlib.sha256(data).hexdigest()
    return names


@pytest.mark.slow
def test_split_fractions_put_identical_bytes_in_one_split(tmp_path, capsys):
    names = _tree_with_copies(str(tmp_path / "in"))
    out = str(tmp_path / "out")
    status, stdout, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", out,
                                    "--split_fractions", "train=0.5,validation=0.5",
                                    "--max_bad_fraction", "1")
    assert status == 0, err
    by_split = keys_by_split(out)
    assert set(by_split) == {"train", "validation"}
    # no image in two splits, and every image exactly once
    assert not set(by_split["train"]) & set(by_split["validation"])
    all_keys = by_split["train"] + by_split["validation"]
    assert sorted(all_keys) == sorted(set(names.values()))
    # the copies are duplicate_image dead letters (same split), never cross-split ones
    dead = dead_letters(out)
    assert len(dead) == 10 * 2 and {d["reason"] for d in dead} == {"duplicate_image"}
    assert load_manifest(out)["records"] + len(dead) == len(names)
    # the split of an image is its sha256 as a fraction: reproducible by anyone
    from transforms.shardset.planning import split_by_content
    for split, keys in by_split.items():
        assert {split_by_content(k, {"train": 0.5, "validation": 0.5}) for k in keys} == {split}
    status, text, err = run_verify(capsys, "--output_dir", out, "--decode_images")
    assert status == 0, text + err


@pytest.mark.slow
def test_identical_bytes_in_user_given_splits_keep_the_evaluation_copy(tmp_path, capsys):
    rng = random.Random(3)
    shared_test, shared_val, alone = (image_bytes("rose", "PNG", rng) for _ in range(3))
    root = tmp_path / "in"
    write(str(root / "train/rose/a.png"), shared_test)
    write(str(root / "train/rose/b.png"), shared_val)
    write(str(root / "train/rose/c.png"), alone)
    write(str(root / "validation/rose/a_again.png"), shared_test)
    write(str(root / "validation/rose/b.png"), shared_val)
    write(str(root / "test/rose/a.png"), shared_test)
    for i in range(4):
        write(str(root / f"train/tulip/t{i}.jpg"), image_bytes("tulip", "JPEG", rng))
    # an input manifest naming a split for the same bytes again
    write(str(tmp_path / "extra" / "same.png"), shared_val)
    (tmp_path / "extra" / "list.csv").write_text("path,label,split\nsame.png,rose,train\n")
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", str(root), "--input", str(tmp_path / "extra" / "list.csv"),
                               "--output_dir", out, "--max_bad_fraction", "1")
    assert status == 0, err
    kept = {(split, ex["image/filename"].decode()) for split in ("train", "validation", "test")
            for name in shard_files(out) if name.startswith(split + "-")
            for ex in examples(os.path.join(out, name))}
    assert kept == {("test", "test/rose/a.png"), ("validation", "validation/rose/b.png"),
                    ("train", "train/rose/c.png")} | {("train", f"train/tulip/t{i}.jpg") for i in range(4)}
    dead = {os.path.relpath(d["path"], tmp_path): (d["reason"], d["error"]) for d in dead_letters(out)}
    assert {k: v[0] for k, v in dead.items()} == {
        "in/train/rose/a.png": "cross_split_duplicate",
        "in/validation/rose/a_again.png": "cross_split_duplicate",
        "in/train/rose/b.png": "cross_split_duplicate",
        "extra/same.png": "cross_split_duplicate",
    }
    error = dead["in/train/rose/a.png"][1]
    assert "split 'train'" in error and "split 'test'" in error and "'test/rose/a.png'" in error
    status, text, err = run_verify(capsys, "--output_dir", out)
    assert status == 0, text + err


@pytest.mark.slow
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_later_split_build_rejects_a_copy_of_a_published_image(tmp_path, capsys, compression):
    # Before, both builds published, exit 0, and verify then found a duplicate_key.
    rng = random.Random(7)
    shared = image_bytes("rose", "PNG", rng)
    train, val = tmp_path / "train_in", tmp_path / "val_in"
    write(str(train / "rose/a.png"), shared)
    for i in range(3):
        write(str(train / f"tulip/t{i}.jpg"), image_bytes("tulip", "JPEG", rng))
    write(str(val / "rose/copy_of_a.png"), shared)
    for i in range(2):
        write(str(val / f"tulip/v{i}.jpg"), image_bytes("tulip", "JPEG", rng))
    out = str(tmp_path / "out")
    flags = ("--max_bad_fraction", "1", "--compression", compression)
    status, _, err = run_build(capsys, "--input", str(train), "--output_dir", out, "--split", "train", *flags)
    assert status == 0, err
    status, _, err = run_build(capsys, "--input", str(val), "--output_dir", out, "--split", "validation", *flags)
    assert status == 0, err
    manifest = load_manifest(out)
    assert {name: split["records"] for name, split in manifest["splits"].items()} == {"train": 4, "validation": 2}
    (dead,) = dead_letters(out)
    assert (dead["path"], dead["reason"]) == (str(val / "rose/copy_of_a.png"), "cross_split_duplicate")
    assert "'train'" in dead["error"], dead["error"]
    status, text, err = run_verify(capsys, "--output_dir", out)
    assert status == 0, text + err
    # Rebuilding train itself replaces it: its own images are not copies of what it replaces.
    status, _, err = run_build(capsys, "--input", str(train), "--output_dir", out, "--split", "train", *flags)
    assert status == 0, err
    assert dead_letters(out) == [] and load_manifest(out)["splits"]["train"]["records"] == 4


# --- 2. verify reports a key in two splits ---------------------------------------------------


@pytest.mark.slow
def test_verify_reports_an_image_in_two_splits_with_manifest_and_files(tmp_path, capsys):
    shards = write_shard_set(str(tmp_path / "set"), {"train": 2, "validation": 1})
    leaked = shards.records["train-00001-of-00002.tfrecord"][2]
    datas = shards.records["validation-00000-of-00001.tfrecord"] + [leaked]
    replace_shard(shards.folder, "validation-00000-of-00001.tfrecord", datas, _label_counts(datas))
    val = os.path.join(shards.folder, "validation-00000-of-00001.tfrecord")
    train = os.path.join(shards.folder, "train-00001-of-00002.tfrecord")
    leaked_at = sum(len(d) + 16 for d in datas[:-1])
    train_at = sum(len(d) + 16 for d in shards.records["train-00001-of-00002.tfrecord"][:2])

    status, problems = _verify_report(capsys, tmp_path, "--output_dir", shards.folder)
    assert status == 1
    assert [(p["file"], p["offset"], p["kind"]) for p in problems] == [(val, leaked_at, "duplicate_key")]
    assert (f"also at byte {train_at} of {train}: the image is in two splits, validation here "
            "and train there") in problems[0]["detail"]
    assert [(p.file, p.offset, p.kind) for p in _in_memory(shards.folder).problems] == [
        (val, leaked_at, "duplicate_key")]

    status, problems = _verify_report(capsys, tmp_path, "--files",
                                      os.path.join(shards.folder, "*.tfrecord"))
    assert status == 1
    assert [(p["file"], p["offset"], p["kind"]) for p in problems] == [(val, leaked_at, "duplicate_key")]
    assert "validation here and train there" in problems[0]["detail"]


# --- 3. reshard keeps splits ------------------------------------------------------------------


def _two_split_build(tmp_path, capsys) -> str:
    make_class_tree(str(tmp_path / "in"), per_class=10, broken=False)
    built = str(tmp_path / "built")
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", built,
                               "--split_fractions", "train=0.7,validation=0.3", "--num_shards", "3")
    assert status == 0, err
    return built


def _records_by_split(folder: str) -> dict[str, list[bytes]]:
    out = defaultdict(list)
    for name in shard_files(folder):
        out[name.split("-")[0]] += [d for _, d in records(os.path.join(folder, name))]
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.slow
def test_reshard_of_a_shard_set_keeps_each_split(tmp_path, capsys):
    built = _two_split_build(tmp_path, capsys)
    out = str(tmp_path / "out")
    status, stdout, err = run_reshard(capsys, "--input", built + "/*", "--output_dir", out,
                                      "--num_shards", "2", "--compression", "gzip")
    assert status == 0, err
    before, after = _records_by_split(built), _records_by_split(out)
    assert set(after) == {"train", "validation"} and after == before
    manifest = load_manifest(out)
    assert set(manifest["splits"]) == {"train", "validation"}
    for split in ("train", "validation"):
        assert (manifest["splits"][split]["label_counts"]
                == load_manifest(built)["splits"][split]["label_counts"])
        assert f"  {split}: {len(before[split])} records in 2 shards" in stdout
    status, text, err = run_verify(capsys, "--output_dir", out, "--decode_images")
    assert status == 0, text + err


@pytest.mark.slow
def test_reshard_split_flag_merges_explicitly(tmp_path, capsys):
    built = _two_split_build(tmp_path, capsys)
    out = str(tmp_path / "out")
    status, stdout, err = run_reshard(capsys, "--input", built + "/*", "--output_dir", out,
                                      "--split", "all", "--num_shards", "2")
    assert status == 0, err
    before = _records_by_split(built)
    assert _records_by_split(out) == {"all": sorted(before["train"] + before["validation"])}
    assert "  all: " in stdout and "train" not in stdout


@pytest.mark.slow
def test_reshard_refuses_files_whose_name_states_no_split(tmp_path, capsys):
    built = _two_split_build(tmp_path, capsys)
    other = str(tmp_path / "loose.tfrecord")
    shutil.copy(os.path.join(built, shard_files(built)[0]), other)
    out = str(tmp_path / "out")
    status, _, err = run_reshard(capsys, "--input", built + "/*", "--input", other, "--output_dir", out)
    assert status == 2
    lines = [l for l in err.splitlines() if l.startswith("reshard:")]
    assert len(lines) == 1 and other in lines[0] and "--split" in lines[0], err
    assert not os.path.exists(out)
    # with --split the same inputs are one split
    assert run_reshard(capsys, "--input", other, "--output_dir", out, "--split", "train")[0] == 0
    assert set(load_manifest(out)["splits"]) == {"train"}


# --- 4. labels reconciled ---------------------------------------------------------------------


def test_relabelled_record_and_wrong_class_text_are_found(tmp_path, capsys):
    shards = write_shard_set(str(tmp_path / "set"), {"train": 1, "validation": 1})  # 3 classes
    name = "train-00000-of-00001.tfrecord"
    datas = list(shards.records[name])
    from transforms.example.codec import decode_example
    def relabel(data: bytes, label: int, text: str) -> bytes:
        f = {k: v[1][0] for k, v in decode_example(data).items()}
        return image_example(label, text, f["image/encoded"], f["image/format"].decode(),
                             f["image/height"], f["image/width"], f["image/channels"],
                             f["image/filename"].decode(), f["image/key/sha256"].decode())
    first = decode_example(datas[0])
    datas[0] = relabel(datas[0], 7, first["image/class/text"][1][0].decode())  # out of range
    datas[1] = relabel(datas[1], 0, "zebra")  # text disagrees with labels[0]
    replace_shard(shards.folder, name, datas, _label_counts(datas))  # manifest fixed up
    path = os.path.join(shards.folder, name)
    status, problems = _verify_report(capsys, tmp_path, "--output_dir", shards.folder)
    assert status == 1
    rows = [(p["file"], p["offset"], p["kind"]) for p in problems]
    second = len(datas[0]) + 16
    assert rows == [(path, None, "label_mismatch"), (path, 0, "label_mismatch"),
                    (path, second, "label_mismatch")]
    assert "counts labels 7" in problems[0]["detail"]
    assert "image/class/label 7 is outside 0..2" in problems[1]["detail"]
    assert "image/class/text is 'zebra' but label 0 is" in problems[2]["detail"]
    assert [(p.file, p.offset, p.kind) for p in _in_memory(shards.folder).problems] == rows


def test_labels_txt_must_be_the_manifest_labels(tmp_path, capsys):
    shards = write_shard_set(str(tmp_path / "set"))
    labels = os.path.join(shards.folder, "labels.txt")
    names = open(labels).read().splitlines()
    open(labels, "w").write("".join(f"{n}\n" for n in reversed(names)))
    status, problems = _verify_report(capsys, tmp_path, "--output_dir", shards.folder)
    assert status == 1 and [(p["file"], p["kind"]) for p in problems] == [(labels, "label_mismatch")]
    assert "first differ at line 1" in problems[0]["detail"]
    os.remove(labels)
    status, problems = _verify_report(capsys, tmp_path, "--output_dir", shards.folder)
    assert status == 1 and [(p["file"], p["kind"]) for p in problems] == [(labels, "missing_file")]


def _build(tmp_path, capsys, name: str, classes: tuple[str, ...], seed: int, *flags: str) -> str:
    tree = str(tmp_path / f"in_{len(classes)}_{seed}")
    if not os.path.exists(tree):
        make_class_tree(tree, classes=classes, per_class=8, seed=seed, broken=False)
    out = str(tmp_path / name)
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *flags)
    assert status == 0, err
    return out


def _splice(source: str, source_name: str, target: str, target_name: str) -> None:
    """Copies a shard (and its .idx) from another build over a shard of ``target`` and fixes
    the target's manifest entry up from the source's (records, bytes, sha256, label counts)."""
    shutil.copy(os.path.join(source, source_name), os.path.join(target, target_name))
    shutil.copy(os.path.join(source, "index", source_name + ".idx"),
                os.path.join(target, "index", target_name + ".idx"))
    entry = next(s for sp in load_manifest(source)["splits"].values() for s in sp["shards"]
                 if s["file"] == source_name)
    datas = [d for _, d in records(os.path.join(target, target_name))]
    replace_shard(target, target_name, datas, {k: v for k, v in entry["label_counts"].items()})


@pytest.mark.slow
def test_spliced_shard_from_another_build_is_caught_when_it_can_be(tmp_path, capsys):
    # A: daisy, rose, tulip. B: the same photos a month later, with a new class "lily" that
    # shifts rose and tulip by one; its shard spliced into A with the manifest fixed up.
    a = _build(tmp_path, capsys, "a", ("daisy", "rose", "tulip"), 1, "--num_shards", "2")
    b = _build(tmp_path, capsys, "b", ("daisy", "lily", "rose", "tulip"), 2, "--num_shards", "2")
    _splice(b, "train-00001-of-00002.tfrecord", a, "train-00001-of-00002.tfrecord")
    status, problems = _verify_report(capsys, tmp_path, "--output_dir", a)
    assert status == 1
    assert problems and {p["kind"] for p in problems} == {"label_mismatch"}
    assert all(p["file"].endswith("train-00001-of-00002.tfrecord") for p in problems)
    assert any("image/class/text" in p["detail"] for p in problems)
    assert any("counts labels 3" in p["detail"] for p in problems)

    # C: A's own photos built again with another seed and split; its train shard spliced in as
    # A's validation shard: the images are now in two splits.
    c = _build(tmp_path, capsys, "c", ("daisy", "rose", "tulip"), 1, "--num_shards", "2",
               "--split", "validation", "--seed", "9")
    a2 = _build(tmp_path, capsys, "a2", ("daisy", "rose", "tulip"), 1, "--num_shards", "2",
                "--split_fractions", "train=0.5,validation=0.5")
    _splice(c, "validation-00000-of-00002.tfrecord", a2, "validation-00000-of-00002.tfrecord")
    status, problems = _verify_report(capsys, tmp_path, "--output_dir", a2)
    assert status == 1 and {p["kind"] for p in problems} == {"duplicate_key"}
    assert any("train there" in p["detail"] or "train here" in p["detail"] for p in problems)

    # Not detectable: a shard of another build with the same class list and other photos is
    # a valid shard of this set once its manifest entry is fixed up.
    d = _build(tmp_path, capsys, "d", ("daisy", "rose", "tulip"), 5, "--num_shards", "2")
    a3 = _build(tmp_path, capsys, "a3", ("daisy", "rose", "tulip"), 1, "--num_shards", "2")
    _splice(d, "train-00001-of-00002.tfrecord", a3, "train-00001-of-00002.tfrecord")
    status, problems = _verify_report(capsys, tmp_path, "--output_dir", a3)
    assert status == 0, problems
