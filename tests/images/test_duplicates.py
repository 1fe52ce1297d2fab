"""Unit tests of the build's pure choices: duplicate inputs (images/duplicates.py), what the
listing says (images/listing_facts.py), and the refusals from a run's counts (shardset/dead_letters.py)."""

from __future__ import annotations

import pytest

from transforms.images.annotations import RecordLayout
from transforms.images.image_codec import ImageInfo
from transforms.images.duplicates import (NAMED_DUPLICATES, PublishedCopy, content_bucket, path_bucket,
                                          same_path_choice, same_path_choices)
from tests.helpers import copy_choice
from transforms.images.items import SPLIT_BY_CONTENT, ImageMeta, SourceImage
from transforms.images.listing_facts import ListingFacts, ListingTally
from transforms.images.annotations import ObjectClasses
from transforms.images.objects import SourceBox
from transforms.shardset.dead_letters import DeadLetter, RejectionSummary, rejection_problem

_INFO = ImageInfo("png", 2, 2, 3)


def _meta(path: str, split: str, relpath: str | None = None, sha: str = "ab" * 32) -> ImageMeta:
    source = SourceImage(path, relpath or path.rsplit("/", 1)[-1], split, "cat")
    return ImageMeta(source, 0, sha, _INFO, 100, 1)


def test_one_input_for_a_path_is_kept() -> None:
    source = SourceImage("in/cat/a.png", "cat/a.png", "train", "cat")
    assert same_path_choice([source]) == (source, [])


def test_inputs_sharing_a_path_are_all_rejected_naming_a_few_others() -> None:
    sources = [SourceImage(f"in{i}/cat/a.png", "cat/a.png", SPLIT_BY_CONTENT, "cat", f"list.csv:{i + 2}")
               for i in reversed(range(6))]
    kept, dead = same_path_choice(sources)
    assert kept is None and [d.reason for d in dead] == ["duplicate_path"] * 6
    assert [d.path for d in dead] == [f"in{i}/cat/a.png" for i in range(6)]  # by path, then row
    first = dead[0].error
    assert first.startswith("relative path 'cat/a.png' in split chosen by content (row list.csv:2) also "
                            "comes from 5 other inputs: list.csv:3, list.csv:4, list.csv:5 and 2 more")
    assert all(d.error.count("list.csv:") == 1 + NAMED_DUPLICATES for d in dead)


def test_a_group_of_many_paths_keeps_the_lone_ones_and_rejects_each_shared_one() -> None:
    lone = [SourceImage(f"in/cat/{i}.png", f"cat/{i}.png", "train", "cat") for i in range(4)]
    shared = [SourceImage(f"in{i}/cat/x.png", "cat/x.png", "train", "cat", f"l.csv:{i}") for i in range(3)]
    twice = [SourceImage(f"in{i}/dog/y.png", "dog/y.png", "train", "dog") for i in range(2)]
    choices = list(same_path_choices([shared[2], lone[0], twice[1], lone[1], shared[0], lone[2], twice[0],
                                      shared[1], lone[3]]))
    assert [kept for kept, dead in choices if kept is not None] == [lone[0], lone[1], lone[2], lone[3]]
    judged = [(kept, dead) for kept, dead in choices if kept is None]
    assert judged == [same_path_choice(shared), same_path_choice(twice)]  # by relative path
    assert [len(dead) for _, dead in judged] == [3, 2]


def test_a_path_bucket_is_stable_and_spread() -> None:
    assert path_bucket("cat/0.png") == path_bucket("cat/0.png") == int.from_bytes(
        __import__("hashlib").blake2b(b"cat/0.png", digest_size=8).digest(), "big") >> 52
    buckets = [path_bucket(f"cat/{i}.png", bits=4) for i in range(1_600)]
    assert set(buckets) == set(range(16)) and max(buckets.count(b) for b in range(16)) < 2 * 100
    assert 0 <= path_bucket("caf\udce9.png") < 4096  # a name that is not valid UTF-8


@pytest.mark.parametrize("copies, written, kept, reasons", [
    # (path, split) of each copy; the splits the run writes; the path kept; reason per rejected copy
    ([("b.png", "train"), ("a.png", "train")], None, "a.png", ["duplicate_image"]),
    ([("a.png", "train"), ("z.png", "test")], None, "z.png", ["cross_split_duplicate"]),
    ([("a.png", "train"), ("v.png", "validation"), ("t.png", "test")], None, "t.png",
     ["cross_split_duplicate", "cross_split_duplicate"]),
    ([("a.png", "train")], None, "a.png", []),
])
def test_the_copy_kept_is_in_the_first_split_then_the_smallest_path(copies, written, kept, reasons) -> None:
    chosen, dead = copy_choice([_meta(path, split) for path, split in copies], written)
    assert chosen.source.path == kept
    assert [d.reason for d in dead] == reasons


def test_a_copy_published_in_a_kept_split_wins_over_every_copy_of_the_run() -> None:
    values = [_meta("a.png", "train"), PublishedCopy("test"), _meta("b.png", "train")]
    kept, dead = copy_choice(values, written=["train"])
    assert kept is None and sorted(d.path for d in dead) == ["a.png", "b.png"]
    assert all(d.reason == "cross_split_duplicate" and "already published in split 'test'" in d.error
               for d in dead)
    # A published split the run writes again is replaced: the run's copies compete as usual.
    kept, dead = copy_choice(values, written=["train", "test"])
    assert kept.source.path == "a.png" and [d.reason for d in dead] == ["duplicate_image"]
    assert copy_choice([PublishedCopy("test")], written=[]) == (None, [])


def test_the_listing_tally_counts_inputs_classes_layout_and_splits() -> None:
    listed = [SourceImage("a", "a", "train", "cat"), DeadLetter("x", "unreadable", "gone"), "dog",
              SourceImage("b", "b", "", "", labels=("bird", "cat"))]
    halves = [ListingTally(), ListingTally()]
    for i, item in enumerate(listed):
        halves[i % 2].add(item)
    facts = ListingTally.merged(halves).facts()
    assert facts == ListingFacts(3, ("bird", "cat", "dog"), RecordLayout(multi_label=True, label_offset=1),
                                 ("", "train"))  # "": a split its bytes choose
    assert ListingTally().facts(multi_label=True, label_offset=0) == ListingFacts(
        0, (), RecordLayout(multi_label=True, label_offset=0))


def test_object_classes_are_tallied_apart_from_image_classes() -> None:
    box = SourceBox(0, 0, 1, 1, "person")
    listed = [ObjectClasses("ann.json", ((1, "person"), (4, "motorcycle"))),
              SourceImage("a", "a", "train", "", labels=(), objects=(box,)),
              SourceImage("b", "b", "train", "", labels=("indoor",), objects=())]
    halves = [ListingTally(), ListingTally()]
    for i, item in enumerate(listed):
        halves[i % 2].add(item)
    facts = ListingTally.merged(halves).facts(boxes_outside="clip")
    assert facts.inputs == 2 and facts.classes == ("indoor",)  # the categories are not an input
    assert facts.layout.object_labels == ((1, "person"), (4, "motorcycle"))
    assert facts.layout.boxes_outside == "clip"
    plain = ListingTally()
    plain.add(SourceImage("c", "c", "train", "zebra", objects=(SourceBox(0, 0, 1, 1, "ant"),)))
    assert plain.facts().classes == ("zebra",) and plain.facts().layout.object_labels == ((1, "ant"),)


_DEAD = [DeadLetter(f"in/{i}.png", "not_an_image", "text") for i in range(3)]


@pytest.mark.parametrize("inputs, written, dead, limit, starts", [
    (0, 0, [], None, "no input files or rows were found"),
    (3, 0, _DEAD, None, "no record could be written: all 3 inputs were rejected"),
    (10, 7, _DEAD, 0.2, "3 of 10 inputs (30.0%) were rejected, more than --max_bad_fraction 0.2"),
    (10, 6, _DEAD, None, "10 inputs but 6 records written and 3 dead letters"),
    (10, 7, _DEAD, 0.5, None),
])
def test_publishing_refuses_from_the_counts(inputs, written, dead, limit, starts) -> None:
    problem = rejection_problem(inputs, written, RejectionSummary.of(dead), "out/dead_letters.jsonl", limit)
    assert problem == starts if starts is None else problem.startswith(starts)


@pytest.mark.parametrize("sha256, bits, bucket", [
    ("ab" * 32, 0, 0), ("ab" * 32, 1, 1), ("ab" * 32, 8, 0xab), ("0f" + "00" * 31, 4, 0), ("0f" + "00" * 31, 8, 0x0f),
    ("ff" * 32, 16, 0xffff),
])
def test_a_content_bucket_is_the_top_bits_of_the_sha256(sha256, bits, bucket) -> None:
    assert content_bucket(sha256, bits) == bucket


def test_a_key_that_is_not_hex_still_has_one_bucket() -> None:
    # A published record's image/key/sha256 may be anything: it is hashed, the same each time.
    buckets = {content_bucket(key, 12) for key in ("not a sha256", "not a sha256")}
    assert len(buckets) == 1 and 0 <= buckets.pop() < 4096
    assert content_bucket("", 12) == content_bucket("", 12)
