"""Unit tests for transforms.verify.checks, including damage at every byte of a shard set.

``verify_in_memory`` chains the same checks the Beam job runs, reading every
uncompressed shard in three byte ranges as a split read would; here it is run
on every single-byte flip and every cut of a small shard set.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random

import pytest

from tests.tfrecord_fixtures import ShardSet, image_bytes, image_example, write_shard_set
from tests.helpers import encode_example
from transforms.tfrecord.framing import frame_record
from transforms.shardset.manifest import ShardEntry, SplitEntry
from transforms.example.schema import IMAGE_FEATURES
from transforms.verify.checks import (PROBLEM_KINDS, Problem, Report, ShardTally, check_record,
                                      duplicate_key_problems, index_problems, listing_problems,
                                      shard_problems)
from tests.helpers import build_report, report_bytes, verify_in_memory


def _files(folder: str) -> dict[str, bytes]:
    """Relative path -> bytes of every file under ``folder`` (indexes are in ``index/``)."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder).replace(os.sep, "/")] = fh.read()
    return out


def _tiny_set(folder: str, compression: str = "none") -> ShardSet:
    """Two shards of three small PNG/raw records each: about 1.2 KB per shard."""
    return write_shard_set(folder, splits={"train": 1, "validation": 1}, per_shard=3,
                           compression=compression, sides=(2, 4), raw_every=3, formats=("png",))


# --- check_record ------------------------------------------------------------------------


def _record(**overrides) -> bytes:
    encoded = image_bytes("rose", "png", 6, 5, random.Random(0))
    features = dict(label=1, text="rose", encoded=encoded, fmt="png", height=5, width=6)
    features.update(overrides)
    return image_example(features["label"], features["text"], features["encoded"], features["fmt"],
                         features["height"], features["width"])


def test_check_record_good() -> None:
    check, features = check_record("f", 16, _record(), decode_images=True)
    assert check.problems == ()
    assert (check.file, check.offset, check.label) == ("f", 16, 1)
    assert len(check.key) == 64 and features["image/class/text"] == ("bytes", [b"rose"])


@pytest.mark.parametrize("data, schema, decode, kind, words", [
    (b"\xff\xff\xff", True, False, "parse_error", "not a tf.train.Example"),
    (encode_example({"x": 1}), True, False, "schema", "missing feature image/encoded"),
    (_record(height=7), True, False, None, None),                 # sizes are not looked at
    (_record(height=7), True, True, "decode_error", "the record says png 7x6x3"),
    (_record(fmt="jpeg"), True, True, "decode_error", "image is png; the record says jpeg 5x6x3"),
    (_record(encoded=b"not an image"), True, True, "decode_error", "does not decode"),
    (_record(fmt="raw", encoded=bytes(5 * 6 * 3)), True, True, None, None),
    (_record(fmt="raw", encoded=bytes(5 * 6 * 3 - 1)), True, True, "decode_error", "needs 90"),
    (encode_example({"x": 1}), False, True, None, None),          # --files: any Example
])
def test_check_record_problems(data, schema, decode, kind, words) -> None:
    check, _ = check_record("f", 0, data, schema=schema, decode_images=decode)
    if kind is None:
        assert check.problems == ()
    else:
        assert [p.kind for p in check.problems] == [kind]
        assert words in check.problems[0].detail
        assert (check.problems[0].file, check.problems[0].offset) == ("f", 0)


# --- reconciliation with the manifest ------------------------------------------------------


def test_listing_problems(tmp_path) -> None:
    shards = write_shard_set(str(tmp_path), per_shard=2)
    present = {name: os.path.getsize(shards.path(name)) for name in shards.shard_names}
    del present["train-00001-of-00002.tfrecord"]
    present["validation-00000-of-00001.tfrecord"] += 1
    present["validation-00001-of-00002.tfrecord"] = 10  # shard-named, unlisted
    present["notes.txt"] = 3  # not shard-named: fine
    problems = listing_problems("out", shards.manifest, present)
    assert [(p.file, p.kind) for p in problems] == [
        ("out/train-00001-of-00002.tfrecord", "missing_file"),
        ("out/validation-00000-of-00001.tfrecord", "size_mismatch"),
        ("out/validation-00001-of-00002.tfrecord", "extra_file"),
    ]


def test_index_problems() -> None:
    assert index_problems("s.tfrecord", b"0 20\n", 20, required=True) == []
    assert index_problems("s.tfrecord", None, 20, required=False) == []
    assert [p.kind for p in index_problems("s.tfrecord", None, 20, required=True)] == ["missing_file"]
    [problem] = index_problems("s.tfrecord", b"0 20\n", 30, required=True)
    assert (problem.file, problem.offset, problem.kind) == ("index/s.tfrecord.idx", 20, "size_mismatch")


def test_shard_problems() -> None:
    entry = ShardEntry("s", 3, 100, "0" * 64, {"0": 2, "1": 1})
    assert shard_problems("p", entry, ShardTally(3, {"0": 2, "1": 1, "2": 0})) == []
    problems = shard_problems("p", entry, ShardTally(3, {"0": 1, "1": 2}))
    assert [p.kind for p in problems] == ["label_mismatch"]
    assert problems[0].detail == "label 0: read 1, manifest 2; label 1: read 2, manifest 1"
    assert [p.kind for p in shard_problems("p", entry, ShardTally(2, {"0": 2}))] == [
        "count_mismatch", "label_mismatch"]
    assert shard_problems("p", entry, ShardTally(1, {"0": 1}, damaged=True)) == []


def test_duplicate_key_problems() -> None:
    assert duplicate_key_problems("k", [("train", "a", 5)]) == []
    problems = duplicate_key_problems("k", [("train", "b", 9), ("train", "a", 5), ("train", "a", 90)])
    assert [(p.file, p.offset) for p in problems] == [("a", 90), ("b", 9)]
    assert "also at byte 5 of a (split train)" in problems[0].detail


def test_duplicate_key_across_splits_names_both_splits() -> None:
    problems = duplicate_key_problems("k", [("validation", "v", 0), ("train", "t", 40)])
    assert [(p.file, p.offset, p.kind) for p in problems] == [("v", 0, "duplicate_key")]
    assert problems[0].detail == ("image/key/sha256 k also at byte 40 of t: the image is in two "
                                  "splits, validation here and train there")
    unnamed = duplicate_key_problems("k", [(None, "a.tfrecord", 0), (None, "b.tfrecord", 7)])
    assert "(split (none: the file name names no split))" in unnamed[0].detail


def test_report_json_and_summary() -> None:
    problems = [Problem("b", 5, "crc_mismatch", "bad"), Problem("a", None, "missing_file", "gone")]
    report = build_report(2, 7, 1 << 20, problems)
    obj = json.loads(report_bytes(report))
    assert obj == {"ok": False, "files": 2, "records": 7, "bytes": 1 << 20, "problems": [
        {"file": "a", "offset": None, "kind": "missing_file", "detail": "gone"},
        {"file": "b", "offset": 5, "kind": "crc_mismatch", "detail": "bad"}]}
    assert Report.loads(report_bytes(report)) == report
    text = report.summary("out", max_listed=1)
    assert text.splitlines() == [
        "FAILED: out: 2 problems in 2 files, 7 records, 1.0 MiB",
        "  by kind: crc_mismatch 1, missing_file 1",
        "  missing_file: a: gone",
        "  ... and 1 more (see --report)"]
    assert build_report(1, 1, 0, []).summary("x").startswith("OK: x:")
    with pytest.raises(ValueError):
        Problem("a", None, "oops", "")
    assert len(PROBLEM_KINDS) == 17  # with not_tfrecord, decoder_mismatch, crc32c_mismatch, keys_mismatch


# --- verify_in_memory --------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_good_shard_set_passes(tmp_path, compression: str) -> None:
    shards = write_shard_set(str(tmp_path), compression=compression, raw_every=4)
    report = verify_in_memory(_files(str(tmp_path)), shards.manifest, decode_images=True)
    assert report.ok, report.problems
    assert (report.files, report.records) == (3, 18)


def test_files_mode_checks_any_tfrecords(tmp_path) -> None:
    files = {"a.tfrecord": frame_record(b"not an example?") + frame_record(encode_example({"x": 1}))}
    report = verify_in_memory(files)
    assert report.records == 2
    assert [(p.offset, p.kind) for p in report.problems] == [(0, "parse_error")]


def _record_start(shards: ShardSet, name: str, position: int) -> int:
    return max(o for o in shards.record_offsets(name) if o <= position)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_every_flipped_byte_fails_naming_file_and_record(tmp_path, compression: str) -> None:
    shards = _tiny_set(str(tmp_path), compression)
    files = _files(str(tmp_path))
    for name in shards.shard_names:
        for position in range(len(files[name])):
            damaged = bytearray(files[name])
            damaged[position] ^= 0x20
            report = verify_in_memory({**files, name: bytes(damaged)}, shards.manifest, "out")
            assert not report.ok
            assert {p.file for p in report.problems} == {f"out/{name}"}, (name, position)
            assert "sha256_mismatch" in {p.kind for p in report.problems}
            if compression == "none":
                start = _record_start(shards, name, position)
                assert any(p.offset == start and p.kind in ("crc_mismatch", "bad_length")
                           for p in report.problems), (name, position, report.problems)
                assert sum(p.offset is not None for p in report.problems) == 1


def test_every_cut_fails_naming_file_and_record(tmp_path) -> None:
    shards = _tiny_set(str(tmp_path))
    files = _files(str(tmp_path))
    for name in shards.shard_names:
        offsets = shards.record_offsets(name)
        for length in range(len(files[name])):
            report = verify_in_memory({**files, name: files[name][:length]}, shards.manifest, "out")
            kinds = {p.kind for p in report.problems}
            assert {p.file for p in report.problems} <= {f"out/{name}", f"out/index/{name}.idx"}
            assert {"size_mismatch", "sha256_mismatch"} <= kinds, length
            if length in offsets:  # between records: fewer records, no damaged one
                assert "count_mismatch" in kinds
            else:
                start = _record_start(shards, name, length)
                assert [(p.offset, p.kind in ("truncated", "bad_length")) for p in report.problems
                        if p.file.endswith(".tfrecord") and p.offset is not None] == [(start, True)]


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_every_cut_of_a_compressed_shard_fails(tmp_path, compression: str) -> None:
    shards = _tiny_set(str(tmp_path), compression)
    files = _files(str(tmp_path))
    name = shards.shard_names[0]
    for length in range(len(files[name])):
        report = verify_in_memory({**files, name: files[name][:length]}, shards.manifest, "out")
        assert {"size_mismatch", "sha256_mismatch"} <= {p.kind for p in report.problems}
        if length:
            assert any(p.kind == "truncated" for p in report.problems), length


def test_deleted_added_and_relabelled_shards(tmp_path) -> None:
    shards = write_shard_set(str(tmp_path), per_shard=4)
    files = _files(str(tmp_path))
    gone = dict(files)
    del gone["train-00001-of-00002.tfrecord"]
    report = verify_in_memory(gone, shards.manifest, "out")
    assert [(p.file, p.kind) for p in report.problems] == [
        ("out/train-00001-of-00002.tfrecord", "missing_file")]
    extra = {**files, "train-00002-of-00003.tfrecord": files["train-00000-of-00002.tfrecord"]}
    report = verify_in_memory(extra, shards.manifest, "out")
    assert [(p.file, p.kind) for p in report.problems] == [
        ("out/train-00002-of-00003.tfrecord", "extra_file")]
    # A shard written twice under two names repeats every key within its split.
    twice = dict(files)
    twice["train-00001-of-00002.tfrecord"] = files["train-00000-of-00002.tfrecord"]
    twice["index/train-00001-of-00002.tfrecord.idx"] = files["index/train-00000-of-00002.tfrecord.idx"]
    report = verify_in_memory(twice, shards.manifest, "out")
    assert {p.kind for p in report.problems} >= {"duplicate_key", "sha256_mismatch", "size_mismatch"}
    assert sum(p.kind == "duplicate_key" for p in report.problems) == 4


def test_wrong_labels_in_a_shard_are_a_label_mismatch(tmp_path) -> None:
    shards = write_shard_set(str(tmp_path), per_shard=3)
    # The manifest with the first shard's label counts swapped around.
    train = shards.manifest.splits["train"]
    first = dataclasses.replace(train.shards[0], label_counts={"0": 3})
    manifest = dataclasses.replace(shards.manifest, splits={
        **shards.manifest.splits, "train": SplitEntry("train", [first, *train.shards[1:]])})
    report = verify_in_memory(_files(str(tmp_path)), manifest, "out")
    assert [(p.file, p.kind) for p in report.problems] == [
        ("out/train-00000-of-00002.tfrecord", "label_mismatch")]


def test_stale_index_is_reported_and_reading_still_works(tmp_path) -> None:
    shards = write_shard_set(str(tmp_path), per_shard=3)
    files = _files(str(tmp_path))
    files["index/train-00000-of-00002.tfrecord.idx"] = b"0 100\n"
    report = verify_in_memory(files, shards.manifest, "out")
    assert [(p.file, p.offset, p.kind) for p in report.problems] == [
        ("out/index/train-00000-of-00002.tfrecord.idx", 100, "size_mismatch")]
    assert report.records == 9



def test_check_record_against_a_manifest_feature_spec() -> None:
    spec = {"id": "int64", "text": "bytes"}
    good = encode_example({"id": 3, "text": "x", "extra": 1.5})
    assert check_record("f", 0, good, schema=spec)[0].problems == ()
    wrong_kind = encode_example({"id": "3", "text": "x"})
    missing = encode_example({"id": 3})
    for data, words in ((wrong_kind, "feature id is bytes, expected int64"), (missing, "missing feature text")):
        problems = check_record("f", 8, data, schema=spec)[0].problems
        assert [(p.kind, p.offset) for p in problems] == [("schema", 8)] and words in problems[0].detail
    # a spec holding the image schema gets the image checks (values, not only kinds)
    image_spec = {**IMAGE_FEATURES, "extra": "float"}
    problems = check_record("f", 0, _record(), schema=image_spec)[0].problems
    assert [p.detail for p in problems] == ["missing feature extra"]


def test_summary_counts_damaged_files_of_all_and_what_was_not_read() -> None:
    """G3: one damaged file of two is "in 1 of 2 files"; records not read are said."""
    problems = [Problem("s/a.tfrecord.gz", 40, "crc_mismatch", "bad"),
                Problem("s/a.tfrecord.gz", None, "sha256_mismatch", "differs")]
    lines = build_report(2, 7, 1 << 20, problems).summary("s", listed_records=10).splitlines()
    assert lines[0] == "FAILED: s: 2 problems in 1 of 2 files, 7 records, 1.0 MiB"
    assert "  not read: 3 of the 10 records manifest.json lists (damaged, or after a damage point)" in lines
    assert ("  s/a.tfrecord.gz: the records after the damage at byte 40 were not read (a gzip stream "
            "cannot be read past it)") in lines
    plain = build_report(2, 9, 1 << 20, [Problem("s/a.tfrecord", 40, "crc_mismatch", "bad")])
    assert not any("were not read" in line for line in plain.summary("s").splitlines())


def test_keys_file_problems_name_the_keys_file():
    from transforms.shardset.manifest import ShardEntry
    from transforms.tfrecord.file_hash import FileHash
    from transforms.verify.checks import keys_file_problems

    keys = ["ab" * 32, "cd" * 32]
    data = b"".join(bytes.fromhex(k) for k in keys)
    digest = FileHash()
    digest.update(data)
    entry = ShardEntry("s.tfrecord", 2, 10, None, {}, "AAAAAA==", None, digest.crc32c)
    assert keys_file_problems("o/s.tfrecord", entry, ("o/index/s.tfrecord.keys", data), keys) == []
    assert keys_file_problems("o/s.tfrecord", entry, ("o/index/s.tfrecord.keys", data), None) == []
    assert keys_file_problems("o/s.tfrecord", ShardEntry("s.tfrecord", 2, 10, None, {}, "AAAAAA=="),
                              ("o/index/s.tfrecord.keys", None), keys) == []  # the list states none
    [missing] = keys_file_problems("o/s.tfrecord", entry, ("o/index/s.tfrecord.keys", None), keys)
    assert (missing.file, missing.kind) == ("o/index/s.tfrecord.keys", "missing_file")
    [changed] = keys_file_problems("o/s.tfrecord", entry, ("o/index/s.tfrecord.keys", data[::-1]), keys)
    assert (changed.file, changed.kind) == ("o/index/s.tfrecord.keys", "crc32c_mismatch")
    [wrong] = keys_file_problems("o/s.tfrecord", entry, ("o/index/s.tfrecord.keys", data), keys[::-1])
    assert (wrong.file, wrong.kind) == ("o/index/s.tfrecord.keys", "keys_mismatch")
    assert "key 0 is" in wrong.detail
