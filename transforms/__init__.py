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
_EXPORTS = {name: module for module, names in {
    # Reading TFRecord files, split inside files by byte range.
    "transforms.tfrecord_source": ("ReadFromTFRecords", "ReadAllFromTFRecords", "RECORDS", "ERRORS"),
    # Planning and writing byte-balanced shards, and publishing them atomically.
    "transforms.plan_shards": ("PlanShards", "ASSIGNED", "TOTALS"),
    "transforms.shard_sink": ("WriteShards", "PublishShards"),
    # The build job's steps.
    "transforms.discover_images": ("DiscoverImages",),
    "transforms.inspect_images": ("InspectImages",),
    "transforms.reject_duplicates": ("RejectDuplicatePaths", "RejectDuplicateImages"),
    "transforms.shardset.dead_letters": ("DEAD_LETTERS",),
    # The verify and reshard jobs' steps.
    "transforms.verify_steps": ("CheckAcrossRanges", "WriteReport", "WritePreview", "PROBLEMS"),
    "transforms.reshard_steps": ("ToRecordItems",),
}.items() for name in names}

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
