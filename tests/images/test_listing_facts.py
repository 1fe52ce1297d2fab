"""The listing's facts: class names from every input kind, and the class list an append keeps."""

from __future__ import annotations

import tracemalloc

import pytest

from transforms.archives.members import PARQUET, WEBDATASET, MemberRef
from transforms.errors import UsageError
from transforms.images.inputs import LabelRules
from tests.helpers import manifest_entries
from transforms.images.items import SourceImage
from transforms.images.listing_facts import ListingTally, appended_classes


def _tally(entries) -> ListingTally:
    tally = ListingTally()
    for entry in entries:
        tally.add(entry)
    return tally


def _member(label: str, kind: str = WEBDATASET) -> SourceImage:
    ref = MemberRef("s.tar", kind, 0, 1, 1)
    return SourceImage(path=f"s.tar!{label}", relpath=label, split="train", label=label, member=ref)


def test_integer_labels_of_a_csv_manifest_are_indices_not_names_sorted_as_text() -> None:
    text = "path,label\n" + "".join(f"{n}.jpg,{n}\n" for n in (9, 11, 2, 0))
    facts = _tally(manifest_entries(text, "m.csv", LabelRules())).facts()
    assert facts.classes == tuple(str(i) for i in range(12))  # not 0 1 10 11 2 ...
    assert facts.classes.index("9") == 9


def test_integer_labels_of_a_jsonl_manifest_are_indices_as_numbers_or_text() -> None:
    text = '{"path": "a.jpg", "label": 9}\n{"path": "b.jpg", "label": "11"}\n{"path": "c.jpg", "label": " 2 "}\n'
    entries = list(manifest_entries(text, "m.jsonl", LabelRules()))
    assert [e.label for e in entries] == ["9", "11", "2"]
    assert _tally(entries).facts().classes == tuple(str(i) for i in range(12))


def test_manifest_and_container_integers_mean_the_same_index() -> None:
    csv = list(manifest_entries("path,label\na.jpg,9\n", "m.csv", LabelRules()))
    facts = _tally([*csv, _member("11", PARQUET), _member("2")]).facts()
    assert facts.classes == tuple(str(i) for i in range(12))


@pytest.mark.parametrize("labels", [("2", "11", "cat"), ("n01440764", "n01443537", "0", "4")])
def test_a_mix_of_integer_and_text_labels_is_refused(labels) -> None:
    text = "path,label\n" + "".join(f"{i}.jpg,{label}\n" for i, label in enumerate(labels))
    with pytest.raises(UsageError, match="labels mix class indices and class names"):
        _tally(manifest_entries(text, "m.csv", LabelRules())).facts()
    with pytest.raises(UsageError, match="labels mix"):
        _tally(_member(label) if label.isdigit() else _member(label).__class__(
            path=label, relpath=label, split="train", label=label) for label in labels).facts()


def test_a_mix_is_fine_with_class_names_given() -> None:
    rules = LabelRules(class_names=("cat", "dog", "owl"))
    entries = list(manifest_entries("path,label\na.jpg,2\nb.jpg,cat\n", "m.csv", rules))
    assert [e.label for e in entries] == ["owl", "cat"]
    assert _tally(entries).facts(fixed=["cat", "dog", "owl"]).inputs == 2


def test_a_huge_index_is_refused_and_memory_does_not_follow_it() -> None:
    tally = _tally([_member("50000000"), _member("1")])
    tracemalloc.start()
    try:
        with pytest.raises(UsageError, match="class index 50000000 is far above the 2 inputs"):
            tally.facts()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    merged = ListingTally.merged([_tally([_member("2000000")]), _tally([_member("3")])])
    with pytest.raises(UsageError, match="far above"):
        merged.facts()


def test_an_index_within_the_bound_keeps_its_place() -> None:
    assert len(_tally([_member("999")]).facts().classes) == 1000
    assert len(_tally([_member("3")] * 200).facts().classes) == 4


def test_appended_integer_classes_extend_a_numbered_set_in_numeric_order() -> None:
    published = [str(i) for i in range(6)]
    assert appended_classes(published, ["0", "7", "10"]) == [str(i) for i in range(11)]
    assert appended_classes(published, ["3"]) == published
    assert appended_classes(["cat", "dog"], ["owl", "ant"]) == ["cat", "dog", "ant", "owl"]


def test_names_appended_to_a_numbered_set_are_refused() -> None:
    with pytest.raises(UsageError, match="--append: the set's classes are indices"):
        appended_classes(["0", "1"], ["cat"])


def test_an_append_naming_a_published_class_with_other_white_space_around_it_is_refused() -> None:
    with pytest.raises(UsageError, match="'cat' and 'cat ' differ only in the white space around them"):
        appended_classes(["cat", "dog"], ["cat ", "emu"])
    assert appended_classes(["cat", "dog"], ["cat", "emu"]) == ["cat", "dog", "emu"]
