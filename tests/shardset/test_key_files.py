"""Keys files: the 32-byte keys of a shard's records, in order (``shardset.key_files``)."""

from __future__ import annotations

import hashlib

import pytest

from transforms.errors import ShardsError
from tests.helpers import encode_example
from transforms.shardset.key_files import KeyCollector, keys_name, keys_problem, parse_keys
from transforms.tfrecord.framing import frame_record
from transforms.tfrecord.run_files import FramedRecord

KEYS = [hashlib.sha256(bytes([n])).hexdigest() for n in range(3)]


def _record(key: str | None) -> bytes:
    features = {"image/encoded": [b"\xff\xd8pixels"]}
    if key is not None:
        features["image/key/sha256"] = [key.encode("ascii")]
    return encode_example(features)


def test_the_keys_file_lies_beside_the_index():
    assert keys_name("out/train-00000-of-00004.tfrecord") == "out/index/train-00000-of-00004.tfrecord.keys"
    assert keys_name("s3://b/set/val-00001-of-00002.tfrecord.gz") == "s3://b/set/index/val-00001-of-00002.tfrecord.gz.keys"


def test_collects_the_raw_digests_of_records_given_whole_in_pieces_or_framed():
    collector = KeyCollector()
    collector.add(_record(KEYS[0]))
    data = _record(KEYS[1])
    collector.add((data[:5], data[5:20], data[20:]))
    collector.add(FramedRecord(frame_record(_record(KEYS[2]))))
    assert collector.keys() == b"".join(bytes.fromhex(k) for k in KEYS)
    assert list(parse_keys(collector.keys())) == KEYS


@pytest.mark.parametrize("bad", [None, "not-a-sha256", "ab" * 31, "zz" * 32])
def test_a_record_without_a_usable_key_means_no_keys_file(bad):
    collector = KeyCollector()
    collector.add(_record(KEYS[0]))
    collector.add(_record(bad))
    collector.add(_record(KEYS[1]))
    assert collector.keys() is None


def test_a_record_that_is_not_an_example_means_no_keys_file():
    collector = KeyCollector()
    collector.add(b"\xff\xff\xff")
    assert collector.keys() is None


def test_no_record_is_an_empty_keys_file():
    assert KeyCollector().keys() == b""


def test_a_keys_file_of_a_broken_size_is_refused_naming_it():
    with pytest.raises(ShardsError, match="index/x.keys: 33 bytes"):
        list(parse_keys(b"\0" * 33, "index/x.keys"))


@pytest.mark.parametrize("data, keys, problem", [
    (b"".join(bytes.fromhex(k) for k in KEYS), KEYS, None),
    (b"".join(bytes.fromhex(k) for k in KEYS[:2]), KEYS, "k.keys lists 2 keys; the shard has 3 records"),
    (b"".join(bytes.fromhex(k) for k in reversed(KEYS)), KEYS,
     f"k.keys: key 0 is {KEYS[2]}; record 0's image/key/sha256 is {KEYS[0]}"),
    (b"\0" * 31, [], "k.keys: 31 bytes is not a whole number of 32-byte keys"),
])
def test_keys_problem_names_the_file_and_the_first_difference(data, keys, problem):
    assert keys_problem(data, keys, "k.keys") == problem


def test_a_framed_record_that_says_its_key_is_not_read_for_it():
    # The shard writer's records copied from run files carry their image's sha256: the keys file takes
    # it as it is, with no parse of the record (here not even an Example).
    collector = KeyCollector()
    collector.add(FramedRecord(frame_record(b"not an example"), key=KEYS[0]))
    collector.add(FramedRecord(frame_record(_record(KEYS[1]))))
    assert list(parse_keys(collector.keys())) == KEYS[:2]
    collector.add(FramedRecord(frame_record(_record(KEYS[2])), key="not-a-sha256"))
    assert collector.keys() is None
