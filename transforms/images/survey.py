"""What a plan learns of one input from its header: usable or not, and the record it would make (pure).

A plan runs the checks of ``--validate header`` and the build's format rule, without decoding
pixels (a build checks more, so it may reject inputs a plan accepts). The stored image's length is
exact where a build stores the source bytes as they are (or ``raw`` pixels), an estimate where it
encodes them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from transforms.images import image_codec as codec
from transforms.images.image_codec import ImageInfo
from transforms.images.objects import source_geometry
from transforms.images.orientation import SWAPS_SIDES
from transforms.images.records import (TF_KEPT_FORMATS, EncodeSettings, check_kept_format,
                                       tensorflow_view, with_png_chunks_fixed)

__all__ = ["SurveyedImage", "survey_image", "stored_size", "PNG_BYTES_PER_RAW_BYTE"]

# A PNG that ``tf`` mode makes of another format is estimated at this share of its raw pixel
# bytes (photos compress losslessly to roughly half; flat drawings to far less).
PNG_BYTES_PER_RAW_BYTE = 0.5


@dataclass(frozen=True)
class SurveyedImage:
    """The record a build would make of one input, as far as its header tells: the stored image's
    ``ImageInfo`` and the bytes of its ``image/encoded``, ``exact`` or an estimate."""

    info: ImageInfo
    stored_bytes: int
    exact: bool


def stored_size(width: int, height: int, resize: tuple[int, int] | None,
                resize_mode: str = "stretch") -> tuple[int, int]:
    """``(width, height)`` of an image of ``width`` x ``height`` after ``--resize``
    (``image_codec.resized``)."""
    if resize is None or resize_mode != "fit":
        return resize or (width, height)
    box_w, box_h = resize
    if width / height > box_w / box_h:
        return box_w, max(1, round(height / width * box_w))
    if width / height < box_w / box_h:
        return max(1, round(width / height * box_h)), box_h
    return box_w, box_h


def survey_image(data: bytes, settings: EncodeSettings) -> SurveyedImage:
    """Checks an input's header and returns the record a build with ``settings`` would make.

    Raises:
        ImageError: The header shows the input is not usable.
    """
    info = codec.read_image_info(data, "header")
    if settings.mode in ("tf", "passthrough"):
        check_kept_format(info, settings.mode)
        if settings.mode == "passthrough":
            return SurveyedImage(tensorflow_view(data, info), len(data), True)
        turn = info.orientation if settings.exif_orientation == "apply" else 1
        width, height = (info.height, info.width) if turn in SWAPS_SIDES else (info.width, info.height)
        if info.format in TF_KEPT_FORMATS:
            kept = tensorflow_view(data, info)
            if kept.tf_decodes and (kept.height, kept.width) == (info.height, info.width):
                if turn != 1 and kept.format == "jpeg" and info.channels in (1, 3):  # not CMYK
                    # re-encoded upright, with the source's tables: about as long
                    return SurveyedImage(replace(kept, height=height, width=width, upright="jpeg_reencoded"),
                                         len(data), False)
                if turn == 1:  # a PNG's colour chunk libpng warns about is fixed, as a build does
                    stored, kept = with_png_chunks_fixed(data, kept) if kept.format == "png" else (data, kept)
                    return SurveyedImage(kept, len(stored), True)
        raw = info.width * info.height * info.channels
        return SurveyedImage(ImageInfo("png", height, width, info.channels, source_format=info.format,
                                       orientation=info.orientation, upright="lossless" if turn != 1 else ""),
                             int(raw * PNG_BYTES_PER_RAW_BYTE), False)
    width, height, orientation = source_geometry(data)
    if orientation in SWAPS_SIDES:  # reencode and raw apply the EXIF orientation
        width, height = height, width
    out_w, out_h = stored_size(width, height, settings.resize, settings.resize_mode)
    channels = 1 if settings.grayscale else 3
    if settings.mode == "raw":
        return SurveyedImage(ImageInfo("raw", out_h, out_w, channels, source_format=info.format),
                             out_w * out_h * channels, True)
    # reencode: the source's bytes per pixel, scaled to the stored size
    scaled = len(data) * (out_w * out_h) / max(1, width * height)
    return SurveyedImage(ImageInfo(settings.image_format, out_h, out_w, channels, source_format=info.format),
                         int(scaled), False)
