"""The manifest's ``images`` counts of a build: the image counters, and what readers need to know (pure).

Besides ``records.image_counts``, a build counts the stored images' formats and channels (tfds's
``Image`` feature is declared from them) and the boxes not inside their image.
"""

from __future__ import annotations

from typing import Iterable

from transforms.images.records import image_count_keys, image_counts

__all__ = ["record_count_keys", "build_image_counts"]

_OWN = ("stored_formats", "channels", "boxes")
_OBJECT_LABEL_KEY = "image/object/class/label"


def record_count_keys(meta) -> list[tuple[str, str]]:
    """The ``images`` counters one ``ImageMeta`` adds to, a key once per count."""
    info = meta.info
    keys = image_count_keys(info) + [("stored_formats", info.format), ("channels", str(info.channels))]
    given = len(meta.source.objects or ())
    if given:
        written = next((len(values) for name, _, values in meta.extra if name == _OBJECT_LABEL_KEY), 0)
        keys += [("boxes", "skipped")] * (given - written)
        keys += [("boxes", "clipped")] * getattr(meta.extra, "clipped", 0)  # annotations.PlacedExtras
    return keys


def build_image_counts(counted: Iterable[tuple[tuple[str, str], int]]) -> dict[str, dict[str, int]]:
    """The manifest's ``images`` object from ``((counter, value), count)`` pairs (``record_count_keys``)."""
    counted = list(counted)
    out = image_counts(item for item in counted if item[0][0] not in _OWN)
    own: dict[str, dict[str, int]] = {name: {} for name in _OWN}
    for (counter, value), count in counted:
        if counter in own:
            own[counter][value] = own[counter].get(value, 0) + count
    out.update((name, dict(sorted(values.items()))) for name, values in own.items() if values)
    return out
