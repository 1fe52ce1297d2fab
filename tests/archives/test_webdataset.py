"""A WebDataset sample's label: its ``cls`` or ``json`` member read as every input kind reads labels."""

from __future__ import annotations

import pytest

from transforms.archives.tar_index import TarMember
from transforms.archives.webdataset import Sample, sample_entry
from transforms.example.features import ManifestTyping
from transforms.images.inputs import LabelRules
from transforms.images.items import SourceImage
from transforms.shardset.dead_letters import DeadLetter


def _entry(label_ext: str, data: bytes, class_names=None):
    members = {"jpg": TarMember("k.jpg", 512, 10, True), label_ext: TarMember(f"k.{label_ext}", 1536, len(data), True)}
    return sample_entry("s.tar", Sample("k", members), lambda member: data, LabelRules(), ManifestTyping({}),
                        class_names)


@pytest.mark.parametrize("ext, data, label", [
    ("cls", b"7", "7"), ("cls", b" 7 \n", "7"), ("cls", b"007", "7"), ("cls", b"cat\n", "cat"),
    ("json", b'{"label": 7}', "7"), ("json", b'{"label": " 7 "}', "7"), ("json", b'{"label": "cat"}', "cat"),
])
def test_integers_are_indices_and_other_text_names(ext, data, label) -> None:
    entry = _entry(ext, data)
    assert isinstance(entry, SourceImage) and entry.label == label


def test_indices_take_the_names_given() -> None:
    assert _entry("cls", b"2", ("a", "b", "c")).label == "c"
    dead = _entry("json", b'{"label": "3"}', ("a", "b", "c"))
    assert isinstance(dead, DeadLetter) and dead.reason == "bad_label" and "outside the 3 class names" in dead.error


@pytest.mark.parametrize("data", [b"caf\xe9", b"\xff\xfe7\x00", b"7\x80"])
def test_a_cls_that_is_not_utf8_is_a_dead_letter_not_a_mojibake_class(data) -> None:
    entry = _entry("cls", data)
    assert isinstance(entry, DeadLetter)
    assert (entry.path, entry.reason) == ("s.tar!k.jpg", "bad_label")
    assert "cls member is not UTF-8 text" in entry.error and "\n" not in entry.error


def test_a_negative_index_is_a_bad_label() -> None:
    entry = _entry("cls", b"-2")
    assert isinstance(entry, DeadLetter) and entry.error == "sample's cls member: class index -2 is negative"


def test_a_cls_of_5000_digits_is_a_bad_label_outside_the_names_given() -> None:
    entry = _entry("cls", b"7" * 5000, ("rose", "tulip"))
    assert isinstance(entry, DeadLetter) and entry.reason == "bad_label"
    assert "cls member: class index 77777777777777777777...77777777 (5000 characters) is outside" in entry.error
