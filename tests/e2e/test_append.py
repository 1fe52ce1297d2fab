"""Appending: new inputs join a published set, whose shards stay as they are.

Each case runs the real job on real image files and reads the result with the
tool's verify job and with TensorFlow:

- new records get new shards; every published shard keeps its bytes (renamed
  only when the split's shard count changes ``-of-NNNNN``), or, when the new
  records alone would make a shard under the byte band, exactly one published
  shard (the smallest) is written again with them; every shard stays in the band;
- an image the set already holds (same bytes, any split) is a ``duplicate_image``
  dead letter, not a bad input; an append with nothing new changes nothing (exit 0);
- split fractions follow the content-hash rule: an image lands where a full
  rebuild would put it;
- flags that shape the records must be the set's; without a set, nothing to append to;
- a crash while an append publishes leaves the old set, no manifest, or the new
  one; the next run finishes the append first, and the folder is then byte for
  byte what an uninterrupted append gives.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.reliability_support import assert_only_shard_set, folder_bytes, manifest_problems, tree_state
from tests.shard_fixtures import dead_letters, examples, load_manifest, records, run_build, shard_files, write
from tests.trees import Part
from transforms.shardset.planning import MIB

SHARD_MB = 0.02  # small shards: a few records each
TARGET = int(SHARD_MB * MIB)
FLAGS = ["--shard_size_mb", str(SHARD_MB), "--seed", "3"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# day1/ (3 classes x 8), day2/ (a new class x 8 and 4 more daisies, under names day1/ does not have),
# one/ (a single image) (tests/trees.py).
TREES = {
    "day1": (Part(per_class=8, seed=1),),
    "day2": (Part(classes=("lily",), per_class=8, seed=2), Part(classes=("daisy",), per_class=4, seed=3, prefix="new_")),
    "one": (Part(classes=("rose",), per_class=1, seed=7, prefix="late_"),),
}


@pytest.fixture()
def published(shared, trees, tmp_path) -> str:
    """A set built from day1/ (once per process, ``tests/trees.py``), copied into a fresh folder ``out``."""
    out = str(tmp_path / "out")
    shutil.copytree(shared.build(trees["day1"], *FLAGS), out)
    return out


@pytest.fixture(scope="module")
def appended(shared, trees, tmp_path_factory) -> str:
    """What an uninterrupted append of day2/ makes of that set, in a folder ``out`` (read only)."""
    from beam_jobs import append_shards

    out = str(tmp_path_factory.mktemp("appended") / "out")
    shutil.copytree(shared.build(trees["day1"], *FLAGS), out)
    assert append_shards.run(["--input", trees["day2"], "--output_dir", out, *FLAGS]) == 0
    return out


def _append(capsys, *argv: str) -> tuple[int, str, str]:
    from beam_jobs import append_shards

    capsys.readouterr()
    status = append_shards.run(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _shard_contents(out: str) -> dict[bytes, str]:
    """Bytes of each shard -> its name."""
    contents = {}
    for name in shard_files(out):
        with open(os.path.join(out, name), "rb") as fh:
            contents[fh.read()] = name
    return contents


def _verify(capsys, out: str) -> None:
    from beam_jobs import verify_shards

    capsys.readouterr()
    status = verify_shards.run(["--output_dir", out])
    _, err = capsys.readouterr()
    assert status == 0, err


def _keys_by_split(out: str) -> dict[str, str]:
    """image/key/sha256 -> split of every record of a set."""
    found = {}
    for name in shard_files(out):
        for example in examples(os.path.join(out, name)):
            found[example["image/key/sha256"].decode()] = name.split("-")[0]
    return found


def _in_band(out: str) -> None:
    """Every shard holds between 2T/3 and 4T/3 bytes, to within one largest record (a build's
    rule: records are not cut), unless its split is one shard."""
    manifest = load_manifest(out)
    largest = max(len(data) + 16 for name in shard_files(out) for _, data in records(os.path.join(out, name)))
    for split in manifest["splits"].values():
        sizes = [shard["bytes"] for shard in split["shards"]]
        if len(sizes) > 1:
            assert all(3 * (size + largest) >= 2 * TARGET and 3 * (size - largest) <= 4 * TARGET
                       for size in sizes), (sizes, largest)


@pytest.mark.slow
def test_new_records_get_new_shards_and_published_shards_keep_their_bytes(trees, published, capsys) -> None:
    before = _shard_contents(published)
    old = load_manifest(published)
    status, out, err = _append(capsys, "--input", trees["day2"], "--output_dir", published, *FLAGS)
    assert status == 0, err
    manifest = load_manifest(published)
    after = _shard_contents(published)
    assert set(before) <= set(after)  # every published shard's bytes are still there, as they were
    assert len(after) > len(before)
    assert manifest["labels"] == old["labels"] + ["lily"]  # published classes keep their indexes
    assert manifest["splits"]["train"]["records"] == old["splits"]["train"]["records"] + 12
    assert manifest["appended"] == {"train": old["splits"]["train"]["records"]}
    assert manifest["splits"]["train"]["built_from"] == [trees["day1"], trees["day2"]]
    assert f"appended to split train: 24 -> 36 records (+12)" in out
    assert "Published 12 records" in out and "written + dead-lettered = 12 inputs" in out
    labels = manifest["splits"]["train"]["label_counts"]
    assert labels == {"0": 12, "1": 8, "2": 8, "3": 8}  # daisy 8 + 4, rose, tulip, lily
    _in_band(published)
    _verify(capsys, published)
    assert_only_shard_set(published)

    import tensorflow as tf

    files = sorted(os.path.join(published, n) for n in shard_files(published))
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
            "image/class/text": tf.io.FixedLenFeature([], tf.string)}
    seen = {}
    for raw in tf.data.TFRecordDataset(files):
        parsed = tf.io.parse_single_example(raw, spec)
        assert tf.io.decode_image(parsed["image/encoded"]).shape[-1] == 3
        seen[parsed["image/class/text"].numpy().decode()] = int(parsed["image/class/label"])
    assert seen == {"daisy": 0, "rose": 1, "tulip": 2, "lily": 3}


@pytest.mark.slow
def test_few_new_records_join_one_published_shard(trees, published, capsys) -> None:
    before = _shard_contents(published)
    old = load_manifest(published)
    status, out, err = _append(capsys, "--input", trees["one"], "--output_dir", published, *FLAGS)
    assert status == 0, err
    after = _shard_contents(published)
    assert len(set(before) - set(after)) == 1  # exactly one published shard was written again
    assert len(after) - len(set(before) & set(after)) in (1, 2)  # ... as one or two shards
    manifest = load_manifest(published)
    assert manifest["splits"]["train"]["records"] == old["splits"]["train"]["records"] + 1
    assert "appended to split train: 24 -> 25 records (+1)" in out
    _in_band(published)
    _verify(capsys, published)
    # The merged shard's records are all still there: every key of the old set, and one more.
    keys = _keys_by_split(published)
    assert len(keys) == 25


@pytest.mark.slow
def test_images_already_in_the_set_are_duplicates_and_nothing_new_changes_nothing(trees, published,
                                                                                 tmp_path, capsys) -> None:
    grown = str(tmp_path / "grown")
    shutil.copytree(trees["day1"], grown)  # the same folder, later, with two more photos
    shutil.copy(os.path.join(trees["day2"], "lily", "lily_000.jpg"), os.path.join(grown, "rose", "new1.jpg"))
    shutil.copy(os.path.join(trees["day2"], "lily", "lily_001.jpg"), os.path.join(grown, "tulip", "new2.jpg"))
    status, out, err = _append(capsys, "--input", grown, "--output_dir", published, *FLAGS)
    assert status == 0, err  # 24 of 26 inputs are already there: not bad inputs (--max_bad_fraction)
    assert "Published 2 records" in out and "26 inputs" in out
    letters = [d for d in dead_letters(published) if d["reason"] == "duplicate_image"]
    assert len(letters) == 24
    assert all("already in split 'train'" in d["error"] for d in letters)
    state = tree_state(published)
    status, out, err = _append(capsys, "--input", grown, "--output_dir", published, *FLAGS)
    assert status == 0, err
    assert out.strip().splitlines()[-1] == (f"Nothing to append: all 26 inputs are already in {published} "
                                            "(same bytes); nothing was changed")
    assert tree_state(published) == state


@pytest.mark.slow
def test_nothing_new_but_inputs_known_bad_is_nothing_to_append(trees, published, tmp_path, capsys) -> None:
    grown = str(tmp_path / "grown")
    shutil.copytree(trees["day1"], grown)  # the same folder with one new photo and one stray text file
    shutil.copy(os.path.join(trees["day2"], "lily", "lily_000.jpg"), os.path.join(grown, "rose", "new1.jpg"))
    write(os.path.join(grown, "rose", "notes [1].jpg"), b"just some text\n")
    flags = [*FLAGS, "--max_bad_fraction", "0.5"]
    status, out, err = _append(capsys, "--input", grown, "--output_dir", published, *flags)
    assert status == 0, err
    assert "Published 1 record" in out
    state = tree_state(published)
    status, out, err = _append(capsys, "--input", grown, "--output_dir", published, *flags)
    assert status == 0, err  # the new photo is in the set now; the text file is as bad as it was
    lines = out.strip().splitlines()
    assert lines[-3] == (f"Nothing to append: 25 of 26 inputs are already in {published} (same bytes) "
                         "and the other 1 was rejected; nothing was changed"), out
    assert lines[-2] == "  rejected by reason: not_an_image 1"
    assert lines[-1].startswith(f"  e.g. {os.path.join(grown, 'rose', 'notes [1].jpg')}: not_an_image")
    assert tree_state(published) == state


@pytest.mark.slow
def test_a_successful_append_removes_a_refused_appends_dead_letters(trees, published, tmp_path, capsys) -> None:
    bad = str(tmp_path / "bad")
    write(os.path.join(bad, "rose", "notes.jpg"), b"just some text\n")
    status, _, err = _append(capsys, "--input", bad, "--output_dir", published, *FLAGS)
    assert status == 1 and "all 1 inputs were rejected" in err
    refused = os.path.join(published, "dead_letters.refused_append.jsonl")
    assert os.path.exists(refused)
    status, _, err = _append(capsys, "--input", trees["one"], "--output_dir", published, *FLAGS)
    assert status == 0, err
    assert not os.path.exists(refused)  # it told of the refused run; the set is now past it
    assert_only_shard_set(published)


@pytest.mark.slow
def test_split_fractions_put_an_image_where_a_rebuild_would(trees, tmp_path, capsys) -> None:
    flags = [*FLAGS, "--split_fractions", "train=0.6,validation=0.4"]
    appended, rebuilt = str(tmp_path / "appended"), str(tmp_path / "rebuilt")
    assert run_build(capsys, "--input", trees["day1"], "--output_dir", appended, *flags)[0] == 0
    status, _, err = _append(capsys, "--input", trees["day2"], "--output_dir", appended, *flags)
    assert status == 0, err
    status, _, err = run_build(capsys, "--input", trees["day1"], "--input", trees["day2"],
                               "--output_dir", rebuilt, *flags)
    assert status == 0, err
    assert _keys_by_split(appended) == _keys_by_split(rebuilt)
    assert set(load_manifest(appended)["appended"]) == {"train", "validation"}
    _verify(capsys, appended)


@pytest.mark.slow
@pytest.mark.parametrize("flags, named", [
    (["--image_mode", "passthrough"], "--image_mode tf"),
    (["--shard_size_mb", "1"], f"--shard_size_mb {SHARD_MB}"),
    (["--num_shards", "3"], "--num_shards"),
    (["--replace"], "--replace"),
    (["--class_names", "a,b"], "--class_names"),
])
def test_other_settings_are_refused_before_reading(trees, published, capsys, flags, named) -> None:
    state = tree_state(published)
    argv = ["--input", trees["day2"], "--output_dir", published, *FLAGS, *flags]
    status, _, err = _append(capsys, *argv)
    assert status == 2
    line = err.strip().splitlines()[-1]
    assert line.startswith("build_shards: error: --append") and named in line, line
    assert tree_state(published) == state


def test_nothing_to_append_to(trees, tmp_path, capsys) -> None:
    status, _, err = _append(capsys, "--input", trees["day2"], "--output_dir", str(tmp_path / "none"), *FLAGS)
    assert status == 2
    assert "holds no published set (manifest.json) to append to" in err


# Moments a crash stops an append while it publishes (tests/pause_at.py), and what a reader finds then.
PAUSES = [
    ("before the journal", "create", r"\.publishing\.json\.[0-9a-f]+\.tmp$", 1, "old"),
    ("renaming shards", "os.rename", r"train-\d+-of-\d+\.tfrecord$", 3, "none"),
    ("before the manifest", "os.rename", r"/manifest\.json$", 1, "none"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, op, pattern, nth, manifest", PAUSES, ids=[p[0] for p in PAUSES])
def test_a_crash_while_publishing_is_finished_by_the_next_run(shared, trees, appended, tmp_path, capsys, name, op,
                                                               pattern, nth, manifest) -> None:
    base = shared.build(trees["day1"], *FLAGS)
    reference, out = appended, str(tmp_path / "out")
    shutil.copytree(base, out)
    argv = ["--input", trees["day2"], "--output_dir", "OUT", *FLAGS]
    marker, log = str(tmp_path / "stopped.json"), str(tmp_path / "job.log")
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "tests.pause_at", op, pattern, str(nth), marker, "--",
                                 "append", *[out if a == "OUT" else a for a in argv]],
                                cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        while not os.path.exists(marker):
            try:
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue
            pytest.fail(f"the append ended ({proc.returncode}) before {name}: {open(log).read()[-2000:]}")
        path = os.path.join(out, "manifest.json")
        if manifest == "old":
            assert open(path, "rb").read() == open(os.path.join(base, "manifest.json"), "rb").read()
            assert manifest_problems(out, open(path, "rb").read()) == []
        else:
            assert not os.path.exists(path)  # no manifest: a reader never sees a half-renamed set
    finally:
        proc.kill()
        proc.wait(timeout=60)
    status, stdout, err = _append(capsys, *[out if a == "OUT" else a for a in argv])
    assert status == 0, err
    if manifest == "none":  # the journal was finished first: then every input is already there
        assert "Nothing to append" in stdout
    assert_only_shard_set(out)
    assert folder_bytes(out) == folder_bytes(reference)
    _verify(capsys, out)


@pytest.mark.slow
def test_plan_of_an_append(trees, published, capsys) -> None:
    from beam_jobs import plan_build

    state = tree_state(published)
    capsys.readouterr()
    status = plan_build.run(["--input", trees["day2"], "--output_dir", published, *FLAGS, "--append"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "appends to (its shards kept): train (24 -> ~36 records)" in out
    assert tree_state(published) == state  # a plan writes nothing


@pytest.mark.slow
def test_an_append_with_staging_dir_writes_the_same_set_and_leaves_the_folder_as_it_was(trees, published, appended,
                                                                                       tmp_path, capsys) -> None:
    from tests.reliability_support import folder_bytes

    stage = str(tmp_path / "stage")
    write(os.path.join(stage, "other.txt"), b"not the append's")
    status, _, err = _append(capsys, "--input", trees["day2"], "--output_dir", published, "--staging_dir", stage,
                             *FLAGS)
    assert status == 0, err
    assert folder_bytes(published) == folder_bytes(appended)  # the same append without --staging_dir
    assert os.listdir(stage) == ["other.txt"]
    assert not os.path.exists(os.path.join(published, ".staging"))


@pytest.mark.slow
def test_every_shard_has_a_keys_file_of_its_records_keys_that_verify_checks(trees, published, capsys) -> None:
    import json

    from beam_jobs import verify_shards

    status, _, err = _append(capsys, "--input", trees["day2"], "--output_dir", published, *FLAGS)
    assert status == 0, err
    with open(os.path.join(published, "shards.jsonl"), "rb") as fh:
        listed = [json.loads(line) for line in fh]
    for entry in listed:  # the appended shards, the merged one and the renamed published ones
        with open(os.path.join(published, "index", entry["file"] + ".keys"), "rb") as fh:
            keys = fh.read()
        assert "keys_crc32c" in entry
        assert keys == b"".join(bytes.fromhex(e["image/key/sha256"].decode())
                                for e in examples(os.path.join(published, entry["file"])))
    _verify(capsys, published)
    damaged = os.path.join(published, "index", listed[0]["file"] + ".keys")
    with open(damaged, "r+b") as fh:
        fh.write(b"\0")
    capsys.readouterr()
    assert verify_shards.run(["--output_dir", published]) != 0
    out, err = capsys.readouterr()
    assert f"{damaged}: crc32c_mismatch" in out + err or (damaged in out + err and "crc32c_mismatch" in out + err)


@pytest.mark.slow
def test_an_append_judges_only_the_inputs_it_adds_not_those_the_set_already_dead_lettered(trees, tmp_path,
                                                                                         capsys) -> None:
    grown = str(tmp_path / "photos")
    shutil.copytree(trees["day1"], grown)
    write(os.path.join(grown, "rose", "notes.jpg"), b"just some text\n")  # two bad inputs, dead-lettered
    write(os.path.join(grown, "tulip", "empty.jpg"), b"")
    out = str(tmp_path / "out")
    flags = [*FLAGS, "--max_bad_fraction", "0.1"]
    status, _, err = run_build(capsys, "--input", grown, "--output_dir", out, *flags)
    assert status == 0, err  # 2 of 26 bad
    before = sorted((d["path"], d["reason"]) for d in dead_letters(out))
    assert len(before) == 2
    for n in (0, 1, 3):  # three new photos in the same folder
        shutil.copy(os.path.join(trees["day2"], "lily", f"lily_00{n}.jpg"), os.path.join(grown, "rose", f"new{n}.jpg"))
    status, printed, err = _append(capsys, "--input", grown, "--output_dir", out, *flags)
    assert status == 0, err  # judged over the 3 inputs it adds, not "2 of 5 (40%)"
    assert "Published 3 records" in printed
    assert ("24 dead letters, 2 inputs already dead-lettered in the set; "
            "written + dead-lettered = 29 inputs") in printed, printed
    letters = dead_letters(out)
    assert sorted((d["path"], d["reason"]) for d in letters if d["reason"] != "duplicate_image") == before
    manifest = load_manifest(out)
    assert manifest["dead_letters"] == len(letters) == 2 + 24
    assert manifest["records"] == 24 + 3
    _verify(capsys, out)
