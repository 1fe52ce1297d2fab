"""What a build adds to the sink's manifest: object classes, image counts, near-duplicates and their file."""

from __future__ import annotations

import json

from transforms.images.annotations import RecordLayout
from transforms.images.build_manifest import build_manifest_extras, image_count_fields
from transforms.images.near_duplicates import NEAR_DUPLICATES_NAME, HashedImage, NearPair


def _pair() -> NearPair:
    return NearPair(HashedImage("aa", 1, "test", "test/a.jpg", "/in/test/a.jpg"),
                    HashedImage("bb", 3, "train", "train/b.jpg", "/in/train/b.jpg"), 1)


def test_without_the_check_the_set_has_no_near_duplicates_file_and_no_summary() -> None:
    extras = build_manifest_extras(RecordLayout(object_labels=((1, "cat"), (3, "dog"))), "off", 6)
    assert extras.fields == {"object_labels": ((1, "cat"), (3, "dog"))}
    assert extras.files == {NEAR_DUPLICATES_NAME: None}  # an earlier run's file is removed


def test_a_report_that_found_and_missed_nothing_publishes_as_off() -> None:
    assert build_manifest_extras(RecordLayout(), "report", 6) == build_manifest_extras(RecordLayout(), "off", 6)


def test_a_report_with_pairs_has_their_summary_and_one_line_each() -> None:
    extras = build_manifest_extras(RecordLayout(), "report", 6, [_pair()], over_cap=[(12, 10)], unhashed=["x"])
    near = extras.fields["near_duplicates"]
    assert (near["mode"], near["distance"], near["pairs"], near["file"]) == ("report", 6, 1, NEAR_DUPLICATES_NAME)
    assert (near["buckets_over_cap"], near["images_not_compared_in_a_bucket"], near["images_not_hashed"]) == (1, 2, 1)
    (line,) = extras.files[NEAR_DUPLICATES_NAME].decode().splitlines()
    assert json.loads(line)["rejected"] is False and json.loads(line)["later"]["split"] == "train"


def test_reject_always_has_its_summary_and_file_even_without_pairs() -> None:
    extras = build_manifest_extras(RecordLayout(), "reject", 4)
    assert extras.fields["near_duplicates"]["pairs"] == 0
    assert extras.files == {NEAR_DUPLICATES_NAME: b""}


def test_the_image_counts_come_from_the_shards_summed_tallies() -> None:
    tallies = [(("stored_formats", "jpeg"), 3), (("channels", "3"), 3), (("boxes", "skipped"), 1)]
    fields = build_manifest_extras(RecordLayout(), "off").manifest_fields(tallies)
    assert fields["images"] == image_count_fields(tallies)["images"]
    assert fields["images"]["stored_formats"] == {"jpeg": 3} and fields["images"]["boxes"] == {"skipped": 1}
