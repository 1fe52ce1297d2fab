"""Object boxes: parsing, checking, and following the image through EXIF orientation and resize (pure).

Boxes in an input refer to the pixels as stored in the source file (EXIF orientation not applied).
Records carry them as the TF Object Detection API does: corners normalized to [0, 1] of the stored
image, turned with the pixels where ``reencode``/``raw`` apply the EXIF orientation.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Sequence

from transforms.errors import ShardsError

__all__ = ["BBOX_FORMATS", "BOX_POLICIES", "SourceBox", "PlacedBox", "BoxError", "parse_objects",
           "source_geometry", "place_boxes", "ORIENTATION_TAG", "finite_number"]

BBOX_FORMATS = ("xyxy_pixels", "xywh_pixels", "xyxy_normalized")
# What a build does with a box that is not inside its image (``--boxes_outside``, ``place_boxes``).
BOX_POLICIES = ("skip", "clip")
ORIENTATION_TAG = 0x0112
# Box corners may overshoot the image by this much (pixels, or the same share of a
# normalized side) and are then clipped: annotation tools round outwards.
_SLACK_PIXELS = 0.5


class BoxError(ShardsError):
    """A box that cannot be placed (a ``bad_box`` dead letter); the message says which and why."""


@dataclass(frozen=True)
class SourceBox:
    """One object as an input gives it, corners as ``xmin, ymin, xmax, ymax``.

    Attributes:
        xmin, ymin, xmax, ymax: Corners in source pixels, or fractions of its sides if ``normalized``.
        area: Area in source pixels as the input states it (COCO), or None.
        is_crowd: COCO's ``iscrowd`` (0 or 1).
    """

    xmin: float
    ymin: float
    xmax: float
    ymax: float
    label: str
    normalized: bool = False
    area: float | None = None
    is_crowd: int = 0


@dataclass(frozen=True)
class PlacedBox:
    """A box on the stored image: normalized corners, area in stored pixels; ``clipped`` if it was
    clipped to the image."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float
    label: str
    area: float
    is_crowd: int
    clipped: bool = False


def finite_number(value: object, what: str) -> float:
    """``value`` as a float; ``BoxError`` naming it as ``what`` unless it is a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BoxError(f"{what} {value!r} is not a finite number")
    return float(value)


def _corners(bbox: object, bbox_format: str, what: str) -> tuple[float, float, float, float]:
    if not isinstance(bbox, list) or len(bbox) != 4:
        raise BoxError(f"{what}: bbox {bbox!r} is not a list of 4 numbers")
    a, b, c, d = (finite_number(v, f"{what}: bbox value") for v in bbox)
    if bbox_format == "xywh_pixels":
        return a, b, a + c, b + d
    return a, b, c, d


def parse_objects(value: object, bbox_format: str) -> tuple[SourceBox, ...]:
    """Parses a JSON Lines ``objects`` value: ``[{"bbox": [...], "label": ...}, ...]`` (``bbox_format``
    checked by ``inputs.LabelRules``).

    Raises:
        BoxError: The value is malformed; the message names the object.
    """
    if not isinstance(value, list):
        raise BoxError(f"objects {value!r} is not a list")
    boxes = []
    for number, obj in enumerate(value):
        what = f"object {number}"
        if not isinstance(obj, dict):
            raise BoxError(f"{what} is not a JSON object")
        label = obj.get("label")
        if isinstance(label, int) and not isinstance(label, bool):
            label = str(label)
        if not isinstance(label, str) or not label:
            raise BoxError(f"{what} has no usable label: {label!r}")
        area, crowd = obj.get("area"), obj.get("is_crowd", obj.get("iscrowd", 0))
        if crowd not in (0, 1) or isinstance(crowd, float):
            raise BoxError(f"{what}: is_crowd {crowd!r} is not 0 or 1")
        boxes.append(SourceBox(*_corners(obj.get("bbox"), bbox_format, what), label=label,
                               normalized=bbox_format == "xyxy_normalized",
                               area=None if area is None else finite_number(area, f"{what}: area"),
                               is_crowd=int(crowd)))
    return tuple(boxes)


def source_geometry(data: bytes) -> tuple[int, int, int]:
    """``(width, height, exif_orientation)`` of a source image, read from its header (orientation 1
    when it has none or an invalid one)."""
    from PIL import Image  # Pillow is loaded only where images are read

    with Image.open(io.BytesIO(data)) as img:
        try:
            orientation = img.getexif().get(ORIENTATION_TAG, 1)
        except Exception:  # noqa: BLE001 - malformed EXIF: the image codec reports it on decode
            orientation = 1
        return img.width, img.height, orientation if orientation in range(1, 9) else 1


def _orient(u: float, v: float, orientation: int) -> tuple[float, float]:
    """Where the normalized point ``(u, v)`` lands after ``exif_transpose`` for ``orientation``."""
    return {
        1: (u, v),
        2: (1 - u, v),          # mirrored left-right
        3: (1 - u, 1 - v),      # rotated 180
        4: (u, 1 - v),          # mirrored top-bottom
        5: (v, u),              # transposed
        6: (1 - v, u),          # rotated 90 clockwise
        7: (1 - v, 1 - u),      # transversed
        8: (v, 1 - u),          # rotated 90 counter-clockwise
    }[orientation]


def place_boxes(boxes: Sequence[SourceBox], width: int, height: int, orientation: int,
                out_width: int, out_height: int, outside: str = "skip") -> tuple[PlacedBox, ...]:
    """Checks boxes against the source image and places them on the stored image.

    A corner within half a pixel outside the image is clipped. A box that reaches further out is
    skipped (``outside="skip"``, as the Object Detection API's ``create_coco_tf_record`` does) or
    clipped to the image; one without width or height is skipped.

    Args:
        width, height: Size of the source image as stored in its file.
        orientation: EXIF orientation applied to the pixels (1 when none is).
        out_width, out_height: Size of the stored image (after orientation and resize).
    """
    if outside not in BOX_POLICIES:
        raise ValueError(f"outside must be one of {', '.join(BOX_POLICIES)}, got {outside!r}")
    placed = []
    for box in boxes:
        sx, sy = (1.0, 1.0) if box.normalized else (float(width), float(height))
        corners = (box.xmin / sx, box.ymin / sy, box.xmax / sx, box.ymax / sy)
        slack = (_SLACK_PIXELS / width, _SLACK_PIXELS / height)
        inside = all(-s <= c <= 1 + s for c, s in zip(corners, slack * 2))
        if not inside and outside == "skip":
            continue
        x0, y0, x1, y1 = (min(max(c, 0.0), 1.0) for c in corners)
        if not (x0 < x1 and y0 < y1):
            continue  # no width or height (left, or after clipping)
        (ax, ay), (bx, by) = _orient(x0, y0, orientation), _orient(x1, y1, orientation)
        scale = (out_width * out_height) / (width * height)
        area = box.area * scale if box.area is not None else (x1 - x0) * (y1 - y0) * out_width * out_height
        placed.append(PlacedBox(min(ax, bx), min(ay, by), max(ax, bx), max(ay, by), box.label,
                                area, box.is_crowd, clipped=not inside))
    return tuple(placed)
