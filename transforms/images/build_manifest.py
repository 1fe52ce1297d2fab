"""What a build adds to the shard sink's manifest: object classes, image counts, near-duplicates (no Beam).

``build_manifest_extras`` makes the ``ManifestExtras`` a build hands to ``PublishShards``.
"""

from __future__ import annotations

from typing import Any, Sequence

from transforms.images.build_counts import build_image_counts
from transforms.images.near_duplicates import (NEAR_DUPLICATES_NAME, NearPair, near_duplicates_lines,
                                               near_duplicates_summary)
from transforms.shardset.manifest_extras import ManifestExtras

__all__ = ["build_manifest_extras", "image_count_fields"]


def image_count_fields(counted) -> dict[str, Any]:
    """The manifest's ``images`` field from the shards' summed ``record_count_keys`` tallies."""
    return {"images": build_image_counts(counted)}


def build_manifest_extras(layout: Any, near_mode: str, distance: int = 0, near_pairs: Sequence[NearPair] = (),
                          over_cap: Sequence[tuple[int, int]] = (), unhashed: Sequence[str] = ()) -> ManifestExtras:
    """A build's manifest extras, from its ``RecordLayout`` and its near-duplicate check
    (``near_duplicates.near_duplicates_summary``; ``near_pairs``: those of the copies kept).

    ``near_mode`` ``off`` removes an earlier ``near_duplicates.jsonl``, as ``report`` does when no pair
    was found and every image compared.
    """
    fields: dict[str, Any] = {"object_labels": tuple(tuple(pair) for pair in layout.object_labels)}
    lines = None
    if near_mode == "reject" or (near_mode == "report" and (near_pairs or over_cap or unhashed)):
        fields["near_duplicates"] = near_duplicates_summary(near_mode, distance, near_pairs, over_cap, len(unhashed))
        lines = near_duplicates_lines(near_pairs, near_mode == "reject")
    return ManifestExtras(fields=fields, files={NEAR_DUPLICATES_NAME: lines}, from_tallies=image_count_fields)
