"""What the reshard job gathers from every record in one combine: count, class names, feature spec."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import encode_example
from transforms.reshard_steps import CollectRecordFacts
from transforms.shardset.dead_letters import DeadLetter
from transforms.shardset.record_items import (RecordFacts, RecordTally, feature_spec, label_pairs,
                                              labels_from_pairs, record_item)


def _example(label=None, text=None, **features) -> bytes:
    if label is not None:
        features["image/class/label"] = label
    if text is not None:
        features["image/class/text"] = text
    return encode_example(features)


# name -> records; every case is also checked against the per-record helpers it replaces.
_CASES = {
    "none": [],
    "one": [_example(0, "cat", x=1)],
    "consistent": [_example(i % 3, ["cat", "dog", "emu"][i % 3], x=i) for i in range(9)],
    "gap in the indices": [_example(0, "cat"), _example(2, "emu")],
    "one index, two names": [_example(0, "cat"), _example(0, "dog"), _example(1, "emu")],
    "multi-label": [_example([0, 1], [b"cat", b"dog"]), _example(2, "emu")],
    "label without text": [_example(0), _example(1, "dog")],
    "not an example": [b"plain bytes", _example(0, "cat", x=1)],
    "features vary": [_example(x=1, v=[1.0]), _example(x=2, v=[1.0, 2.0]), _example(x=3, s=b"t")],
}


def _tally(datas: list[bytes]) -> RecordTally:
    tally = RecordTally()
    for data in datas:
        tally.add(record_item(data, 0))
    return tally


def _expected(datas: list[bytes]) -> RecordFacts:
    items = [record_item(data, 0) for data in datas]
    pairs = {pair for item in items for pair in label_pairs(item)}
    seen = Counter(pair for item in items for pair in item.features)
    return RecordFacts(len(items), 0, tuple(labels_from_pairs(pairs)), feature_spec(len(items), seen))


@pytest.mark.parametrize("name", list(_CASES))
def test_a_tally_gives_what_the_separate_helpers_give(name: str) -> None:
    assert _tally(_CASES[name]).facts() == _expected(_CASES[name])


@pytest.mark.parametrize("name", list(_CASES))
def test_merged_tallies_give_the_same_facts_in_any_order(name: str) -> None:
    datas = _CASES[name]
    for cut in range(len(datas) + 1):
        parts = [_tally(datas[:cut]), _tally(datas[cut:]), RecordTally()]
        for order in itertools.permutations(parts):
            merged = RecordTally()
            for part in order:
                merged.merge(_tally([]).merge(part))  # a copy: merging changes the tally
            assert merged.facts() == _expected(datas), (cut, order)


def test_facts_of_records_and_dead_letters() -> None:
    facts = _tally(_CASES["consistent"]).facts()
    assert (facts.records, facts.inputs, facts.class_names) == (9, 9, ("cat", "dog", "emu"))
    assert facts.feature_spec == {"image/class/label": "int64", "image/class/text": "bytes", "x": "int64"}
    assert dataclasses.replace(facts, dead_letters=2).inputs == 11
    assert RecordFacts().inputs == 0 and RecordFacts().feature_spec == {}


def _items(datas: list[bytes]) -> list:
    return [record_item(data, 0) for data in datas]


def test_collect_record_facts_gives_one_element() -> None:
    datas = _CASES["consistent"]
    with TestPipeline() as p:
        facts = p | beam.Create(_items(datas)) | CollectRecordFacts()
        assert_that(facts, equal_to([_expected(datas)]))


def test_collect_record_facts_of_nothing_gives_nothing() -> None:
    with TestPipeline() as p:
        facts = p | beam.Create([]) | CollectRecordFacts()
        assert_that(facts, equal_to([]))


@pytest.mark.parametrize("name", ["none", "consistent"])
def test_collect_record_facts_counts_dead_letters_even_without_records(name: str) -> None:
    datas = _CASES[name]
    dead = [DeadLetter("a.tfrecord", "crc_mismatch", "at byte 0"), DeadLetter("b.tfrecord", "truncated", "x")]
    with TestPipeline() as p:
        facts = (p | "Items" >> beam.Create(_items(datas))
                 | CollectRecordFacts(p | "Dead" >> beam.Create(dead)))
        assert_that(facts, equal_to([dataclasses.replace(_expected(datas), dead_letters=2)]))
