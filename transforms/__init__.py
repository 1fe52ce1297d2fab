"""Beam transforms for TFRecord shard sets, with the pure code beneath them in subpackages.

The public transforms are importable from here (``from transforms import
ReadFromTFRecords``). They are loaded on first use, so importing a pure module
(``transforms.tfrecord.framing``, ``transforms.example.codec``, ...) never pays
for importing Apache Beam.
"""

from __future__ import annotations

import importlib
from typing import Any

# Public name -> the module that defines it.
_EXPORTS = {
    # Reading TFRecord files, split inside files by byte range.
    "ReadFromTFRecords": "transforms.tfrecord_source",
    "ReadAllFromTFRecords": "transforms.tfrecord_source",
    "RECORDS": "transforms.tfrecord_source",
    "ERRORS": "transforms.tfrecord_source",
    # Planning and writing byte-balanced shards, and publishing them atomically.
    "PlanShards": "transforms.plan_shards",
    "ASSIGNED": "transforms.plan_shards",
    "TOTALS": "transforms.plan_shards",
    "WriteShards": "transforms.shard_sink",
    "PublishShards": "transforms.shard_sink",
    # The build job's steps.
    "DiscoverImages": "transforms.discover_images",
    "InspectImages": "transforms.inspect_images",
    "RejectDuplicatePaths": "transforms.reject_duplicates",
    "RejectDuplicateImages": "transforms.reject_duplicates",
    "DEAD_LETTERS": "transforms.shardset.dead_letters",
    # The verify job's steps.
    "CheckAcrossRanges": "transforms.verify_steps",
    "WriteReport": "transforms.verify_steps",
    "WritePreview": "transforms.verify_steps",
    "PROBLEMS": "transforms.verify_steps",
    "SAMPLES": "transforms.verify_steps",
    # The reshard job's steps.
    "ToRecordItems": "transforms.reshard_steps",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'transforms' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
