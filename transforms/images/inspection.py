"""Inspecting one input image once its bytes are read: checked, encoded, measured, placed in a split."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Mapping

from transforms.errors import ImageError
from transforms.example.features import FeatureValueError
from transforms.images.annotations import RecordLayout, image_extras
from transforms.images.items import SPLIT_BY_CONTENT, ImageMeta, SourceImage
from transforms.images.objects import BoxError
from transforms.images.perceptual import perceptual_hash
from transforms.images.records import EncodeSettings, encode_image, image_example_parts, orientation_extra
from transforms.images.survey import survey_image
from transforms.shardset.dead_letters import DeadLetter
from transforms.shardset.planning import order_key, split_by_content
from transforms.tfrecord.framing import framed_size

__all__ = ["Inspected", "unknown_label", "inspect_image"]


@dataclass(frozen=True)
class Inspected:
    """What inspecting one input gave: its ImageMeta or DeadLetter, and the bytes read (None: unread)."""

    output: ImageMeta | DeadLetter
    bytes_read: int | None
    parts: tuple[bytes, bytes, bytes] | None = None  # the record's pieces, for the run file
    exact: bool = True  # a survey's record size is exact, not an estimate


def unknown_label(source: SourceImage, index_of: Mapping[str, int]) -> DeadLetter | None:
    """The ``unknown_label`` dead letter of an input naming a class not in the label list, or None."""
    unknown = [name for name in source.class_names() if name not in index_of]
    if unknown:
        return DeadLetter(source.path, "unknown_label", f"class {unknown[0]!r} is not in the label list")
    return None


def inspect_image(source: SourceImage, data: bytes, index_of: Mapping[str, int], layout: RecordLayout | None,
                  settings: EncodeSettings, seed: int, fractions: Mapping[str, float],
                  hashed: bool = False, survey: bool = False) -> Inspected:
    """Inspects one input whose bytes are ``data``; a ``SPLIT_BY_CONTENT`` split is chosen here.

    Args:
        layout: The build's ``RecordLayout``, or None for plain image records.
        seed: Shuffle seed for the order key.
        fractions: Split name -> fraction (``--split_fractions``).
        hashed: The metadata carries the perceptual hash of the pixels (None for pixels that do not decode).
        survey: As a plan does: check the header only and measure the record a build would make
            (``images.survey``), exact or estimated; no parts.
    """
    index = index_of.get(source.label, 0)  # an image with no label of its own: see extras
    try:
        surveyed = survey_image(data, settings) if survey else None
        stored, info = (b"", surveyed.info) if surveyed else encode_image(data, settings)
        extra = image_extras(source, layout, index_of, data, info.width, info.height,
                             pixels_transformed=settings.mode in ("reencode", "raw") or bool(info.upright),
                             cropped=bool(settings.resize) and settings.resize_mode == "crop",
                             more=orientation_extra(settings, info))
    except ImageError as err:
        return Inspected(DeadLetter(source.path, err.reason, err.detail), len(data))
    except BoxError as err:
        return Inspected(DeadLetter(source.path, "bad_box", str(err)), len(data))
    except FeatureValueError as err:
        return Inspected(DeadLetter(source.path, "bad_feature", str(err)), len(data))
    digest = hashlib.sha256(data).digest()
    sha256 = digest.hex()
    if source.split == SPLIT_BY_CONTENT:
        source = dataclasses.replace(source, split=split_by_content(sha256, fractions))
    size = surveyed.stored_bytes if surveyed else len(stored)
    head, tail = image_example_parts(size, info, index, source.label, source.relpath, sha256, extra)
    phash = None
    if hashed:
        with contextlib.suppress(ImageError):  # not hashed: not compared; the build counts it (images_not_hashed)
            phash = perceptual_hash(data)
    meta = ImageMeta(source=source, label_index=index, sha256=sha256, info=info,
                     record_size=framed_size(len(head) + size + len(tail)),
                     order_key=order_key(seed, digest), extra=extra, phash=phash)
    if surveyed:
        return Inspected(meta, len(data), exact=surveyed.exact)
    return Inspected(meta, len(data), (head, stored, tail))
