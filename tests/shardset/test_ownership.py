"""Which files of an output folder the tool owns (``shardset.ownership``): keys files among them."""

from __future__ import annotations

import pytest

from transforms.shardset.ownership import is_shard_named, owned_files, unlisted_shard_files


@pytest.mark.parametrize("name, named", [
    ("train-00000-of-00002.tfrecord", True),
    ("index/train-00000-of-00002.tfrecord.idx", True),
    ("index/train-00000-of-00002.tfrecord.keys", True),
    ("index/train-00000-of-00002.array_record.keys", True),
    ("index/notes.keys", False),
    ("train-00000-of-00002.tfrecord.keys", False),  # keys files live in index/ only
    ("index/readme.txt", False),
])
def test_keys_files_in_index_are_shard_named(name, named) -> None:
    assert is_shard_named(name) is named


def test_the_keys_file_of_a_listed_shard_is_owned() -> None:
    from tests.shardset.test_publish_plan import _old, _split

    owned = owned_files(_old(_split("train", 1)), None)
    assert "index/train-00000-of-00001.tfrecord.keys" in owned
    assert unlisted_shard_files(["index/train-00000-of-00001.tfrecord.keys",
                                 "index/train-00000-of-00009.tfrecord.keys"], owned) == [
        "index/train-00000-of-00009.tfrecord.keys"]
