"""Tests for transforms.storage.resume_files: a finished staged shard is reused only if its CRC32C checks."""

from __future__ import annotations

import logging
import os

import pytest

from transforms.shardset.resume import DONE_SUFFIX, ShardDone
from transforms.storage.resume_files import adopt_shard, record_done_shard
from transforms.storage.shard_files import write_shard

RECORDS = [(b"record %d" % i * 40, i % 2) for i in range(5)]


def _staged(out: str, compression: str = "none") -> ShardDone:
    """A shard written by run ``old``, with its done record; the record as read back."""
    result = write_shard(out, ("train", 0, 2), RECORDS, compression, "old")
    record_done_shard("content", result)
    os.makedirs(os.path.join(out, ".staging", "new"))  # the resuming run's staging, made when it starts
    path = result.staged + DONE_SUFFIX
    with open(path, "rb") as fh:
        return ShardDone.loads(fh.read(), os.path.dirname(path))


def _flip(path: str, at: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x04]))


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_staged_shard_whose_crc32c_checks_is_moved_into_the_new_run(tmp_path, compression) -> None:
    out = str(tmp_path / "out")
    done = _staged(out, compression)
    result = adopt_shard(done, out, "new")
    assert result is not None
    assert (result.stats.crc32c, result.stats.index_crc32c) == (done.crc32c, done.index_crc32c)
    assert os.path.dirname(result.staged) == os.path.join(out, ".staging", "new")
    assert os.path.exists(result.staged) and not os.path.exists(done.staged)


@pytest.mark.parametrize("which", ["shard", "index"])
def test_a_staged_shard_or_idx_whose_crc32c_does_not_check_is_not_reused(tmp_path, caplog, which) -> None:
    out = str(tmp_path / "out")
    done = _staged(out)
    assert done.sha256 is None and done.staged_index is not None
    _flip(done.staged if which == "shard" else done.staged_index, 3)  # same size, other bytes
    with caplog.at_level(logging.WARNING):
        assert adopt_shard(done, out, "new") is None
    assert os.path.exists(done.staged)  # left where it was, for the rerun to write it again
    assert f"not reusing {done.staged}: its CRC32C is not the one recorded" in caplog.text


def test_a_reused_shard_brings_its_keys_file_checked_by_its_crc32c(tmp_path, caplog) -> None:
    import hashlib

    from tests.helpers import encode_example

    out = str(tmp_path / "out")
    keyed = [(encode_example({"image/key/sha256": [hashlib.sha256(bytes([i])).hexdigest().encode()]}), 0)
             for i in range(3)]
    result = write_shard(out, ("train", 0, 1), keyed, "none", "old")
    assert result.staged_keys is not None and result.stats.keys_crc32c is not None
    record_done_shard("content", result)
    os.makedirs(os.path.join(out, ".staging", "new"))
    with open(result.staged + DONE_SUFFIX, "rb") as fh:
        done = ShardDone.loads(fh.read(), os.path.dirname(result.staged))
    assert (done.staged_keys, done.keys_crc32c) == (result.staged_keys, result.stats.keys_crc32c)
    _flip(done.staged_keys, 3)
    with caplog.at_level(logging.WARNING):
        assert adopt_shard(done, out, "new") is None  # a keys file that changed: the shard is written again
    _flip(done.staged_keys, 3)
    reused = adopt_shard(done, out, "new")
    assert reused is not None and reused.stats.keys_crc32c == done.keys_crc32c
    assert os.path.dirname(reused.staged_keys) == os.path.join(out, ".staging", "new")
    assert os.path.exists(reused.staged_keys) and not os.path.exists(done.staged_keys)
