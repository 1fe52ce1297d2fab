"""What a job adds to the manifest and the files beside it: ``ManifestExtras`` (no Beam).

A job that knows more than every shard set has (a build: image counts, object classes,
near-duplicates) hands it to ``PublishShards`` as the one element of its ``manifest_extras`` input.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping

__all__ = ["ManifestExtras", "as_extras", "with_files"]

# ((tally key, count), ...) summed over every shard (``WriteShards``' ``tally_of``) -> manifest fields.
FromTallies = Callable[[Iterable[tuple[Any, int]]], Mapping[str, Any]]
# The manifest about to be written -> name -> bytes (None: a file the set does not have, removed if present).
Sidecars = Callable[[Any], Mapping[str, "bytes | None"]]


@dataclasses.dataclass(frozen=True)
class ManifestExtras:
    """What a job adds to its set's manifest (``fields``, and ``from_tallies`` of the shards' summed tallies)
    and publishes beside it (``files``: name -> bytes, None: removed if present)."""

    fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    files: Mapping[str, bytes | None] = dataclasses.field(default_factory=dict)
    from_tallies: FromTallies | None = None

    def manifest_fields(self, tallies: Iterable[tuple[Any, int]]) -> dict[str, Any]:
        """The fields to merge into the manifest, given the shards' summed tallies."""
        fields = dict(self.fields)
        if self.from_tallies is not None:
            fields.update(self.from_tallies(tallies))
        return fields


def as_extras(found: ManifestExtras | Mapping[str, Any] | None) -> ManifestExtras:
    """The extras a ``manifest_extras`` element gives: a ``ManifestExtras``, or a mapping of fields."""
    return found if isinstance(found, ManifestExtras) else ManifestExtras(fields=dict(found or {}))


def with_files(sidecars: Sidecars | None, files: Mapping[str, bytes | None]) -> Sidecars | None:
    """``sidecars`` (files made from the manifest) together with ``files`` (from the pipeline)."""
    if not files:
        return sidecars
    return lambda manifest: {**(sidecars(manifest) if sidecars else {}), **files}
