"""Turn an image and its metadata into the record bytes the build job writes.

``encode_image`` makes the stored image bytes from the source bytes, and ``image_example_parts``
the ``tf.train.Example`` around them, as the bytes before and after the image, so that a writer
never copies the image into a record.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from transforms.images import image_codec as images
from transforms.errors import ImageError
from transforms.images.choices import IMAGE_MODES
from transforms.example.wire import FeatureValues, example_parts
from transforms.images.image_codec import ImageInfo
from transforms.images.orientation import EXIF_ORIENTATION_MODES, ORIENTATION_FEATURE, upright_jpeg
from transforms.images.png_chunks import fix_png_chunks
from transforms.images.tf_rule import tf_shape

__all__ = ["IMAGE_MODES", "EncodeSettings", "encode_image", "image_example_parts", "check_kept_format",
           "tensorflow_view", "passthrough_formats", "TF_KEPT_FORMATS", "image_counts", "image_count_keys",
           "with_png_chunks_fixed", "orientation_spec", "orientation_extra"]

# Source formats the passthrough mode accepts (check_kept_format).
passthrough_formats = ("jpeg", "png", "gif", "bmp", "tiff", "webp")
# Formats the tf mode stores as they are when TensorFlow decodes them (tf_rule);
# every other image becomes a PNG of its first frame.
TF_KEPT_FORMATS = ("jpeg", "png")
# The key of the stored image, the one value a record is written around (image_example_parts).
_ENCODED_KEY = "image/encoded"


@dataclass(frozen=True)
class EncodeSettings:
    """How source images become stored images.

    Attributes:
        mode: ``tf`` (what ``tf.io.decode_image`` decodes, as it is; the rest as PNG),
            ``passthrough``, ``reencode`` or ``raw``.
        validate: A ``VALIDATE_LEVELS`` name (``image_codec.read_image_info``).
        image_format: ``jpeg`` or ``png`` for ``reencode``, at ``jpeg_quality``.
        grayscale: One channel instead of RGB (``reencode``/``raw``).
        resize: ``(width, height)`` or None (``reencode``/``raw``), as ``resize_mode`` says.
        exif_orientation: ``apply``: ``tf`` mode stores images upright; ``keep``: ``tf`` and
            ``passthrough`` store the pixels as the file holds them and records carry
            ``image/orientation``. ``reencode`` and ``raw`` always apply it.
    """

    mode: str = "tf"
    validate: str = "structure"
    image_format: str = "jpeg"
    jpeg_quality: int = 95
    grayscale: bool = False
    resize: tuple[int, int] | None = None
    resize_mode: str = "stretch"
    exif_orientation: str = "apply"

    def __post_init__(self) -> None:
        if self.mode not in IMAGE_MODES:
            raise ValueError(f"image mode must be one of {IMAGE_MODES}, got {self.mode!r}")
        if self.validate not in images.VALIDATE_LEVELS:
            raise ValueError(f"validate must be one of {images.VALIDATE_LEVELS}, got {self.validate!r}")
        if self.image_format not in ("jpeg", "png"):
            raise ValueError(f"image format must be jpeg or png, got {self.image_format!r}")
        if self.resize_mode not in images.RESIZE_MODES:
            raise ValueError(f"resize mode must be one of {images.RESIZE_MODES}, got {self.resize_mode!r}")
        if self.exif_orientation not in EXIF_ORIENTATION_MODES:
            raise ValueError(f"exif orientation must be one of {EXIF_ORIENTATION_MODES}, "
                             f"got {self.exif_orientation!r}")
        if self.exif_orientation == "keep" and self.mode not in ("tf", "passthrough"):
            raise ValueError(f"--exif_orientation keep is for --image_mode tf or passthrough; "
                             f"{self.mode} always applies the orientation")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"jpeg quality must be in 1..100, got {self.jpeg_quality}")


def encode_image(data: bytes, settings: EncodeSettings) -> tuple[bytes, ImageInfo]:
    """Returns the bytes to store for a source image, and what they are.

    Every PNG stored but in ``passthrough`` mode has the colour chunk libpng would warn about fixed
    (``png_chunks``). In ``tf`` mode with ``exif_orientation="apply"``, an image with an EXIF
    orientation other than 1 is stored upright: a JPEG that TensorFlow decodes as a re-encoded JPEG,
    any other as a PNG.

    Raises:
        ImageError: The source is not a usable image.
    """
    if settings.mode in ("tf", "passthrough"):
        info = images.read_image_info(data, settings.validate)
        check_kept_format(info, settings.mode)
        if settings.mode == "passthrough":
            return data, tensorflow_view(data, info)
        turn = info.orientation if settings.exif_orientation == "apply" else 1
        if info.format in TF_KEPT_FORMATS:
            kept = tensorflow_view(data, info)
            if kept.tf_decodes and (kept.height, kept.width) == (info.height, info.width):
                if turn == 1:
                    return with_png_chunks_fixed(data, kept) if kept.format == "png" else (data, kept)
                upright = upright_jpeg(data, turn) if kept.format == "jpeg" else None
                if upright is not None:
                    shape = tf_shape(upright)
                    return upright, replace(kept, height=shape.height, width=shape.width,
                                            channels=shape.channels, upright="jpeg_reencoded")
        png, left = images.upright_first_frame_png(data, upright=turn != 1)
        shape = tf_shape(png)
        turned = info.orientation != 1 and left == 1  # by us, or by the decoder (TIFF)
        return with_png_chunks_fixed(png, ImageInfo("png", shape.height, shape.width, shape.channels,
                                                    source_format=info.format,
                                                    orientation=info.orientation if turned else left,
                                                    upright="lossless" if turned else ""))
    if settings.mode == "reencode":
        stored, info = images.reencode_image(data, settings.image_format, settings.jpeg_quality,
                                             settings.grayscale, settings.resize, settings.resize_mode)
        return with_png_chunks_fixed(stored, info) if info.format == "png" else (stored, info)
    return images.raw_pixels(data, settings.grayscale, settings.resize, settings.resize_mode)


def orientation_spec(settings: EncodeSettings) -> dict[str, str]:
    """The feature spec's ``image/orientation`` entry, where records carry it (``--exif_orientation keep``)."""
    return {ORIENTATION_FEATURE: "int64"} if settings.exif_orientation == "keep" else {}


def orientation_extra(settings: EncodeSettings, info: ImageInfo) -> tuple[tuple[str, str, tuple], ...]:
    """The ``image/orientation`` key of a record (``(name, kind, values)``), where records carry it:
    the orientation the stored pixels still need."""
    if not orientation_spec(settings):
        return ()
    return ((ORIENTATION_FEATURE, "int64", (1 if info.upright else info.orientation,)),)


def with_png_chunks_fixed(png: bytes, info: ImageInfo) -> tuple[bytes, ImageInfo]:
    """``png`` with the colour chunk libpng warns about fixed, and ``info`` naming the fix."""
    fixed, fix = fix_png_chunks(png)
    return (fixed, replace(info, png_fix=fix)) if fix else (png, info)


def check_kept_format(info: ImageInfo, mode: str) -> None:
    """Refuses (``unsupported_format``) a source format that ``--image_mode passthrough`` does not
    store; ``tf`` mode takes every format Pillow reads."""
    if mode != "tf" and info.format not in passthrough_formats:
        raise ImageError("unsupported_format",
                         f"{info.format} is not read in --image_mode {mode} "
                         f"({', '.join(passthrough_formats)} are); use --image_mode reencode")


def tensorflow_view(data: bytes, info: ImageInfo) -> ImageInfo:
    """``info`` with the size and channels ``tf.io.decode_image`` yields for ``data``, or with
    ``tf_decodes=False`` when it cannot decode them (``tf_rule``)."""
    try:
        shape = tf_shape(data)
    except ImageError:
        return replace(info, source_format=info.format, tf_decodes=False)
    return ImageInfo(info.format, shape.height, shape.width, shape.channels,
                     source_format=info.format, orientation=info.orientation)


def image_count_keys(info: ImageInfo) -> list[tuple[str, str]]:
    """The manifest's ``images`` counters one record adds to (see ``image_counts``)."""
    source = info.source_format or info.format
    keys = [("source_formats", source)]
    if info.format != source and info.format != "raw":
        keys.append(("converted", source))
    if not info.tf_decodes:
        keys.append(("tf_undecodable", source))
    if info.png_fix:
        keys.append(("png_chunks_fixed", info.png_fix))
    if info.upright:
        keys.append(("exif_oriented", info.upright))
    elif info.orientation != 1:
        keys.append(("exif_orientation_kept", str(info.orientation)))
    return keys


def image_counts(counted: Iterable[tuple[tuple[str, str], int]]) -> dict[str, dict[str, int]]:
    """The manifest's ``images`` object (docs/output.md says what each counter counts) from
    ``((counter, format), records)`` pairs."""
    out: dict[str, dict[str, int]] = {name: {} for name in ("source_formats", "converted", "tf_undecodable",
                                                            "png_chunks_fixed", "exif_oriented", "exif_orientation_kept")}
    for (counter, fmt), records in counted:
        out[counter][fmt] = out[counter].get(fmt, 0) + records
    return {name: dict(sorted(by_format.items())) for name, by_format in out.items()}


def image_example_parts(image_bytes: int, info: ImageInfo, label_index: int, label_text: str,
                        filename: str, sha256_hex: str, extra: tuple = ()) -> tuple[bytes, bytes]:
    """Returns ``(head, tail)``: ``head + image + tail`` is the serialized ``tf.train.Example`` of a stored
    image of ``image_bytes`` bytes (a plan measures it without the stored bytes; ``extra``:
    ``annotations.record_extras``)."""
    return example_parts({
        "image/format": info.format,
        "image/height": info.height,
        "image/width": info.width,
        "image/channels": info.channels,
        "image/class/label": label_index,
        "image/class/text": label_text,
        "image/filename": filename,
        "image/key/sha256": sha256_hex,
        "image/source_format": info.source_format or info.format,
        **{name: FeatureValues(kind, values) for name, kind, values in extra},
    }, _ENCODED_KEY, image_bytes)
