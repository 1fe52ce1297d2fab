"""Each shard's CRC32C, as GCS states it: written by the build, checked by verify.

The build lists every shard's CRC32C (and its ``.idx``'s) in ``shards.jsonl``
in GCS's form, the one ``gsutil ls -L`` prints; its sha256 only with
``--shard_sha256``. Verify finds a shard whose bytes changed by its CRC32C, and
a set listed before shards had a CRC32C (sha256 only) still verifies.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import shutil

import crc32c
import pytest

from tests.shard_fixtures import make_class_tree
from tests.trees import Part
from transforms.shardset.manifest import MANIFEST_NAME, SHARDS_NAME, Manifest
from transforms.shardset.shard_list import with_shard_list
from tests.helpers import shard_list_bytes
from transforms.tfrecord.record_index import index_names
from transforms.verify.checks import Report

pytestmark = pytest.mark.slow  # each builds or verifies a shard set with the real jobs

FLAGS = ["--num_shards", "3", "--seed", "5", "--max_bad_fraction", "0"]


def _gsutil_crc32c(data: bytes) -> str:
    """What ``gsutil hash -c`` prints for these bytes: base64 of the CRC32C, big-endian."""
    return base64.b64encode(crc32c.crc32c(data).to_bytes(4, "big")).decode("ascii")


def _lines(folder: str) -> list[dict]:
    with open(os.path.join(folder, SHARDS_NAME), "rb") as fh:
        return [json.loads(line) for line in fh]


def _read(folder: str, name: str) -> bytes:
    with open(os.path.join(folder, name), "rb") as fh:
        return fh.read()


def _index_of(folder: str, name: str) -> str:
    return next(n for n in index_names(name) if os.path.exists(os.path.join(folder, n)))


TREE = (Part(per_class=3),)  # the module's input tree (tests/trees.py)


def _sets(shared, tree) -> tuple[str, str]:
    """A small set built with the defaults, and the same built with --shard_sha256 (each built once)."""
    return shared.build(tree, *FLAGS), shared.build(tree, "--shard_sha256", *FLAGS)


def _verify(capsys, tmp_path, folder: str) -> Report:
    from beam_jobs import verify_shards

    report = tmp_path / f"report{len(os.listdir(tmp_path))}.json"
    capsys.readouterr()
    status = verify_shards.run(["--output_dir", folder, "--report", str(report)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    result = Report.loads(report.read_bytes())
    assert status == (0 if result.ok else 1), out + err
    return result


def test_the_shard_list_states_each_shards_crc32c_as_gsutil_prints_it_and_no_sha256(shared, tree) -> None:
    built = _sets(shared, tree)
    plain, _ = built
    lines = _lines(plain)
    assert len(lines) == 3
    for line in lines:
        assert "sha256" not in line, line
        assert line["crc32c"] == _gsutil_crc32c(_read(plain, line["file"]))
        assert line["index_crc32c"] == _gsutil_crc32c(_read(plain, _index_of(plain, line["file"])))


def test_shard_sha256_adds_each_shards_sha256_beside_its_crc32c(shared, tree) -> None:
    built = _sets(shared, tree)
    plain, with_sha = built
    for line, before in zip(_lines(with_sha), _lines(plain)):
        data = _read(with_sha, line["file"])
        assert line["sha256"] == hashlib.sha256(data).hexdigest()
        assert line["crc32c"] == before["crc32c"] == _gsutil_crc32c(data)  # the same shard bytes
    manifest = json.loads(_read(with_sha, MANIFEST_NAME))
    assert manifest["options"]["shard_sha256"] is True


@pytest.mark.parametrize("which", [0, 1])
def test_verify_names_a_shard_whose_byte_flipped_by_its_crc32c(shared, tree, tmp_path, capsys, which) -> None:
    built = _sets(shared, tree)
    folder = str(tmp_path / "set")
    shutil.copytree(built[which], folder)
    name = _lines(folder)[1]["file"]
    data = bytearray(_read(folder, name))
    data[len(data) // 2] ^= 0x10
    with open(os.path.join(folder, name), "wb") as fh:
        fh.write(bytes(data))
    report = _verify(capsys, tmp_path, folder)
    found = [p for p in report.problems if p.kind == "crc32c_mismatch"]
    assert [os.path.basename(p.file) for p in found] == [name], report.problems
    assert "changed since it was written" in found[0].detail
    assert {p.kind for p in report.problems} - {"crc32c_mismatch", "crc_mismatch", "sha256_mismatch"} == set()
    assert ("sha256_mismatch" in {p.kind for p in report.problems}) == (which == 1)


def test_verify_names_an_idx_whose_bytes_changed_by_its_crc32c(shared, tree, tmp_path, capsys) -> None:
    built = _sets(shared, tree)
    folder = str(tmp_path / "set")
    shutil.copytree(built[0], folder)
    index = _index_of(folder, _lines(folder)[0]["file"])
    text = _read(folder, index)
    assert text.endswith(b"\n")
    with open(os.path.join(folder, index), "wb") as fh:
        fh.write(text.replace(b" ", b"  ", 1))  # the same offsets and lengths, other bytes
    report = _verify(capsys, tmp_path, folder)
    assert [(os.path.basename(p.file), p.kind) for p in report.problems] == [
        (os.path.basename(index), "crc32c_mismatch")], report.problems


def test_a_set_listed_before_shards_had_a_crc32c_still_verifies(shared, tree, tmp_path, capsys) -> None:
    built = _sets(shared, tree)
    folder = str(tmp_path / "old")
    shutil.copytree(built[0], folder)
    manifest = with_shard_list(Manifest.loads(_read(folder, MANIFEST_NAME)),
                               open(os.path.join(folder, SHARDS_NAME), "rb").readlines())
    old = dataclasses.replace(manifest, splits={
        name: dataclasses.replace(split, shards=[
            dataclasses.replace(e, crc32c=None, index_crc32c=None,
                                sha256=hashlib.sha256(_read(folder, e.file)).hexdigest())
            for e in split.shards])
        for name, split in manifest.splits.items()})
    manifest_json, shard_list = shard_list_bytes(old)
    for name, data in ((SHARDS_NAME, shard_list), (MANIFEST_NAME, manifest_json)):
        with open(os.path.join(folder, name), "wb") as fh:
            fh.write(data)
    assert all("crc32c" not in line and len(line["sha256"]) == 64 for line in _lines(folder))
    assert _verify(capsys, tmp_path, folder).ok
    name = _lines(folder)[2]["file"]
    data = bytearray(_read(folder, name))
    data[-1] ^= 1
    with open(os.path.join(folder, name), "wb") as fh:
        fh.write(bytes(data))
    report = _verify(capsys, tmp_path, folder)
    assert (name, "sha256_mismatch") in {(os.path.basename(p.file), p.kind) for p in report.problems}
    assert "crc32c_mismatch" not in {p.kind for p in report.problems}


def test_a_build_hashes_each_image_once_with_sha256_and_its_shards_not(tmp_path, monkeypatch) -> None:
    from beam_jobs import build_shards

    inputs = str(tmp_path / "in")
    make_class_tree(inputs, per_class=4, broken=False)
    image_bytes = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(inputs) for n in names)
    hashed = [0]
    real = hashlib.sha256

    class Counted:
        def __init__(self, data: bytes = b"") -> None:
            self._sha = real()
            self.update(data)

        def update(self, data) -> None:
            hashed[0] += len(data)
            self._sha.update(data)

        def __getattr__(self, name):
            return getattr(self._sha, name)

    monkeypatch.setattr(hashlib, "sha256", Counted)
    out = str(tmp_path / "out")
    assert build_shards.run(["--input", inputs, "--output_dir", out, *FLAGS]) == 0  # in this process
    shard_bytes = sum(line["bytes"] for line in _lines(out))
    assert shard_bytes > image_bytes
    # Each image once (its image/key/sha256); the rest is metadata (the shard list, resume keys).
    assert image_bytes <= hashed[0] < image_bytes + shard_bytes // 2, (hashed[0], image_bytes, shard_bytes)
