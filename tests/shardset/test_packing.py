"""Packs of encoded values: framing, when a packer hands packs out, compression."""

from __future__ import annotations

import zlib

import pytest

from transforms.shardset.packing import COMPRESS_MIN_BYTES, Packer, pack, unpack


@pytest.mark.parametrize("values", [[], [b""], [b"a"], [b"abc", b"", b"\x00" * 300], [bytes(range(256))] * 40])
def test_a_pack_gives_back_its_values_in_order(values):
    packed = pack(values)
    assert len(packed) == sum(4 + len(v) for v in values)
    assert list(unpack(packed)) == values


@pytest.mark.parametrize("cut", [1, 3, 5, 9])
def test_a_cut_pack_is_refused(cut):
    packed = pack([b"abcdef", b"gh"])
    with pytest.raises(ValueError, match="ends inside"):
        list(unpack(packed[:-cut]))


def test_a_key_whose_pack_is_full_gets_it_at_once():
    packer = Packer(pack_bytes=20, held_bytes=1000)
    assert packer.add("a", b"x" * 6) is None  # 10 bytes
    assert packer.add("b", b"y" * 6) is None
    full = packer.add("a", b"z" * 6)  # 20 bytes: full
    assert list(unpack(full)) == [b"x" * 6, b"z" * 6]
    assert packer.held == 10 and not packer.full()
    assert [(k, list(unpack(p))) for k, p in packer.drain()] == [("b", [b"y" * 6])]
    assert packer.held == 0 and list(packer.drain()) == []


def test_a_packer_that_holds_enough_is_full_and_drains_every_key():
    packer = Packer(pack_bytes=1 << 20, held_bytes=100)
    for i in range(9):
        packer.add(i % 3, bytes([i]) * 8)  # 12 bytes each
    assert packer.held == 108 and packer.full()
    drained = {key: list(unpack(p)) for key, p in packer.drain()}
    assert drained == {k: [bytes([i]) * 8 for i in range(k, 9, 3)] for k in range(3)}
    assert not packer.full()


def test_compressed_packs_are_smaller_for_values_that_repeat_and_read_back():
    values = [f"/data/images/train/class-{i % 7}/image-{i:07d}.jpg".encode() for i in range(500)]
    packer = Packer(compress=True)
    for v in values:
        packer.add("k", v)
    ((key, packed),) = list(packer.drain())
    assert key == "k" and len(packed) < len(pack(values)) / 4
    assert packed[:1] == b"\x01" and zlib.decompress(packed[1:]) == pack(values)
    assert list(unpack(packed, compressed=True)) == values


def test_a_small_pack_is_not_compressed_and_says_so():
    packer = Packer(compress=True)
    packer.add("k", b"abc")
    assert len(pack([b"abc"])) < COMPRESS_MIN_BYTES
    ((_, packed),) = list(packer.drain())
    assert packed == b"\x00" + pack([b"abc"])
    assert list(unpack(packed, compressed=True)) == [b"abc"]


@pytest.mark.parametrize("sizes", [(0, 10), (10, 0), (-1, 5)])
def test_sizes_must_be_positive(sizes):
    with pytest.raises(ValueError, match="positive"):
        Packer(*sizes)
