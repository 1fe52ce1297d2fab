"""``build --format array_record``: the records of a TFRecord build, in ArrayRecord files.

One folder is built in both formats; the ArrayRecord set is read by the readers it is for
(ArrayRecord's own reader, tfds's ``as_data_source``, Grain) and by the docs' recipes.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

import pytest

from tests.recipes import recipe
from tests.shard_fixtures import load_manifest, make_class_tree, records, run_build

pytest.importorskip("array_record", reason="the array_record package is not installed")

CLASSES = ["daisy", "rose", "tulip"]


def _array_records(path: str) -> list[bytes]:
    from array_record.python.array_record_module import ArrayRecordReader

    reader = ArrayRecordReader(path)
    try:
        return reader.read_all()
    finally:
        reader.close()


def _filename(record: bytes) -> str:
    from transforms.example.codec import decode_example

    return decode_example(record)["image/filename"][1][0].decode()


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[str, str, dict[str, str]]:
    """(TFRecord set, ArrayRecord set, input path -> class) built from one folder."""
    from beam_jobs import build_shards

    root = tmp_path_factory.mktemp("formats")
    src = str(root / "src")
    expected = make_class_tree(src, per_class=8, broken=True)
    sets = []
    for file_format in ("tfrecord", "array_record"):
        out = str(root / file_format / "flowers")
        assert build_shards.run(["--input", src, "--output_dir", out, "--num_shards", "3",
                                 "--format", file_format, "--max_bad_fraction", "0.2"]) == 0
        sets.append(out)
    return sets[0], sets[1], expected


@pytest.mark.slow
def test_both_formats_hold_the_same_records_in_the_same_shards_and_order(both) -> None:
    tfrecords, arrayrecords, expected = both
    old, new = load_manifest(tfrecords), load_manifest(arrayrecords)
    assert new["options"]["format"] == "array_record" and old["options"]["format"] == "tfrecord"
    assert new["dead_letters"] == old["dead_letters"] == 3
    assert new["records"] + new["dead_letters"] == len(expected)
    old_shards, new_shards = old["splits"]["train"]["shards"], new["splits"]["train"]["shards"]
    assert [s["file"] for s in new_shards] == [f"train-{i:05d}-of-00003.array_record" for i in range(3)]
    # No .idx (ArrayRecord files index themselves); index/ holds the shards' keys files only.
    assert sorted(os.listdir(os.path.join(arrayrecords, "index"))) == [s["file"] + ".keys" for s in new_shards]
    for before, after in zip(old_shards, new_shards, strict=True):  # the same keys, in the same order
        with open(os.path.join(tfrecords, "index", before["file"] + ".keys"), "rb") as theirs, \
                open(os.path.join(arrayrecords, "index", after["file"] + ".keys"), "rb") as ours:
            assert ours.read() == theirs.read() and after["keys_crc32c"] == before["keys_crc32c"]
    for before, after in zip(old_shards, new_shards, strict=True):
        theirs = [data for _, data in records(os.path.join(tfrecords, before["file"]))]
        ours = _array_records(os.path.join(arrayrecords, after["file"]))
        assert [_filename(r) for r in ours] == [_filename(r) for r in theirs]
        assert ours == theirs  # the same serialized Examples, byte for byte, in order
        assert (after["records"], after["label_counts"]) == (before["records"], before["label_counts"])
        assert after["bytes"] == os.path.getsize(os.path.join(arrayrecords, after["file"]))
    with open(os.path.join(arrayrecords, "dead_letters.jsonl")) as a, \
            open(os.path.join(tfrecords, "dead_letters.jsonl")) as b:
        assert a.read() == b.read()


@pytest.mark.slow
def test_tfds_data_source_gives_random_access_with_class_names(both) -> None:
    import tensorflow_datasets as tfds

    _, arrayrecords, expected = both
    info = json.load(open(os.path.join(arrayrecords, "dataset_info.json")))
    assert info["fileFormat"] == "array_record"
    assert {s["filepathTemplate"] for s in info["splits"]} == {"{SPLIT}-{SHARD_INDEX}-of-{NUM_SHARDS}.array_record"}
    builder = tfds.builder_from_directory(arrayrecords)
    assert builder.info.features["image/class/label"].names == CLASSES
    source = builder.as_data_source(split="train")
    good = {path: label for path, label in expected.items() if not label.startswith("dead:")}
    assert len(source) == len(good)
    for index in (len(source) - 1, 0, 7):  # any order
        example = source[index]
        path = example["image/filename"].decode()
        assert CLASSES[int(example["image/class/label"])] == good[path]
        assert example["image/encoded"].ndim == 3


@pytest.mark.slow
def test_grain_recipe_reads_every_record_once_with_its_label(both) -> None:
    _, arrayrecords, expected = both
    scope: dict = {}
    exec(compile(recipe("grain", arrayrecords), "docs/reading.md", "exec"), scope)  # noqa: S102
    rows = [(ex["image/filename"].decode(), scope["names"][int(ex["image/class/label"])]) for ex in scope["ds"]]
    good = {path: label for path, label in expected.items() if not label.startswith("dead:")}
    assert sorted(rows) == sorted(good.items())
    assert [path for path, _ in rows] != sorted(good)  # shuffled


@pytest.mark.slow
def test_tfds_data_source_recipe_reads_a_record(both) -> None:
    _, arrayrecords, expected = both
    scope: dict = {}
    exec(compile(recipe("tfds-data-source", arrayrecords), "docs/reading.md", "exec"), scope)  # noqa: S102
    assert len(scope["source"]) == sum(1 for label in expected.values() if not label.startswith("dead:"))
    assert scope["example"]["image/encoded"].ndim == 3


@pytest.mark.parametrize("flags, said", [
    (("--compression", "gzip"), "leave out --compression gzip"),
    (("--append",), "--append adds to TFRecord sets only"),
])
def test_array_record_refuses_what_it_does_not_go_with(tmp_path, capsys, flags, said) -> None:
    status, _, err = run_build(capsys, "--input", str(tmp_path), "--output_dir", str(tmp_path / "out"),
                               "--format", "array_record", *flags)
    assert status == 2
    assert said in err


@pytest.mark.slow
def test_verify_checks_an_array_record_set_and_names_a_damaged_shard(both, tmp_path, capsys) -> None:
    import shutil

    from beam_jobs import verify_shards

    _, arrayrecords, _ = both
    capsys.readouterr()
    assert verify_shards.run(["--output_dir", arrayrecords, "--decode_images"]) == 0
    assert "no problems" in capsys.readouterr().out
    damaged = str(tmp_path / "damaged")
    shutil.copytree(arrayrecords, damaged)
    shard = os.path.join(damaged, "train-00001-of-00003.array_record")
    data = bytearray(open(shard, "rb").read())
    data[len(data) // 8] ^= 0xFF  # inside a record's chunk
    open(shard, "wb").write(bytes(data))
    assert verify_shards.run(["--output_dir", damaged]) == 1
    out = capsys.readouterr().out
    assert "crc32c_mismatch: " + shard in out
    assert "crc_mismatch: " + shard in out


@pytest.mark.slow
def test_inspect_prints_an_array_record_files_records_from_a_number(both) -> None:
    import io

    from beam_jobs import inspect_shard

    _, arrayrecords, _ = both
    shard = os.path.join(arrayrecords, "train-00000-of-00003.array_record")
    out = io.StringIO()
    assert inspect_shard.run([shard, "--limit", "2", "--offset", "1"], out=out) == 0
    text = out.getvalue()
    assert text.startswith("record 1: ") and "\nrecord 2: " in text and "record 3" not in text
    assert "image/class/label" in text and text.rstrip().endswith("more follow")


@pytest.mark.parametrize("content", [b"", b"not an ArrayRecord file\n" * 4000])
def test_inspect_of_a_file_that_is_not_array_record_fails_in_one_line(tmp_path, capsys, content) -> None:
    import io

    from beam_jobs import inspect_shard

    path = tmp_path / "train-00000-of-00001.array_record"
    path.write_bytes(content)
    capsys.readouterr()
    assert inspect_shard.run([str(path)], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path} is not a readable ArrayRecord file" in err


@pytest.mark.slow
def test_a_split_added_beside_an_array_record_split_knows_its_images_and_keeps_one_format(tmp_path, capsys) -> None:
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    make_class_tree(src, per_class=3, broken=False)
    status, _, err = run_build(capsys, "--input", src, "--output_dir", out, "--format", "array_record")
    assert status == 0, err
    # The published ArrayRecord shards' keys are read: the same images for another split are duplicates.
    status, _, err = run_build(capsys, "--input", src, "--output_dir", out, "--format", "array_record",
                               "--split", "validation", "--max_bad_fraction", "1")
    assert status == 1 and "nothing was published" in err or status == 0, err
    reasons = {json.loads(line)["reason"] for line in open(os.path.join(out, "dead_letters.jsonl"))
               if line.strip()} if status == 0 else set()
    assert status == 1 or reasons, "the images already in train were not found"
    status, _, err = run_build(capsys, "--input", src, "--output_dir", out, "--split", "test")
    assert status == 2
    assert "holds split 'train' as array_record shards" in err


@pytest.mark.slow
def test_verify_reads_a_local_array_record_shard_in_ranges_of_record_numbers(both, tmp_path, capsys,
                                                                            monkeypatch) -> None:
    import shutil

    from apache_beam.io.iobase import Read

    from beam_jobs import verify_shards

    monkeypatch.setattr(Read, "get_desired_chunk_size", staticmethod(lambda size: 1))  # one record a range
    monkeypatch.setattr(verify_shards, "split_ranges_for", lambda *args: True)  # split at the start
    _, arrayrecords, _ = both
    damaged = str(tmp_path / "damaged")
    shutil.copytree(arrayrecords, damaged)
    shard = os.path.join(damaged, "train-00001-of-00003.array_record")
    records = load_manifest(damaged)["splits"]["train"]["shards"][1]["records"]
    data = bytearray(open(shard, "rb").read())
    data[len(data) // 8] ^= 0xFF  # inside one record's chunk
    open(shard, "wb").write(bytes(data))
    capsys.readouterr()
    assert verify_shards.run(["--output_dir", damaged]) == 1
    out = capsys.readouterr().out
    assert "crc_mismatch: " + shard in out and "crc32c_mismatch: " + shard in out
    # Each record its own range: only the damaged one is not read, the shard's others are.
    total = load_manifest(damaged)["records"]
    assert f"not read: 1 of the {total} records" in out, out
    assert records > 1


@pytest.fixture(scope="module")
def resharded(both, tmp_path_factory) -> tuple[str, str]:
    """(TFRecord reshard, ArrayRecord reshard) of the TFRecord build, with the same flags."""
    from beam_jobs import reshard

    tfrecords, _, _ = both
    root = tmp_path_factory.mktemp("resharded")
    sets = []
    for file_format in ("tfrecord", "array_record"):
        out = str(root / file_format / "flowers")
        assert reshard.run(["--input", os.path.join(tfrecords, "train-*"), "--output_dir", out,
                            "--num_shards", "2", "--seed", "7", "--format", file_format]) == 0
        sets.append(out)
    return sets[0], sets[1]


@pytest.mark.slow
def test_reshard_to_array_record_holds_the_records_a_tfrecord_reshard_holds(both, resharded) -> None:
    tfrecords, arrayrecords = resharded
    old, new = load_manifest(tfrecords), load_manifest(arrayrecords)
    assert new["options"]["format"] == "array_record" and old["options"]["format"] == "tfrecord"
    assert new["records"] == old["records"] == load_manifest(both[0])["records"]
    old_shards, new_shards = old["splits"]["train"]["shards"], new["splits"]["train"]["shards"]
    assert [s["file"] for s in new_shards] == [f"train-{i:05d}-of-00002.array_record" for i in range(2)]
    for before, after in zip(old_shards, new_shards, strict=True):
        theirs = [data for _, data in records(os.path.join(tfrecords, before["file"]))]
        ours = _array_records(os.path.join(arrayrecords, after["file"]))
        assert [_filename(r) for r in ours] == [_filename(r) for r in theirs]
        assert ours == theirs  # the same serialized Examples, byte for byte, in order
        assert (after["records"], after["label_counts"]) == (before["records"], before["label_counts"])


@pytest.mark.slow
def test_reshard_to_array_record_verifies_and_reads_with_tfds_and_class_names(resharded, capsys) -> None:
    import tensorflow_datasets as tfds

    from beam_jobs import verify_shards

    _, arrayrecords = resharded
    capsys.readouterr()
    assert verify_shards.run(["--output_dir", arrayrecords]) == 0
    assert "no problems" in capsys.readouterr().out
    info = json.load(open(os.path.join(arrayrecords, "dataset_info.json")))
    assert info["fileFormat"] == "array_record"
    builder = tfds.builder_from_directory(arrayrecords)
    assert builder.info.features["image/class/label"].names == CLASSES
    source = builder.as_data_source(split="train")
    assert len(source) == load_manifest(arrayrecords)["records"]
    example = source[len(source) - 1]
    assert example["image/filename"].decode().split("/")[-2] == CLASSES[int(example["image/class/label"])]


def _run_reshard(capsys, *argv: str) -> tuple[int, str]:
    from beam_jobs import reshard

    capsys.readouterr()
    status = reshard.run(list(argv))
    return status, capsys.readouterr().err


def test_reshard_to_array_record_refuses_compression_in_one_line(tmp_path, capsys) -> None:
    status, err = _run_reshard(capsys, "--input", str(tmp_path / "x-*"), "--output_dir", str(tmp_path / "out"),
                               "--format", "array_record", "--compression", "gzip")
    assert status == 2
    assert "leave out --compression gzip" in err and err.count("\n") == 1


@pytest.mark.slow
def test_reshard_of_an_array_record_set_to_tfrecord_writes_the_tfrecord_reshards_shards(both, resharded,
                                                                                       tmp_path, capsys) -> None:
    from tests.shard_fixtures import shard_bytes

    _, arrayrecords, _ = both
    out = str(tmp_path / "back")
    status, err = _run_reshard(capsys, "--input", os.path.join(arrayrecords, "train-*"), "--output_dir", out,
                               "--num_shards", "2", "--seed", "7", "--format", "tfrecord")
    assert status == 0, err
    theirs = load_manifest(resharded[0])["splits"]["train"]["shards"]
    ours = load_manifest(out)["splits"]["train"]["shards"]
    assert [s["file"] for s in ours] == [s["file"] for s in theirs] == [f"train-{i:05d}-of-00002.tfrecord"
                                                                     for i in range(2)]
    for before, after in zip(theirs, ours, strict=True):  # records ordered by content: the same shards
        assert shard_bytes(os.path.join(out, after["file"])) == shard_bytes(os.path.join(resharded[0], before["file"]))
    assert load_manifest(out)["labels"] == CLASSES
    capsys.readouterr()
    from beam_jobs import verify_shards

    assert verify_shards.run(["--output_dir", out]) == 0


@pytest.mark.slow
def test_reshard_of_a_damaged_array_record_file_fails_or_dead_letters_the_rest_of_it(both, tmp_path, capsys) -> None:
    import shutil

    _, arrayrecords, _ = both
    old = str(tmp_path / "old")
    shutil.copytree(arrayrecords, old)
    shard = os.path.join(old, "train-00001-of-00003.array_record")
    data = bytearray(open(shard, "rb").read())
    data[len(data) // 8] ^= 0xFF  # inside a record's chunk
    open(shard, "wb").write(bytes(data))
    pattern = os.path.join(old, "train-*")
    status, err = _run_reshard(capsys, "--input", pattern, "--output_dir", str(tmp_path / "a"))
    assert status == 1 and f"crc_mismatch: {shard}" in err and "cannot be read" in err, err
    out = str(tmp_path / "b")
    status, err = _run_reshard(capsys, "--input", pattern, "--output_dir", out, "--skip_corrupt",
                               "--max_bad_fraction", "1")
    assert status == 0, err
    letters = [json.loads(line) for line in open(os.path.join(out, "dead_letters.jsonl")) if line.strip()]
    assert [(d["path"], d["reason"]) for d in letters] == [(shard, "crc_mismatch")]
    assert "at record " in letters[0]["error"] and "reading of this stretch stopped there" in letters[0]["error"]
    manifest = load_manifest(out)
    assert 0 < manifest["records"] < load_manifest(arrayrecords)["records"] and manifest["dead_letters"] == 1


@pytest.mark.slow
def test_reshard_of_tfrecord_and_array_record_files_together_reads_both(both, tmp_path, capsys) -> None:
    tfrecords, arrayrecords, _ = both
    out = str(tmp_path / "out")
    status, err = _run_reshard(capsys, "--input", os.path.join(tfrecords, "train-*"),
                               "--input", os.path.join(arrayrecords, "train-*"), "--output_dir", out,
                               "--skip_corrupt", "--format", "array_record")
    assert status == 0, err
    (shard,) = load_manifest(out)["splits"]["train"]["shards"]
    ours = sorted(_array_records(os.path.join(out, shard["file"])))
    theirs = sorted(data for s in load_manifest(tfrecords)["splits"]["train"]["shards"]
                    for _, data in records(os.path.join(tfrecords, s["file"])))
    assert ours == sorted(theirs * 2)  # every record of each set, once each


def test_reshard_of_array_record_input_without_the_package_is_refused_in_one_line(tmp_path, capsys,
                                                                                  monkeypatch) -> None:
    from beam_jobs import reshard

    monkeypatch.setattr(reshard, "missing_module", lambda: "ArrayRecord needs the array_record package")
    shard = tmp_path / "old" / "train-00000-of-00001.array_record"
    shard.parent.mkdir()
    shard.write_bytes(b"\0" * 64)
    status, err = _run_reshard(capsys, "--input", str(tmp_path / "old" / "train-*"),
                               "--output_dir", str(tmp_path / "out"))
    assert status == 2
    assert f"{shard} is an ArrayRecord file: ArrayRecord needs the array_record package" in err
    assert err.count("\n") == 1


@pytest.mark.slow
def test_reshard_keeps_one_format_in_a_set(both, tmp_path, capsys) -> None:
    tfrecords, _, _ = both
    out = str(tmp_path / "out")
    status, err = _run_reshard(capsys, "--input", os.path.join(tfrecords, "train-*"), "--output_dir", out)
    assert status == 0, err
    status, err = _run_reshard(capsys, "--input", os.path.join(tfrecords, "train-*"), "--output_dir", out,
                               "--split", "validation", "--format", "array_record")
    assert status == 2
    assert "holds split 'train' as tfrecord shards" in err and err.count("\n") == 1
    assert sorted(load_manifest(out)["splits"]) == ["train"]
