"""Records as the reshard job carries them: bytes plus what planning needs (pure)."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from transforms.errors import ExampleError, ShardsError
from transforms.example.codec import decode_example
from transforms.tfrecord.framing import framed_size
from transforms.tfrecord.run_files import RunSlice
from transforms.shardset.naming import split_of_shard
from transforms.shardset.planning import order_key

__all__ = ["RecordItem", "record_item", "input_split", "label_pairs", "labels_from_pairs", "feature_spec",
           "RecordFacts", "RecordTally"]


@dataclass(frozen=True)
class RecordItem:
    """One input record on its way to a new shard.

    Attributes:
        order_key: Shuffle key, a seeded hash of the record's bytes.
        label: ``image/class/label`` when the record is an Example carrying it (a tuple when it
            holds other than one value); ``text``: ``image/class/text`` likewise.
        features: Feature name -> kind (``<kind>_list`` for other than one value); empty when the
            record is not an Example.
        run: Where the record was written, framed, when it was read (``data`` is then empty).
        digest: A 16-byte BLAKE2b of the record's bytes, with ``run``: it breaks ties of
            ``order_key`` as the bytes themselves would.
    """

    order_key: int
    data: bytes
    label: int | tuple[int, ...] | None = None
    text: str | tuple[str, ...] | None = None
    features: tuple[tuple[str, str], ...] = ()
    split: str = ""
    run: RunSlice | None = None
    digest: bytes = b""

    @property
    def size(self) -> int:
        return self.run.length if self.run is not None else framed_size(len(self.data))

    def sort_key(self) -> tuple[int, bytes]:
        """Total order: order key, then the bytes or their digest (equal bytes are interchangeable)."""
        return (self.order_key, self.digest if self.run is not None else self.data)

    def for_planning(self) -> "RecordItem":
        """This item without its text and features (gathered before), so planning groups hold less."""
        return dataclasses.replace(self, text=None, features=())

    def in_run_file(self, where: RunSlice) -> "RecordItem":
        """This item without its bytes: they were written to a run file, at ``where``."""
        return dataclasses.replace(self, data=b"", run=where,
                                   digest=hashlib.blake2b(self.data, digest_size=16).digest())


def record_item(data: bytes, seed: int, split: str = "") -> RecordItem:
    """Wraps one record of ``split``, reading its label if it is an Example that has one."""
    try:
        decoded = decode_example(data)
    except ExampleError:
        decoded = {}
    features = tuple(sorted((name, kind if len(values) == 1 or kind == "none" else f"{kind}_list")
                            for name, (kind, values) in decoded.items()))
    label = text = None
    kind, values = decoded.get("image/class/label", ("", []))
    if kind == "int64":
        label = values[0] if len(values) == 1 else tuple(values)
    kind, values = decoded.get("image/class/text", ("", []))
    if kind == "bytes":
        texts = tuple(v.decode("utf-8", "replace") for v in values)
        text = texts[0] if len(texts) == 1 else texts
    return RecordItem(order_key(seed, data), data, label, text, features, split)


def input_split(path: str, split: str | None) -> str:
    """The split a record of ``path`` goes to: ``--split``, else the one its shard name states (or ``ShardsError``)."""
    if split is not None:
        return split
    found = split_of_shard(path)
    if found is None:
        raise ShardsError(f"{path}: the file name states no split (not "
                          "{split}-NNNNN-of-NNNNN.tfrecord); give --split NAME to put every "
                          "record in one split")
    return found


def label_pairs(item: RecordItem) -> list[tuple[int, str]]:
    """``(index, name)`` pairs a record states, one per label of a multi-label record."""
    if item.label is None or item.text is None:
        return []
    labels = item.label if isinstance(item.label, tuple) else (item.label,)
    texts = item.text if isinstance(item.text, tuple) else (item.text,)
    return list(zip(labels, texts)) if len(labels) == len(texts) else []


def labels_from_pairs(pairs: Iterable[tuple[int, str]]) -> list[str]:
    """Class names in index order from (label, text) pairs; empty unless every index 0..K-1 has one name."""
    names: dict[int, str] = {}
    for label, text in pairs:
        if names.setdefault(label, text) != text:
            return []
    return [names[i] for i in range(len(names))] if sorted(names) == list(range(len(names))) else []


def feature_spec(records: int, seen: Mapping[tuple[str, str], int]) -> dict[str, str]:
    """Feature name -> type, for features present in every one of ``records`` records with one kind
    (``<kind>_list`` where some records hold other than one value); ``seen``: ``(name, kind)`` -> records."""
    if not records:
        return {}
    merged: dict[tuple[str, str], tuple[int, bool]] = {}
    for (name, kind), count in seen.items():
        base, many = (kind[:-5], True) if kind.endswith("_list") else (kind, False)
        total, listed = merged.get((name, base), (0, False))
        merged[(name, base)] = (total + count, listed or many)
    return {name: f"{base}_list" if listed else base
            for (name, base), (count, listed) in sorted(merged.items()) if count == records}


@dataclass(frozen=True)
class RecordFacts:
    """What all the records read say together, for the manifest (``dead_letters``: damaged stretches of
    the inputs, when counted; each is one input)."""

    records: int = 0
    dead_letters: int = 0
    class_names: tuple[str, ...] = ()
    feature_spec: Mapping[str, str] = field(default_factory=dict)

    @property
    def inputs(self) -> int:
        """Inputs: every record read and every damaged stretch."""
        return self.records + self.dead_letters


@dataclass
class RecordTally:
    """Gathers ``RecordFacts`` one record at a time (a combine's accumulator: ``add`` and ``merge`` change it).

    Attributes:
        names: Class index -> name from the records' ``label_pairs``; None once
            two records give one index different names (no class names then).
        features: ``(name, kind)`` -> records carrying it (as ``feature_spec`` takes them).
    """

    records: int = 0
    names: dict[int, str] | None = field(default_factory=dict)
    features: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)

    def add(self, item: RecordItem) -> "RecordTally":
        """Counts ``item``, its class names and its features."""
        self.records += 1
        self._add_names(label_pairs(item))
        self.features.update(item.features)
        return self

    def merge(self, other: "RecordTally") -> "RecordTally":
        """Adds what ``other`` gathered."""
        self.records += other.records
        if other.names is None:
            self.names = None
        else:
            self._add_names(other.names.items())
        self.features.update(other.features)
        return self

    def facts(self) -> RecordFacts:
        """The facts gathered (as ``labels_from_pairs`` and ``feature_spec`` give them)."""
        names = labels_from_pairs(self.names.items()) if self.names is not None else []
        return RecordFacts(self.records, 0, tuple(names),
                           feature_spec(self.records, self.features))

    def _add_names(self, pairs: Iterable[tuple[int, str]]) -> None:
        if self.names is None:
            return
        for label, text in pairs:
            if self.names.setdefault(label, text) != text:
                self.names = None
                return
