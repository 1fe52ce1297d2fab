"""A GroupByKey whose values travel packed: many values of a key in one element.

Before the shuffle each bundle packs its values by key (``shardset.packing.Packer``), so the
runner moves one element per pack instead of one per value (BENCHMARKS.md, "Nothing big at a
billion items").

Groups are those of a ``GroupByKey``; only the order of a group's values may
differ. Elements must be in the global window (batch jobs).
"""

from __future__ import annotations

import typing
from typing import Any, Iterator

import apache_beam as beam
from apache_beam import coders
from apache_beam.transforms.window import GlobalWindows

from transforms.shardset.packing import HELD_BYTES, PACK_BYTES, Packer, unpack
from transforms.worker_options import CarriesStorageOptions

__all__ = ["GroupPacked", "PackedValues", "PackFn", "unpack_groups", "in_global_window"]

# What a finish_bundle emits is in the global window; with_value shares one timestamp and window.
_IN_GLOBAL_WINDOW = GlobalWindows.windowed_value(None)


def in_global_window(value):
    """``value`` as a windowed value in the global window, for ``finish_bundle``."""
    return _IN_GLOBAL_WINDOW.with_value(value)


class PackedValues:
    """The values of one group, decoded from their packs on each iteration, one value at a time."""

    def __init__(self, packs: typing.Iterable[bytes], coder: coders.Coder, compressed: bool = False) -> None:
        self._packs = packs
        self._coder = coder
        self._compressed = compressed

    def __iter__(self) -> Iterator[Any]:
        decode, compressed = self._coder.get_impl().decode, self._compressed
        for packed in self._packs:
            for value in unpack(packed, compressed):
                yield decode(value)


class PackFn(CarriesStorageOptions, beam.DoFn):
    """(key, value) -> (key, pack): a bundle's values, encoded and packed per key (``Packer``) before a
    GroupByKey. A subclass whose ``process`` keys its own elements returns what ``self.add(key, value)``
    does; ``finish_bundle`` hands out the rest."""

    def __init__(self, coder: coders.Coder, pack_bytes: int = PACK_BYTES, held_bytes: int = HELD_BYTES,
                 compress: bool = False) -> None:
        Packer(pack_bytes, held_bytes)  # refuses a bad size here, not on a worker
        self._coder = coder
        self._pack_bytes = pack_bytes
        self._held_bytes = held_bytes
        self._compress = compress

    def start_bundle(self):
        self._packer = Packer(self._pack_bytes, self._held_bytes, self._compress)
        self._encode = self._coder.get_impl().encode

    def process(self, keyed):
        return self.add(*keyed)

    def add(self, key, value) -> list[tuple[Any, bytes]] | None:
        """Packs ``value`` under ``key``; returns the ``(key, pack)`` pairs to emit now, or None."""
        packer = self._packer
        done = packer.add(key, self._encode(value))
        if done is None and not packer.full():
            return None
        out = [] if done is None else [(key, done)]
        out.extend(packer.drain())
        return out

    def finish_bundle(self):
        global_value = _IN_GLOBAL_WINDOW.with_value
        for keyed in self._packer.drain():
            yield global_value(keyed)


class GroupPacked(beam.PTransform):
    """``(key, value)`` -> ``(key, PackedValues)``: a GroupByKey whose values cross the shuffle packed.

    Args:
        pack_bytes: Bytes at which a key's pack is handed out.
        held_bytes: Bytes of packs a bundle holds before it hands them all out.
        compress: Packs are zlib-compressed (values that repeat themselves, like paths).
    """

    def __init__(self, pack_bytes: int = PACK_BYTES, held_bytes: int = HELD_BYTES, compress: bool = False) -> None:
        super().__init__()
        self._pack_bytes = pack_bytes
        self._held_bytes = held_bytes
        self._compress = compress

    def expand(self, keyed):
        args = getattr(keyed.element_type, "tuple_types", None)  # Tuple[K, V]: V's coder
        coder = coders.registry.get_coder(args[1] if args and len(args) == 2 else typing.Any)
        return (keyed
                | "Pack" >> beam.ParDo(PackFn(coder, self._pack_bytes, self._held_bytes, self._compress)
                                       ).with_output_types(typing.Tuple[typing.Any, bytes])  # (key, pack)
                | "Group" >> beam.GroupByKey()  # (key, [pack])
                | "Unpack" >> unpack_groups(coder, self._compress))  # (key, PackedValues)


def unpack_groups(coder: coders.Coder, compressed: bool = False) -> beam.PTransform:
    """``(key, [pack])`` -> ``(key, PackedValues)``, for a GroupByKey of packs made by a ``PackFn``."""
    return beam.MapTuple(lambda key, packs: (key, PackedValues(packs, coder, compressed)))
