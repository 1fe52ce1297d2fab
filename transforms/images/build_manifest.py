"""What a build adds to the shard sink's manifest: object classes, image counts, near-duplicates (no Beam).

``build_manifest_extras`` makes the ``ManifestExtras`` a build hands to ``PublishShards``. Besides
``records.image_counts``, a build counts the stored images' formats and channels (tfds's ``Image``
feature is declared from them) and the boxes not inside their image (``record_count_keys``).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from transforms.images.near_duplicates import (NEAR_DUPLICATES_NAME, NearPair, near_duplicates_lines,
                                               near_duplicates_summary)
from transforms.images.records import image_count_keys, image_counts
from transforms.shardset.manifest_extras import ManifestExtras

__all__ = ["build_manifest_extras", "image_count_fields", "record_count_keys"]

_OWN = ("stored_formats", "channels", "boxes")


def record_count_keys(meta) -> list[tuple[str, str]]:
    """The ``images`` counters one ``ImageMeta`` adds to, a key once per count."""
    info = meta.info
    keys = image_count_keys(info) + [("stored_formats", info.format), ("channels", str(info.channels))]
    given = len(meta.source.objects or ())
    if given:
        written = next((len(values) for name, _, values in meta.extra if name == "image/object/class/label"), 0)
        keys += [("boxes", "skipped")] * (given - written)
        keys += [("boxes", "clipped")] * getattr(meta.extra, "clipped", 0)  # annotations.PlacedExtras
    return keys


def image_count_fields(counted: Iterable[tuple[tuple[str, str], int]]) -> dict[str, Any]:
    """The manifest's ``images`` field from the shards' summed ``record_count_keys`` tallies, ``((counter,
    value), count)`` pairs."""
    counted = list(counted)
    out = image_counts(item for item in counted if item[0][0] not in _OWN)
    own: dict[str, dict[str, int]] = {name: {} for name in _OWN}
    for (counter, value), count in counted:
        if counter in own:
            own[counter][value] = own[counter].get(value, 0) + count
    out.update((name, dict(sorted(values.items()))) for name, values in own.items() if values)
    return {"images": out}


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
