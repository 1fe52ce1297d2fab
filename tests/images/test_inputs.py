"""Class folders and manifest rows read integer labels as class indices, as every input kind does."""

from __future__ import annotations

import pytest

from transforms.images.inputs import LabelRules, tree_entry, unreadable_folder_entry
from tests.helpers import manifest_entries
from transforms.images.items import SourceImage
from transforms.shardset.dead_letters import DeadLetter


@pytest.mark.parametrize("folder, label", [("7", "7"), ("07", "7"), ("10", "10"), ("cat", "cat")])
def test_a_class_folder_named_by_an_integer_is_that_index(folder, label) -> None:
    assert tree_entry("root", f"{folder}/a.jpg", "classes", LabelRules()).label == label
    _, named = unreadable_folder_entry("root", folder, "denied", "classes", LabelRules())
    assert named == label


def test_class_names_name_the_indices_of_folders_and_rows() -> None:
    rules = LabelRules(class_names=("cat", "dog"))
    assert tree_entry("root", "1/a.jpg", "classes", rules).label == "dog"
    dead = tree_entry("root", "2/a.jpg", "classes", rules)
    assert isinstance(dead, DeadLetter) and dead.reason == "bad_label" and "outside the 2 class names" in dead.error


@pytest.mark.parametrize("manifest, text, labels", [
    ("m.csv", "path,label\na.jpg, 7 \nb.jpg,007\nc.jpg,cat\n", ["7", "7", "cat"]),
    ("m.jsonl", '{"path": "a.jpg", "label": 7}\n{"path": "b.jpg", "label": " 7 "}\n', ["7", "7"]),
    ("m.csv", "path,label\na.jpg,9;11\n", ["9"]),
])
def test_manifest_integer_labels_are_stripped_then_indices(manifest, text, labels) -> None:
    rules = LabelRules(multi_label="9;11" in text)
    entries = list(manifest_entries(text, manifest, rules))
    assert [e.label for e in entries] == labels
    if rules.multi_label:
        assert entries[0].labels == ("9", "11")


def test_a_negative_index_in_a_manifest_is_a_bad_label() -> None:
    [dead] = manifest_entries("path,label\na.jpg,-1\n", "m.csv", LabelRules())
    assert isinstance(dead, DeadLetter) and (dead.path, dead.reason) == ("m.csv:2", "bad_label")
    assert "class index -1 is negative" in dead.error
