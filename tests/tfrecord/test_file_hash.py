"""Tests for transforms.tfrecord.file_hash: a file's CRC32C in the form GCS states it."""

from __future__ import annotations

import base64
import hashlib

import pytest

from transforms.tfrecord.file_hash import FileHash, crc32c_text, crc32c_value


def test_crc32c_of_the_check_string_is_the_known_vector_in_gsutil_form():
    digest = FileHash()
    digest.update(b"123456789")
    assert crc32c_value(digest.crc32c) == 0xE3069283
    # GCS's crc32c metadata and `gsutil hash -c`: base64 of the 4 bytes, big-endian.
    assert digest.crc32c == "4waSgw=="
    assert base64.b64decode(digest.crc32c) == bytes.fromhex("e3069283")


@pytest.mark.parametrize("pieces", [[b""], [b"a"], [b"12", b"", b"3456789"], [bytes(range(256)) * 50]])
def test_crc32c_is_the_same_however_the_bytes_come(pieces):
    whole, parts = FileHash(), FileHash()
    whole.update(b"".join(pieces))
    for piece in pieces:
        parts.update(memoryview(piece))
    assert parts.crc32c == whole.crc32c


def test_crc32c_of_no_bytes_is_zero():
    assert FileHash().crc32c == "AAAAAA==" == crc32c_text(0)


def test_sha256_only_when_asked():
    digest, with_sha = FileHash(), FileHash(sha256=True)
    for each in (digest, with_sha):
        each.update(b"abc")
    assert digest.sha256 is None
    assert with_sha.sha256 == hashlib.sha256(b"abc").hexdigest()
    assert with_sha.crc32c == digest.crc32c


@pytest.mark.parametrize("text", ["", "4waSgw=", "4waSgw==x", "AAAAAAAA", "!!!!!!==", 12])
def test_crc32c_value_refuses_what_is_not_a_gcs_crc32c(text):
    with pytest.raises(ValueError):
        crc32c_value(text)
