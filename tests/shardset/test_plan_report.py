"""Unit tests of the plan's pure parts: header surveys, record sizes, tallies, shard counts, folder changes."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests import imagegen
from transforms.errors import ImageError
from transforms.images.image_codec import ImageInfo
from transforms.images.records import EncodeSettings, encode_image, image_example_parts
from tests.helpers import image_example
from transforms.images.survey import PNG_BYTES_PER_RAW_BYTE, stored_size, survey_image
from transforms.shardset.manifest import Manifest, SplitCounts, SplitEntry
from transforms.shardset.ownership import PublishPolicy
from transforms.shardset.plan_report import (DEFAULT_RATE, START_UP_SECONDS, BuildRate, PlanTally, folder_change,
                                             folder_problems, make_plan)
from transforms.shardset.planning import MIB, choose_num_shards

# --- Record sizes ---------------------------------------------------------------------------


@pytest.mark.parametrize("image_len", [0, 1, 100, 127, 128, 16_383, 16_384, 70_000, 2_100_000])
@pytest.mark.parametrize("extra", [(), (("image/class/label", "int64", (1, 2)),
                                        ("caption", "bytes", (b"x" * 200,)))])
def test_example_size_is_the_length_of_the_example(image_len, extra):
    """The size a plan computes from the image's length is the built Example's length exactly."""
    info = ImageInfo("jpeg", 480, 640, 3)
    image = b"\xab" * image_len
    whole = image_example(image, info, 3, "rose", "rose/a.jpg", "ab" * 32, extra)
    head, tail = image_example_parts(image_len, info, 3, "rose", "rose/a.jpg", "ab" * 32, extra)
    assert len(head) + image_len + len(tail) == len(whole)


# --- Surveys of one image -------------------------------------------------------------------


def test_tf_mode_keeps_jpeg_and_png_bytes_so_the_size_is_exact():
    for data in (imagegen.jpeg(size=(40, 30)), imagegen.png(size=(40, 30))):
        surveyed = survey_image(data, EncodeSettings())
        stored, info = encode_image(data, EncodeSettings())
        assert surveyed.exact and surveyed.stored_bytes == len(stored) == len(data)
        assert surveyed.info == info


def test_tf_mode_converts_other_formats_and_estimates_their_png():
    data = imagegen.bmp(size=(20, 10))
    surveyed = survey_image(data, EncodeSettings())
    _, info = encode_image(data, EncodeSettings())
    assert not surveyed.exact
    assert (surveyed.info.format, surveyed.info.source_format) == ("png", "bmp") == (info.format, info.source_format)
    assert surveyed.stored_bytes == int(20 * 10 * 3 * PNG_BYTES_PER_RAW_BYTE)


def test_passthrough_stores_the_source_as_it_is():
    data = imagegen.gif_animated()
    surveyed = survey_image(data, EncodeSettings(mode="passthrough"))
    assert surveyed.exact and surveyed.stored_bytes == len(data)
    assert surveyed.info == encode_image(data, EncodeSettings(mode="passthrough"))[1]


@pytest.mark.parametrize("settings", [
    EncodeSettings(mode="raw"),
    EncodeSettings(mode="raw", grayscale=True, resize=(16, 16)),
    EncodeSettings(mode="raw", resize=(20, 20), resize_mode="fit"),
    EncodeSettings(mode="raw", resize=(9, 20), resize_mode="fit"),
], ids=["as_is", "gray_stretch", "fit_wide", "fit_tall"])
@pytest.mark.parametrize("orientation", [None, 6], ids=["no_exif", "rotated"])
def test_raw_sizes_follow_resize_and_orientation_exactly(settings, orientation):
    data = imagegen.jpeg(size=(40, 30), exif_orientation=orientation)
    surveyed = survey_image(data, settings)
    stored, info = encode_image(data, settings)
    assert surveyed.exact and surveyed.stored_bytes == len(stored)
    assert surveyed.info == info


def test_reencode_is_an_estimate_at_the_stored_size():
    data = imagegen.jpeg(size=(40, 30))
    surveyed = survey_image(data, EncodeSettings(mode="reencode", resize=(20, 15)))
    _, info = encode_image(data, EncodeSettings(mode="reencode", resize=(20, 15)))
    assert not surveyed.exact and surveyed.info == info
    assert surveyed.stored_bytes == int(len(data) / 4)


@pytest.mark.parametrize("data, reason", [
    (b"", "empty_file"),
    (b"just some text\n", "not_an_image"),
    (imagegen.png_declaring(100_000, 100_000), "decompression_bomb"),
], ids=["empty", "text", "bomb"])
def test_header_problems_are_the_builds_reasons(data, reason):
    with pytest.raises(ImageError) as err:
        survey_image(data, EncodeSettings())
    assert err.value.reason == reason


def test_a_truncated_jpeg_passes_the_header_check():
    """What a plan cannot see: the header is whole, the scan is cut (a build's structure check sees it)."""
    data = imagegen.jpeg(size=(64, 48))
    survey_image(data[: len(data) // 2], EncodeSettings())
    with pytest.raises(ImageError):
        encode_image(data[: len(data) // 2], EncodeSettings())


@pytest.mark.parametrize("size, box, mode, out", [
    ((40, 30), None, "fit", (40, 30)),
    ((40, 30), (20, 20), "stretch", (20, 20)),
    ((40, 30), (20, 20), "crop", (20, 20)),
    ((40, 30), (20, 20), "fit", (20, 15)),
    ((30, 40), (20, 20), "fit", (15, 20)),
    ((40, 40), (20, 10), "fit", (10, 10)),
])
def test_stored_size(size, box, mode, out):
    assert stored_size(*size, box, mode) == out


# --- Tallies --------------------------------------------------------------------------------


def _facts() -> list[tuple]:
    return [("found", "train", "rose"), ("found", "train", "rose"), ("found", "", "tulip"),
            ("read", 100, True), ("read", 200, False), ("read", 50, True),
            ("rejected", "truncated", "b.jpg", "cut"), ("rejected", "truncated", "a.jpg", "cut"),
            ("rejected", "duplicate_image", "c.jpg", "same"),
            ("record", "train", "rose", "jpeg", False, 140), ("record", "validation", "tulip", "bmp", True, 90),
            ("listing", 4, ["rose", "tulip"], {"image/encoded": "bytes"})]


def test_a_tally_is_the_same_however_its_facts_are_split_and_merged():
    whole = PlanTally()
    for fact in _facts():
        whole.add(fact)
    parts = [PlanTally(), PlanTally(), PlanTally()]
    for i, fact in enumerate(reversed(_facts())):
        parts[i % 3].add(fact)
    merged = PlanTally().merge(parts)
    assert merged.to_dict() == whole.to_dict()
    assert PlanTally.loads(whole.dumps()).to_dict() == whole.to_dict()
    assert whole.rejected["truncated"] == [2, [("a.jpg", "cut"), ("b.jpg", "cut")]]
    assert (whole.bytes_read, whole.files_read, whole.estimated_sizes) == (350, 3, 1)
    assert whole.converted == {"bmp": 1} and whole.formats == {"bmp": 1, "jpeg": 1}


def test_an_unknown_fact_is_refused():
    with pytest.raises(ValueError, match="unknown plan fact"):
        PlanTally().add(("guess", 1))


# --- Plans ----------------------------------------------------------------------------------


def _tally(split_bytes: dict[str, tuple[int, int]]) -> PlanTally:
    """A tally with ``records`` records of ``size`` bytes per split."""
    tally = PlanTally()
    for split, (records, size) in split_bytes.items():
        for _ in range(records):
            tally.add(("found", split, "a")).add(("read", size, True))
            tally.add(("record", split, "a", "jpeg", False, size))
    tally.add(("listing", sum(r for r, _ in split_bytes.values()), ["a"], {}))
    return tally


@pytest.mark.parametrize("records, size, target_mb, num_shards", [
    (1000, 100_000, 10, None), (1000, 100_000, 150, None), (3, 10_000_000, 1, None),
    (10, 1000, 150, None), (50, 1000, 1, 7),
])
def test_shards_per_split_follow_the_builds_rule(records, size, target_mb, num_shards):
    plan = make_plan(_tally({"train": (records, size)}), inputs=["in"], output_dir="out",
                     target_bytes=int(target_mb * MIB), num_shards=num_shards, change=None,
                     output_exists=False, rate=DEFAULT_RATE, max_bad_fraction=0.01)
    expected = num_shards or min(choose_num_shards(records * size, int(target_mb * MIB)), records)
    assert plan.splits["train"].num_shards == expected
    assert plan.splits["train"].record_bytes == records * size


@pytest.mark.parametrize("published, written, kept, new, replaced, keeps, dropped", [
    ({}, ["train"], [], ["train"], [], [], []),
    ({"train": 10}, ["train"], [], [], ["train"], [], []),
    ({"train": 10, "test": 3}, ["validation"], ["train", "test"], ["validation"], [], ["test", "train"], []),
    ({"train": 10, "test": 3}, ["train"], [], [], ["train"], [], ["test"]),  # --drop_other_splits
])
def test_folder_change(published, written, kept, new, replaced, keeps, dropped):
    change = folder_change(published, written, kept)
    assert (list(change.new), list(change.replaced), list(change.kept), list(change.dropped)) == (
        new, replaced, keeps, dropped)


def _manifest(splits: dict[str, int], labels=("a",), compression="none") -> Manifest:
    return Manifest(created_by="build_shards", options={}, seed=0, compression=compression,
                    feature_spec={"image/encoded": "bytes"}, labels=list(labels),
                    splits={name: SplitEntry(name, (), SplitCounts(records, records * 10, 0))
                            for name, records in splits.items()})


def test_folder_problems_name_what_would_stop_the_build():
    manifest = _manifest({"train": 5}, compression="gzip")
    policy = PublishPolicy("0" * 32)
    problems = folder_problems("out", {"stray-00000-of-00001.tfrecord": 10}, manifest, None, set(), policy,
                               ["validation"], "none", {"image/encoded": "bytes"}, ["a"], ["in"])
    assert len(problems) == 2
    assert "stray-00000-of-00001.tfrecord" in problems[0] and "--overwrite_unlisted_shards" in problems[0]
    assert "gzip-compressed" in problems[1]
    dropping = PublishPolicy("0" * 32, overwrite_unlisted=True, drop_other_splits=True)
    assert folder_problems("out", {"stray-00000-of-00001.tfrecord": 10}, manifest, None, set(), dropping,
                           ["validation"], "none", {}, ["a"], ["in"]) == []


def test_folder_problems_of_a_split_other_inputs_built():
    manifest = dataclasses.replace(_manifest({"train": 5}), built_from={"train": ["day1"]})
    args = ("out", {}, manifest, None, set())
    rest = (["train"], "none", {"image/encoded": "bytes"}, ["a"])
    (problem,) = folder_problems(*args, PublishPolicy("0" * 32), *rest, ["day2"])
    assert "split 'train' (5 records) built from --input day1" in problem and "--replace" in problem
    assert folder_problems(*args, PublishPolicy("0" * 32, replace=True), *rest, ["day2"]) == []
    assert folder_problems(*args, PublishPolicy("0" * 32), *rest, ["day1/"]) == []


def test_folder_problems_of_classes_that_disagree():
    manifest = _manifest({"train": 0}, labels=("a", "b"))
    problems = folder_problems("out", {}, manifest, None, set(), PublishPolicy("0" * 32), ["test"], "none",
                               {"image/encoded": "bytes"}, ["b", "a"], ["in"])
    assert len(problems) == 1 and "give some index two meanings" in problems[0]


def test_text_and_json_say_the_same_and_call_it_an_estimate():
    tally = PlanTally()
    for fact in _facts():
        tally.add(fact)
    change = folder_change({"train": 7, "test": 2}, ["train", "validation"], ["test"])
    plan = make_plan(tally, inputs=["in"], output_dir="out", target_bytes=MIB, num_shards=None, change=change,
                     output_exists=True, rate=BuildRate.of_mib_per_second(10), max_bad_fraction=0.5)
    text = plan.text()
    assert "an estimate" in text and "nothing was written" in text
    assert "rejected: 2 (an estimate from header checks only; the build's --validate structure" in text
    assert "truncated 2: a.jpg, b.jpg" in text
    assert "duplicates (same bytes, or the same path in a split): 1 (duplicate_image 1)" in text
    assert "gains: validation (~1)" in text and "replaces: train (7 -> ~1 records)" in text
    assert "keeps: test (2 records)" in text
    obj = json.loads(plan.to_json())
    assert obj["estimate"] is True and obj["input_bytes"] == 350
    assert obj["splits"]["train"] == {"records": 1, "classes": {"rose": 1}, "record_bytes": 140,
                                      "largest_record": 140, "num_shards": 1, "shard_bytes": 140}
    assert obj["output_folder"]["new"] == ["validation"] and obj["output_folder"]["kept"] == ["test"]
    assert obj["found"]["splits"] == {"(by content)": {"tulip": 1}, "train": {"rose": 2}}
    assert obj["build_seconds"] == round(START_UP_SECONDS + 350 / (10 * MIB), 1)  # --rate_mb_s: the bytes' part


def test_rate_estimate():
    assert BuildRate.of_mib_per_second(100).seconds(1000 * MIB) == pytest.approx(START_UP_SECONDS + 10.0)
    assert DEFAULT_RATE.seconds(1024 * MIB) == pytest.approx(DEFAULT_RATE.fixed_seconds + DEFAULT_RATE.seconds_per_gib)
    assert DEFAULT_RATE.seconds(0, inputs=1000) == pytest.approx(DEFAULT_RATE.fixed_seconds
                                                                  + 1000 * DEFAULT_RATE.seconds_per_input)
    with pytest.raises(ValueError):
        BuildRate(0, 1, "x")


# A build of 4 small images, its whole process on the 2-core machine: 3.7-4.2 CPU s, about its wall time on an
# idle machine (BENCHMARKS.md, "A small build's start-up"). The plan once said ~2 s for builds like it.
SMALL_BUILD_SECONDS = 3.7


@pytest.mark.parametrize("rate", [DEFAULT_RATE, BuildRate.of_mib_per_second(1000)])
def test_a_small_builds_estimate_is_at_least_its_start_up(rate):
    tally = _tally({"train": (4, 50_000)})
    tally.bytes_read, tally.inputs = 200_000, 4
    plan = make_plan(tally, inputs=["in"], output_dir="out", target_bytes=MIB, num_shards=None, change=None,
                     output_exists=False, rate=rate, max_bad_fraction=0.01)
    assert plan.build_seconds >= SMALL_BUILD_SECONDS
    assert f"{START_UP_SECONDS:g} s start-up" in plan.text()


def test_the_estimate_counts_each_input():
    few, many = _tally({"train": (10, 1000)}), _tally({"train": (10_000, 1)})
    few.bytes_read = many.bytes_read = 10_000
    few.inputs, many.inputs = 10, 10_000
    plans = [make_plan(t, inputs=["in"], output_dir="out", target_bytes=MIB, num_shards=None, change=None,
                       output_exists=False, rate=DEFAULT_RATE, max_bad_fraction=0.01) for t in (few, many)]
    assert plans[1].build_seconds - plans[0].build_seconds == pytest.approx(9990 * DEFAULT_RATE.seconds_per_input)
    assert DEFAULT_RATE.seconds_per_input > 0
