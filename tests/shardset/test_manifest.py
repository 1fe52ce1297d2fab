"""Unit tests for transforms.shardset.manifest and shard_list: golden JSON, round trips, validation,
both format versions, and fuzzing."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.errors import ManifestError
from transforms.shardset.manifest import FORMAT_NAME, FORMAT_VERSION, Manifest, ShardEntry, SplitEntry
from transforms.shardset.shard_list import read_shard_list, with_shard_list
from tests.helpers import shard_list_bytes


def _manifest() -> Manifest:
    return Manifest(
        created_by="build_shards",
        options={"shard_size_mb": 150, "input": "gs://b/in"},
        seed=42,
        compression="gzip",
        feature_spec={"image/encoded": "bytes", "image/class/label": "int64"},
        labels=["cat", "dog"],
        splits={
            "validation": SplitEntry("validation", [
                ShardEntry("validation-00000-of-00001.tfrecord.gz", 1, 100, "a" * 64, {"1": 1})]),
            "train": SplitEntry("train", [
                ShardEntry("train-00000-of-00002.tfrecord.gz", 3, 300, "0" * 64, {"10": 1, "2": 1, "0": 1}),
                ShardEntry("train-00001-of-00002.tfrecord.gz", 2, 250, "f" * 64, {"1": 2}),
            ]),
        },
        dead_letters=1,
    )


# Format 1, as releases before format 2 wrote it (still read): every shard inside manifest.json.
# Keys in a fixed order, splits sorted by name, options sorted, labels sorted as numbers,
# derived totals included, two-space indent, trailing newline.
_GOLDEN = """{
  "format": "tfrecord-shards",
  "format_version": 1,
  "created_by": "build_shards",
  "seed": 42,
  "compression": "gzip",
  "options": {
    "input": "gs://b/in",
    "shard_size_mb": 150
  },
  "feature_spec": {
    "image/encoded": "bytes",
    "image/class/label": "int64"
  },
  "labels": [
    "cat",
    "dog"
  ],
  "records": 6,
  "dead_letters": 1,
  "splits": {
    "train": {
      "records": 5,
      "bytes": 550,
      "label_counts": {
        "0": 1,
        "1": 2,
        "2": 1,
        "10": 1
      },
      "shards": [
        {
          "file": "train-00000-of-00002.tfrecord.gz",
          "records": 3,
          "bytes": 300,
          "sha256": "0000000000000000000000000000000000000000000000000000000000000000",
          "label_counts": {
            "0": 1,
            "2": 1,
            "10": 1
          }
        },
        {
          "file": "train-00001-of-00002.tfrecord.gz",
          "records": 2,
          "bytes": 250,
          "sha256": "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
          "label_counts": {
            "1": 2
          }
        }
      ]
    },
    "validation": {
      "records": 1,
      "bytes": 100,
      "label_counts": {
        "1": 1
      },
      "shards": [
        {
          "file": "validation-00000-of-00001.tfrecord.gz",
          "records": 1,
          "bytes": 100,
          "sha256": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
          "label_counts": {
            "1": 1
          }
        }
      ]
    }
  }
}
"""

# Format 2: manifest.json holds per-split totals and names shards.jsonl (one compact line a shard).
_GOLDEN_V2 = """{
  "format": "tfrecord-shards",
  "format_version": 2,
  "created_by": "build_shards",
  "seed": 42,
  "compression": "gzip",
  "options": {
    "input": "gs://b/in",
    "shard_size_mb": 150
  },
  "feature_spec": {
    "image/encoded": "bytes",
    "image/class/label": "int64"
  },
  "labels": [
    "cat",
    "dog"
  ],
  "records": 6,
  "dead_letters": 1,
  "splits": {
    "train": {
      "records": 5,
      "bytes": 550,
      "num_shards": 2,
      "label_counts": {
        "0": 1,
        "1": 2,
        "2": 1,
        "10": 1
      }
    },
    "validation": {
      "records": 1,
      "bytes": 100,
      "num_shards": 1,
      "label_counts": {
        "1": 1
      }
    }
  },
  "shards": {
    "file": "shards.jsonl",
    "sha256": "06ca748cb257bf7f4d86dd5662d7a7286005c20427b59f3e95dadc09c98ff423",
    "bytes": 602,
    "lines": 3
  }
}
"""
_GOLDEN_SHARDS = """{"split":"train","index":0,"file":"train-00000-of-00002.tfrecord.gz","records":3,"bytes":300,"sha256":"0000000000000000000000000000000000000000000000000000000000000000","label_counts":{"0":1,"2":1,"10":1}}
{"split":"train","index":1,"file":"train-00001-of-00002.tfrecord.gz","records":2,"bytes":250,"sha256":"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff","label_counts":{"1":2}}
{"split":"validation","index":0,"file":"validation-00000-of-00001.tfrecord.gz","records":1,"bytes":100,"sha256":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","label_counts":{"1":1}}
"""


def _dump(manifest: Manifest) -> bytes:
    """manifest.json and shards.jsonl joined, for comparing whole outputs."""
    data, lines = shard_list_bytes(manifest)
    return data + b"--\n" + lines


def _load_v2(data: bytes | str = _GOLDEN_V2, lines: bytes | str = _GOLDEN_SHARDS) -> Manifest:
    lines = lines.encode() if isinstance(lines, str) else lines
    return with_shard_list(Manifest.loads(data), lines.splitlines(keepends=True))


def test_dumps_golden() -> None:
    assert shard_list_bytes(_manifest()) == (_GOLDEN_V2.encode("utf-8"), _GOLDEN_SHARDS.encode("utf-8"))


def test_round_trip_is_byte_identical() -> None:
    data, lines = shard_list_bytes(_manifest())
    loaded = _load_v2(data, lines)
    assert shard_list_bytes(loaded) == (data, lines)
    assert loaded.dumps() == data  # the loaded manifest keeps its shard list's summary
    assert shard_list_bytes(_load_v2(data.decode("utf-8"), lines)) == (data, lines)  # str input too


def test_a_version_1_manifest_loads_and_writes_as_version_2() -> None:
    v1 = Manifest.loads(_GOLDEN)
    assert v1.format_version == 1 and v1.complete and v1.shards_file is None
    assert shard_list_bytes(v1) == (_GOLDEN_V2.encode(), _GOLDEN_SHARDS.encode())


def test_version_2_without_its_shard_list_has_the_totals_only() -> None:
    m = Manifest.loads(_GOLDEN_V2)
    assert not m.complete and m.format_version == 2
    assert (m.records, m.num_shards, m.splits["train"].bytes) == (6, 3, 550)
    assert m.splits["train"].label_counts() == {"0": 1, "1": 2, "2": 1, "10": 1}
    with pytest.raises(ManifestError, match="lists its shards in shards.jsonl, which was not read"):
        m.shard_files()
    assert _load_v2().shard_files() == Manifest.loads(_GOLDEN).shard_files()


def test_shard_list_without_label_counts_keeps_the_split_totals() -> None:
    m = with_shard_list(Manifest.loads(_GOLDEN_V2), _GOLDEN_SHARDS.encode().splitlines(True), label_counts=False)
    assert all(not e.label_counts for split in m.splits.values() for e in split.shards)
    assert m.splits["train"].label_counts() == {"0": 1, "1": 2, "2": 1, "10": 1}
    assert m.dumps() == _GOLDEN_V2.encode()


def _other_line(n: int, old: str, new: str) -> str:
    lines = _GOLDEN_SHARDS.splitlines(keepends=True)
    assert old in lines[n]
    lines[n] = lines[n].replace(old, new)
    return "".join(lines)


def _with_summary(lines: str) -> str:
    """The v2 golden manifest restating the shard list's sha256, size and lines (so only totals disagree)."""
    import hashlib

    doc = json.loads(_GOLDEN_V2)
    data = lines.encode()
    doc["shards"].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), lines=len(data.splitlines()))
    return json.dumps(doc)


@pytest.mark.parametrize("manifest, lines, message", [
    (_GOLDEN_V2, None, r"^shards\.jsonl is missing; manifest\.json lists its shards there$"),
    (_GOLDEN_V2, _GOLDEN_SHARDS[:-1], r"^shards\.jsonl has 602 bytes|^shards\.jsonl has 601 bytes"),
    (_GOLDEN_V2, _other_line(1, '"1":2', '"1":3'), r"^shards\.jsonl has sha256 [0-9a-f]{64}, manifest\.json says 06ca"),
    (_GOLDEN_V2, "".join(_GOLDEN_SHARDS.splitlines(True)[:2]), r"^shards\.jsonl has 2 lines, manifest\.json says 3$"),
    (_GOLDEN_V2, _GOLDEN_SHARDS + _GOLDEN_SHARDS.splitlines(True)[2],
     r"^shards\.jsonl line 4: manifest\.json lists 3 shards, this line is one more$"),
    (_GOLDEN_V2, "".join(reversed(_GOLDEN_SHARDS.splitlines(True))),
     r"^shards\.jsonl line 1: split 'validation' shard 0, expected split 'train' shard 0$"),
    (_GOLDEN_V2, _other_line(0, '"file":"train', '"file":"../train'), r"^shards\.jsonl line 1\.file: "),
    (_GOLDEN_V2, "{not json\n" + _GOLDEN_SHARDS, r"^shards\.jsonl line 1: not a JSON line"),
    (_with_summary(_other_line(1, '"1":2', '"1":3')), _other_line(1, '"1":2', '"1":3'),
     r"^shards\.jsonl: the shards of split 'train' count label 1 3 times, manifest\.json says 2$"),
    (_with_summary(_other_line(1, '"records":2', '"records":4')), _other_line(1, '"records":2', '"records":4'),
     r"^shards\.jsonl: the shards of split 'train' add up to 7 records, manifest\.json says 5$"),
    (_with_summary(_other_line(2, '"bytes":100', '"bytes":101')), _other_line(2, '"bytes":100', '"bytes":101'),
     r"^shards\.jsonl: the shards of split 'validation' add up to 101 bytes, manifest\.json says 100$"),
], ids=["missing", "cut", "tampered", "line_gone", "line_more", "out_of_order", "bad_file", "not_json",
        "label_totals", "record_totals", "byte_totals"])
def test_shard_list_disagreeing_with_the_manifest_is_one_line(manifest: str, lines: str | None,
                                                              message: str) -> None:
    m = Manifest.loads(manifest)
    with pytest.raises(ManifestError, match=message) as err:
        with_shard_list(m, None if lines is None else lines.encode().splitlines(keepends=True))
    assert "\n" not in str(err.value)


def test_read_shard_list_streams_entries_in_order() -> None:
    got = [(split, e.file) for split, e in read_shard_list(Manifest.loads(_GOLDEN_V2),
                                                           iter(_GOLDEN_SHARDS.encode().splitlines(True)))]
    assert got == [("train", "train-00000-of-00002.tfrecord.gz"), ("train", "train-00001-of-00002.tfrecord.gz"),
                   ("validation", "validation-00000-of-00001.tfrecord.gz")]


@pytest.mark.parametrize("mutate", [
    lambda d: d["shards"].update(file="other.jsonl"),
    lambda d: d["shards"].update(lines=4),
    lambda d: d.pop("shards"),
    lambda d: d["splits"]["train"].pop("num_shards"),
    lambda d: d["splits"]["train"].update(label_counts={"0": -1}),
    lambda d: d["shards"].update(sha256="A" * 64),
], ids=["other_file", "lines_vs_shards", "no_shards", "no_num_shards", "negative_label_total", "sha_upper"])
def test_loads_rejects_version_2(mutate) -> None:
    doc = json.loads(_GOLDEN_V2)
    mutate(doc)
    with pytest.raises(ManifestError):
        Manifest.loads(json.dumps(doc))


def test_loaded_fields() -> None:
    m = Manifest.loads(_GOLDEN.encode())
    assert (m.created_by, m.seed, m.compression, m.dead_letters) == ("build_shards", 42, "gzip", 1)
    assert m.records == 6
    assert list(m.labels) == ["cat", "dog"]
    assert m.shard_files() == ["train-00000-of-00002.tfrecord.gz", "train-00001-of-00002.tfrecord.gz",
                               "validation-00000-of-00001.tfrecord.gz"]
    train = m.splits["train"]
    assert (train.records, train.bytes) == (5, 550)
    assert train.label_counts() == {"10": 1, "2": 1, "0": 1, "1": 2}
    assert train.shards[0] == ShardEntry("train-00000-of-00002.tfrecord.gz", 3, 300, "0" * 64,
                                         {"0": 1, "2": 1, "10": 1})


def test_dumps_is_deterministic_over_input_order() -> None:
    m = _manifest()
    shuffled = Manifest(m.created_by, dict(reversed(list(m.options.items()))), m.seed, m.compression,
                        m.feature_spec, m.labels, dict(reversed(list(m.splits.items()))), m.dead_letters)
    assert _dump(shuffled) == _dump(m)


def test_non_ascii_is_written_as_utf8() -> None:
    m = Manifest("build_shards", {}, 0, "none", {}, ["chat", "café", "猫"], {}, 0)
    data, _ = shard_list_bytes(m)
    assert "café".encode("utf-8") in data and "猫".encode("utf-8") in data
    assert list(Manifest.loads(data).labels) == ["chat", "café", "猫"]


def test_label_counts_sort_numbers_numerically_then_names() -> None:
    shard = ShardEntry("s", 1, 1, "0" * 64, {"b": 1, "10": 1, "-1": 1, "2": 1, "a": 1})
    assert list(shard.to_dict()["label_counts"]) == ["-1", "2", "10", "a", "b"]


@pytest.mark.parametrize("label", ["--5", "²", "-", "1-", "٣", "1" * 5000, " 7", "0x1"])
def test_any_string_label_dumps_and_round_trips(label: str) -> None:
    shard = ShardEntry("s", 1, 1, "0" * 64, {label: 1, "3": 1, "z": 1})
    m = Manifest("build_shards", {}, 0, "none", {}, [], {"train": SplitEntry("train", [shard])}, 0)
    data, lines = shard_list_bytes(m)
    assert shard_list_bytes(_load_v2(data, lines)) == (data, lines)


# --- Rejections -----------------------------------------------------------------------------

Mutation = Callable[[dict], Any]


def _set(path: str, value: Any) -> Mutation:
    def mutate(doc: dict) -> None:
        *parents, last = _steps(path)
        target = doc
        for step in parents:
            target = target[step]
        target[last] = value
    return mutate


def _delete(path: str) -> Mutation:
    def mutate(doc: dict) -> None:
        *parents, last = _steps(path)
        target = doc
        for step in parents:
            target = target[step]
        del target[last]
    return mutate


def _steps(path: str) -> list:
    return [int(p) if p.isdigit() else p for p in path.split(".")]


_SHARD = "splits.train.shards.0"

_BAD: dict[str, Mutation] = {
    "format_wrong": _set("format", "tfrecords"),
    "format_missing": _delete("format"),
    "format_null": _set("format", None),
    "version_3": _set("format_version", 3),
    "version_0": _set("format_version", 0),
    "version_str": _set("format_version", "1"),
    "version_float": _set("format_version", 1.0),
    "version_bool": _set("format_version", True),
    "version_missing": _delete("format_version"),
    **{f"missing_{f}": _delete(f) for f in
       ("created_by", "seed", "compression", "options", "feature_spec", "labels", "splits", "dead_letters")},
    **{f"missing_shard_{f}": _delete(f"{_SHARD}.{f}") for f in
       ("file", "records", "bytes", "sha256", "label_counts")},
    "missing_shards": _delete("splits.train.shards"),
    "negative_records": _set(f"{_SHARD}.records", -1),
    "negative_bytes": _set(f"{_SHARD}.bytes", -5),
    "negative_label_count": _set(f"{_SHARD}.label_counts.0", -1),
    "negative_dead_letters": _set("dead_letters", -1),
    "bool_records": _set(f"{_SHARD}.records", True),
    "bool_bytes": _set(f"{_SHARD}.bytes", False),
    "bool_label_count": _set(f"{_SHARD}.label_counts.0", True),
    "bool_dead_letters": _set("dead_letters", True),
    "bool_seed": _set("seed", False),
    "float_records": _set(f"{_SHARD}.records", 3.0),
    "str_bytes": _set(f"{_SHARD}.bytes", "300"),
    "null_label_count": _set(f"{_SHARD}.label_counts.0", None),
    "float_seed": _set("seed", 1.5),
    "str_seed": _set("seed", "42"),
    "file_slash": _set(f"{_SHARD}.file", "sub/train-00000-of-00002.tfrecord.gz"),
    "file_absolute": _set(f"{_SHARD}.file", "/etc/passwd"),
    "file_dotdot": _set(f"{_SHARD}.file", ".."),
    "file_dot": _set(f"{_SHARD}.file", "."),
    "file_parent_path": _set(f"{_SHARD}.file", "../x.tfrecord"),
    "file_backslash": _set(f"{_SHARD}.file", "..\\x.tfrecord"),
    "file_empty": _set(f"{_SHARD}.file", ""),
    "file_int": _set(f"{_SHARD}.file", 7),
    "sha_short": _set(f"{_SHARD}.sha256", "0" * 63),
    "sha_long": _set(f"{_SHARD}.sha256", "0" * 65),
    "sha_upper": _set(f"{_SHARD}.sha256", "A" * 64),
    "sha_not_hex": _set(f"{_SHARD}.sha256", "g" * 64),
    "sha_int": _set(f"{_SHARD}.sha256", 0),
    "crc_short": _set(f"{_SHARD}.crc32c", "4waSgw="),
    "crc_hex": _set(f"{_SHARD}.crc32c", "e3069283"),
    "crc_not_base64": _set(f"{_SHARD}.crc32c", "4wa!gw=="),
    "crc_int": _set(f"{_SHARD}.crc32c", 0xE3069283),
    "crc_null": _set(f"{_SHARD}.crc32c", None),
    "index_crc_six_bytes": _set(f"{_SHARD}.index_crc32c", "AAAAAAAA"),
    "labels_not_list": _set("labels", "cat,dog"),
    "labels_not_str": _set("labels", ["cat", 1]),
    "splits_list": _set("splits", []),
    "split_not_object": _set("splits.train", [1]),
    "shards_object": _set("splits.train.shards", {}),
    "shard_not_object": _set(_SHARD, "train-00000-of-00002.tfrecord.gz"),
    "label_counts_list": _set(f"{_SHARD}.label_counts", [1, 1]),
    "options_list": _set("options", []),
    "feature_spec_list": _set("feature_spec", []),
    "created_by_int": _set("created_by", 1),
    "compression_null": _set("compression", None),
    "total_records_wrong": _set("records", 999),
    "split_records_wrong": _set("splits.train.records", 999),
    "split_bytes_wrong": _set("splits.train.bytes", 1),
    "shard_records_disagree_with_totals": _set(f"{_SHARD}.records", 0),
}


@pytest.mark.parametrize("mutate", _BAD.values(), ids=list(_BAD))
def test_loads_rejects(mutate: Mutation) -> None:
    doc = json.loads(_GOLDEN)
    mutate(doc)
    with pytest.raises(ManifestError):
        Manifest.loads(json.dumps(doc).encode())


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"not json", b"\xff\xfe\x00garbage", b"[1, 2]", b"null", b'"manifest"', b"42",
     b"{}", b'{"format": "tfrecord-shards"}', b"[" * 100_000, _GOLDEN.encode()[:-10],
     _GOLDEN.encode("utf-16")[:-1]],
    ids=["empty", "open_brace", "text", "binary", "array", "null", "string", "number", "empty_object",
         "only_format", "deep_nesting", "cut", "odd_utf16"],
)
def test_loads_rejects_non_manifests(data: bytes) -> None:
    with pytest.raises(ManifestError):
        Manifest.loads(data)


def test_error_names_the_field() -> None:
    doc = json.loads(_GOLDEN)
    doc["splits"]["train"]["shards"][1]["records"] = -3
    with pytest.raises(ManifestError, match=r"manifest\.splits\['train'\]\.shards\[1\]\.records"):
        Manifest.loads(json.dumps(doc))


def test_constants() -> None:
    assert (FORMAT_NAME, FORMAT_VERSION) == ("tfrecord-shards", 2)


# --- Fuzzing: loads only ever raises ManifestError, and what it accepts dumps again ----------------


def _check(data: bytes | str) -> None:
    try:
        m = Manifest.loads(data)
    except ManifestError:
        return
    if not m.complete:  # a version-2 manifest: its shard list is not there
        return
    out, lines = shard_list_bytes(m)
    assert shard_list_bytes(_load_v2(out, lines)) == (out, lines)


_FUZZ = settings(max_examples=300, deadline=None)

_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
    st.text(max_size=8),
    st.sampled_from(["", "..", ".", "a/b", "--5", "²", "-", "0" * 64, "A" * 64, "tfrecord-shards"]),
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
_keys = st.one_of(st.sampled_from(["--5", "²", "-", "10", "-1", "٣", "1_0", " 2", "1" * 30]),
                  st.text(max_size=6))


@_FUZZ
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(data: bytes) -> None:
    _check(data)


@pytest.mark.slow
@_FUZZ
@given(_json)
def test_fuzz_random_json(value: Any) -> None:
    _check(json.dumps(value))


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    paths = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            paths += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            paths += _paths(value, prefix + (index,))
    return paths


_BASE = json.loads(_GOLDEN)
_BASE_PATHS = _paths(_BASE)[1:]  # not the root itself


@_FUZZ
@given(st.lists(st.tuples(st.sampled_from(_BASE_PATHS), st.sampled_from(["delete", "replace", "rename"]),
                          _json, _keys), min_size=1, max_size=4))
def test_fuzz_mutated_manifests(mutations: list) -> None:
    doc = copy.deepcopy(_BASE)
    for path, action, value, key in mutations:
        *parents, last = path
        target = doc
        try:
            for step in parents:
                target = target[step]
            if action == "delete":
                del target[last]
            elif action == "replace":
                target[last] = value
            elif isinstance(target, dict) and last in target:
                target[key] = target.pop(last)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or retyped this path
    _check(json.dumps(doc))


@_FUZZ
@given(st.lists(st.tuples(st.integers(0, len(_GOLDEN) - 1), st.sampled_from(["flip", "drop", "insert"]),
                          st.integers(0, 255)), min_size=1, max_size=6))
def test_fuzz_byte_mutations_of_a_valid_manifest(edits: list) -> None:
    data = bytearray(_GOLDEN.encode())
    for position, action, byte in edits:
        position = min(position, len(data) - 1)
        if action == "flip":
            data[position] ^= byte or 1
        elif action == "drop":
            del data[position]
        else:
            data.insert(position, byte)
    _check(bytes(data))


@_FUZZ
@given(st.dictionaries(_keys, st.integers(0, 5), max_size=6), st.integers(0, 2))
def test_fuzz_label_count_keys(counts: dict[str, int], which: int) -> None:
    doc = copy.deepcopy(_BASE)
    shards = doc["splits"]["train"]["shards"] + doc["splits"]["validation"]["shards"]
    shards[which]["label_counts"] = counts
    data = json.dumps(doc)
    _check(data)
    assert Manifest.loads(data).shard_files()[which] == shards[which]["file"]


@_FUZZ
@given(st.lists(st.tuples(st.integers(0, len(_GOLDEN_SHARDS) - 1), st.sampled_from(["flip", "drop", "insert"]),
                          st.integers(0, 255)), min_size=1, max_size=6))
def test_fuzz_byte_mutations_of_a_shard_list(edits: list) -> None:
    data = bytearray(_GOLDEN_SHARDS.encode())
    for position, action, byte in edits:
        position = min(position, len(data) - 1)
        if action == "flip":
            data[position] ^= byte or 1
        elif action == "drop":
            del data[position]
        else:
            data.insert(position, byte)
    try:
        loaded = _load_v2(_GOLDEN_V2, bytes(data))
    except ManifestError:
        return
    assert shard_list_bytes(loaded)[0] == _GOLDEN_V2.encode()  # only an unchanged list is accepted


def test_a_shard_entry_with_a_crc32c_and_no_sha256_round_trips_and_one_with_neither_is_refused() -> None:
    entry = ShardEntry("train-00000-of-00001.tfrecord", 3, 300, None, {"0": 3}, "4waSgw==", "AAAAAA==")
    line = entry.to_dict()
    assert list(line) == ["file", "records", "bytes", "crc32c", "index_crc32c", "label_counts"]
    assert ShardEntry.from_dict(line, "here") == entry
    with pytest.raises(ManifestError, match="here: has neither 'crc32c' nor 'sha256'"):
        ShardEntry.from_dict({k: v for k, v in line.items() if k not in ("crc32c", "index_crc32c")}, "here")


def test_known_dead_letters_and_keys_crc32c_round_trip_and_are_absent_when_none() -> None:
    import dataclasses
    import json

    from transforms.shardset.manifest import ManifestError

    base = _manifest()
    split = next(iter(base.splits.values()))
    keyed = dataclasses.replace(split, shards=[dataclasses.replace(s, keys_crc32c="AAAAAA==") for s in split.shards])
    m = dataclasses.replace(base, known_dead_letters=2, splits={**base.splits, split.name: keyed})
    data, lines = shard_list_bytes(m)
    assert json.loads(data)["known_dead_letters"] == 2 and b'"keys_crc32c":"AAAAAA=="' in lines
    loaded = _load_v2(data, lines)
    assert loaded.known_dead_letters == 2
    assert {s.keys_crc32c for s in loaded.splits[split.name].shards} == {"AAAAAA=="}
    data, lines = shard_list_bytes(base)
    assert b"known_dead_letters" not in data and b"keys_crc32c" not in lines
    with pytest.raises(ManifestError, match="known_dead_letters"):
        Manifest.loads(data.replace(b'"format"', b'"known_dead_letters": -1, "format"', 1))
