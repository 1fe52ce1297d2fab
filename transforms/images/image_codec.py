"""Image handling with Pillow: recognise (by content, never by extension), validate, measure and
re-encode images, bytes in and bytes out.

The policies (decompression bombs, animations, 16-bit and transparent images) are in docs/images.md.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from transforms.errors import ImageError
from transforms.images.choices import RESIZE_MODES, VALIDATE_LEVELS
from transforms.images.library_messages import naming_library_messages
from transforms.images.orientation import exif_orientation, turned_upright
from transforms.images.structure import STRUCTURE_FORMATS, JpegFrame, check_jpeg, check_png, check_structure

__all__ = [
    "VALIDATE_LEVELS", "RESIZE_MODES", "resized", "HEAD_BYTES", "ImageInfo", "read_image_info", "could_be_image", "has_image_magic",
    "reencode_image", "raw_pixels", "channels_of", "decode_size", "decode_rgb", "upright_first_frame_png",
]

# How much of a file is read to decide whether it may be an image before the rest is read.
HEAD_BYTES = 64 * 1024

# Pillow format name -> image/format value. MPO is camera JPEG with extra frames.
_FORMATS = {"JPEG": "jpeg", "MPO": "jpeg", "PNG": "png", "GIF": "gif", "BMP": "bmp", "TIFF": "tiff", "WEBP": "webp"}
_CHANNELS = {"1": 1, "L": 1, "I": 1, "I;16": 1, "I;16B": 1, "I;16L": 1, "F": 1,
             "LA": 2, "La": 2, "RGB": 3, "YCbCr": 3, "LAB": 3, "HSV": 3,
             "RGBA": 4, "RGBa": 4, "CMYK": 4}


@dataclass(frozen=True)
class ImageInfo:
    """What a record says about its image.

    Attributes:
        format: ``image/format`` value (``jpeg``, ``png``, ..., or ``raw``); height and width in pixels.
        channels: Channels a decoder yields (see ``channels_of``).
        source_format: Format of the source file; empty when it is ``format``.
        tf_decodes: Whether ``tf.io.decode_image`` decodes the stored bytes to this size (``tf_rule``).
        png_fix: The ``png_chunks.PNG_CHUNK_FIXES`` name of what was fixed in the stored PNG's
            colour chunks; empty when nothing was.
        orientation: The source's EXIF orientation, 1-8; where ``upright`` is empty, the
            orientation the stored pixels need to be shown upright (``image/orientation``).
        upright: How the stored pixels were turned upright (an ``orientation.UPRIGHT_HOW`` name);
            empty when they were not.
    """

    format: str
    height: int
    width: int
    channels: int
    source_format: str = ""
    tf_decodes: bool = True
    png_fix: str = ""
    orientation: int = 1
    upright: str = ""


def channels_of(img: Image.Image) -> int:
    """The number of channels ``tf.io.decode_image`` gives an image (GIF and palette images: RGB,
    or RGBA for a palette with transparency)."""
    if img.format == "GIF":
        return 3
    if img.mode in ("P", "PA"):
        return 4 if img.mode == "PA" or "transparency" in img.info else 3
    return _CHANNELS.get(img.mode, len(img.getbands()))


def _reason(err: Exception) -> str:
    """Dead-letter reason for a Pillow failure: ``truncated`` or ``undecodable``."""
    text = str(err).lower()
    return "truncated" if "truncated" in text or isinstance(err, EOFError) else "undecodable"


def _open(data: bytes) -> Image.Image:
    if not data:
        raise ImageError("empty_file", "file has zero bytes")
    try:
        img = Image.open(io.BytesIO(data))
    except UnidentifiedImageError as err:
        raise ImageError("not_an_image", f"not a recognised image format ({len(data)} bytes)") from err
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise ImageError("decompression_bomb", str(err)) from err
    except Exception as err:  # Pillow's plugins raise many types on malformed headers.
        raise ImageError(_reason(err), f"{type(err).__name__}: {err}") from err
    _check_pixels(img, "image")
    return img


def _check_pixels(img: Image.Image, what: str) -> None:
    """Refuses an image (or frame) over Pillow's decompression-bomb limit, where Pillow only warns."""
    if not _within_pixel_limit(img.width, img.height):
        raise ImageError("decompression_bomb", f"{what} declares {img.width}x{img.height} = "
                         f"{img.width * img.height} pixels, over the limit of {Image.MAX_IMAGE_PIXELS}")


def _load(img: Image.Image) -> None:
    try:
        img.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise ImageError("decompression_bomb", str(err)) from err
    except Exception as err:  # Pillow's decoders raise many types on malformed data.
        raise ImageError(_reason(err), f"{type(err).__name__}: {err}") from err


def has_image_magic(prefix: bytes) -> bool:
    """True if one of Pillow's formats claims a file by its first 16 bytes, as ``Image.open`` checks
    first (formats without a magic number, such as TGA, never do)."""
    prefix = prefix[:16]
    Image.preinit()  # the common formats; the others only for a file none of those claims
    if any(accept(prefix) for accept in _magic_checks()):
        return True
    Image.init()
    return any(accept(prefix) for accept in _magic_checks())


# Pillow's magic number checks, the formats a dataset mostly holds first (a few others,
# e.g. BUFR and GBR, take microseconds each); rebuilt when plugins register.
_COMMON_FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF", "MPO")
_magic: tuple[int, tuple] = (-1, ())


def _magic_checks() -> tuple:
    global _magic
    if _magic[0] != len(Image.OPEN):
        ordered = sorted(Image.OPEN.items(), key=lambda item: item[0] not in _COMMON_FORMATS)
        _magic = (len(Image.OPEN), tuple(accept for _, (_, accept) in ordered if accept is not None))
    return _magic[1]


@naming_library_messages
def could_be_image(head: bytes) -> bool:
    """Decides from a file's first bytes (``HEAD_BYTES``, or the whole file) whether reading the
    rest could yield an image: a magic number, or a header Pillow identifies. False rejects a video,
    an archive or a text file from its head, never read whole."""
    if has_image_magic(head):
        return True
    try:
        with Image.open(io.BytesIO(head)):
            return True
    except UnidentifiedImageError:
        return False
    except Exception:  # Pillow's plugins raise many types on malformed headers; the full read decides
        return True


@naming_library_messages
def read_image_info(data: bytes, validate: str = "structure") -> ImageInfo:
    """Recognises an image by content and returns its stored format and size.

    Args:
        validate: A ``VALIDATE_LEVELS`` name (docs/images.md, "Validation levels", says what each checks).

    Returns:
        The image's ``ImageInfo`` (format as TensorFlow names it, size as the file stores it).

    Raises:
        ImageError: The bytes are not a usable image; ``reason`` says why.
    """
    if validate not in VALIDATE_LEVELS:
        raise ValueError(f"validate must be one of {VALIDATE_LEVELS}, got {validate!r}")
    frame = None
    if validate in ("structure", "header") and data[:3] == b"\xff\xd8\xff":
        frame = _checked_jpeg(data, headers_only=validate == "header")
        if frame is not None and frame.plain and _within_pixel_limit(frame.width, frame.height):
            return ImageInfo("jpeg", frame.height, frame.width, frame.components)
    img = _open(data)
    width, height = img.size
    if width <= 0 or height <= 0:
        raise ImageError("undecodable", f"image declares size {width}x{height}")
    info = ImageInfo(_format_of(img), height, width, channels_of(img), orientation=exif_orientation(img))
    if validate == "structure" and info.format in STRUCTURE_FORMATS:
        if frame is None or info.format != "jpeg":  # not checked whole above
            check_structure(data, info.format)
        if not (img.format == "PNG" and getattr(img, "is_animated", False)):
            return info
        # An APNG's first frame is also decoded: Pillow refuses some broken frame sequences
        # there, which TensorFlow (reading the default image) ignores but verify would not.
    if validate in ("decode", "full") and info.format == "png":
        check_png(data, crcs=False)
    if validate == "decode" and img.format in ("JPEG", "MPO"):
        img.draft(img.mode, (max(width // 8, 1), max(height // 8, 1)))
    if validate != "header":
        _load(img)
    if validate == "full":
        _load_later_frames(img)
    return info


def _checked_jpeg(data: bytes, headers_only: bool = False) -> JpegFrame | None:
    """``check_jpeg``'s frame of a JPEG whose structure (``headers_only``: up to its first scan) is
    sound, or None where it is not (Pillow's reading comes first then, and names the fault as it always did).

    A sound, ``plain`` JPEG (most photos: no EXIF, 8-bit, L or RGB) is what Pillow's header would say,
    without opening it (``tests/images/test_image_codec.py`` holds the two to the same answer over
    the messy corpus and damaged files; BENCHMARKS.md, "Where a build's marginal CPU goes")."""
    try:
        return check_jpeg(data, headers_only)
    except ImageError:
        return None


def _within_pixel_limit(width: int, height: int) -> bool:
    """Whether an image of this size is within Pillow's decompression-bomb limit (``_check_pixels`` refuses
    one over it)."""
    limit = Image.MAX_IMAGE_PIXELS
    return limit is None or width * height <= limit


def _load_later_frames(img: Image.Image) -> None:
    """Decodes the frames after the first of an animation (passthrough stores them all)."""
    try:
        for index in range(1, getattr(img, "n_frames", 1)):
            img.seek(index)
            _check_pixels(img, f"animation frame {index}")
            img.load()
    except ImageError:
        raise
    except Exception as err:  # Pillow's decoders raise many types on malformed data.
        raise ImageError(_reason(err), f"animation frame: {type(err).__name__}: {err}") from err


@naming_library_messages
def decode_size(data: bytes) -> ImageInfo:
    """Decodes an image's first frame at full resolution; returns its format, size and EXIF orientation."""
    img = _open(data)
    orientation = exif_orientation(img)
    _load(img)
    width, height = img.size
    return ImageInfo(_format_of(img), height, width, channels_of(img), orientation=orientation)


# Pillow mode -> the PNG-writable mode holding the same values (None: unchanged).
_PNG_MODES = {"1": None, "L": None, "LA": None, "RGB": None, "RGBA": None, "P": None,
              "I;16": None, "PA": "RGBA", "La": "LA", "RGBa": "RGBA", "RGBX": "RGB",
              "CMYK": "RGB", "YCbCr": "RGB", "LAB": "RGB", "HSV": "RGB"}


def _converted(img: Image.Image, mode: str) -> Image.Image:
    """``img.convert(mode)``, without an ICC profile where ``img`` is CMYK or LAB.

    Pillow keeps a CMYK image's profile, which cannot describe RGB pixels (libpng refuses it), and converts
    LAB through an sRGB profile it makes with the current time (the same input gave other bytes a second
    later). The converted pixels are sRGB, which an image without a profile means.
    """
    out = img.convert(mode)
    if img.mode in ("CMYK", "LAB"):
        out.info.pop("icc_profile", None)
    return out


def _png_writable(img: Image.Image) -> Image.Image:
    """The image in a mode PNG stores: 16-bit stays 16-bit (32-bit integers clipped to it), floats are
    clipped to 0..255, colour spaces become RGB."""
    if img.mode in ("I;16B", "I;16L", "I;16N", "I"):
        arr = np.asarray(img)
        return Image.fromarray(np.clip(arr, 0, 65535).astype(np.uint16))
    if img.mode == "F":
        return Image.fromarray(np.clip(np.asarray(img), 0, 255).astype(np.uint8), mode="L")
    if img.mode in _PNG_MODES:
        target = _PNG_MODES[img.mode]
        return img if target is None else _converted(img, target)
    return _converted(img, "RGBA" if "A" in img.getbands() else "RGB")


@naming_library_messages
def upright_first_frame_png(data: bytes, upright: bool) -> tuple[bytes, int]:
    """Converts an image's first frame to PNG (no EXIF block), keeping its pixel values, turned upright
    (as ``ImageOps.exif_transpose`` does) if ``upright``. Palette images stay palette PNG, 16-bit
    images 16-bit.

    Returns:
        The PNG, and the EXIF orientation its pixels still need to be shown upright: 1 when turned,
        or when the decoder applied it (Pillow's TIFF decoder does); else the source's.
    """
    img = _open(data)
    _load(img)
    left = exif_orientation(img)  # after decoding: a decoder may have applied it
    img = _png_writable(img)
    if upright and left != 1:
        img, left = turned_upright(img, left), 1
    if img.mode != "P":  # a colour key (TensorFlow ignores it) may not suit the new mode
        img.info.pop("transparency", None)
    out = io.BytesIO()
    try:
        img.save(out, format="PNG")
    except (OSError, ValueError) as err:
        raise ImageError("undecodable", f"cannot store as PNG: {type(err).__name__}: {err}") from err
    return out.getvalue(), left


def _to_8bit(img: Image.Image, grayscale: bool) -> Image.Image:
    """Converts any decoded mode to RGB (or L), scaling 16-bit, flattening alpha on white."""
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        arr = np.asarray(img, dtype=np.uint32 if img.mode == "I" else np.uint16)
        if img.mode == "I":
            arr = np.clip(arr, 0, 65535)
        img = Image.fromarray((arr >> 8).astype(np.uint8), mode="L")
    elif img.mode == "F":
        img = Image.fromarray(np.clip(np.asarray(img), 0, 255).astype(np.uint8), mode="L")
    if img.mode in ("P", "PA", "LA", "La", "RGBA", "RGBa"):
        if img.mode == "P" and "transparency" not in img.info:
            img = img.convert("RGB")
        else:
            rgba = img.convert("RGBA")
            background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            img = Image.alpha_composite(background, rgba).convert("RGB")
    target = "L" if grayscale else "RGB"
    return img if img.mode == target else _converted(img, target)


def _format_of(img: Image.Image) -> str:
    return _FORMATS.get(img.format or "", (img.format or "unknown").lower())


def resized(img: Image.Image, size: tuple[int, int], mode: str = "stretch") -> Image.Image:
    """Returns ``img`` resized to ``size`` (width, height) as ``mode`` says (see ``RESIZE_MODES``)."""
    if mode == "stretch":
        return img if img.size == size else img.resize(size, Image.Resampling.BICUBIC)
    if mode == "fit":
        return ImageOps.contain(img, size, Image.Resampling.BICUBIC)
    if mode == "crop":
        return ImageOps.fit(img, size, Image.Resampling.BICUBIC, centering=(0.5, 0.5))
    raise ValueError(f"resize mode must be one of {RESIZE_MODES}, got {mode!r}")


def _decoded(data: bytes, grayscale: bool, resize: tuple[int, int] | None,
             resize_mode: str = "stretch") -> tuple[Image.Image, str]:
    """The first frame as 8-bit RGB or L, and the source's format."""
    img = _open(data)
    source_format = _format_of(img)
    _load(img)  # first frame of an animation
    try:
        img = ImageOps.exif_transpose(img)
    except Exception as err:  # malformed EXIF blocks raise assorted types
        raise ImageError("undecodable", f"bad EXIF orientation data: {err}") from err
    img = _to_8bit(img, grayscale)
    if resize is not None:
        img = resized(img, resize, resize_mode)
    return img, source_format


@naming_library_messages
def decode_rgb(data: bytes) -> Image.Image:
    """Decodes an image (first frame) to 8-bit RGB, EXIF orientation applied, for display."""
    return _decoded(data, grayscale=False, resize=None)[0]


@naming_library_messages
def reencode_image(data: bytes, image_format: str = "jpeg", quality: int = 95,
                   grayscale: bool = False,
                   resize: tuple[int, int] | None = None,
                   resize_mode: str = "stretch") -> tuple[bytes, ImageInfo]:
    """Decodes an image as ``raw_pixels`` does and encodes it again as ``jpeg`` (at ``quality``, 1-100)
    or ``png``; returns the encoded bytes and their ``ImageInfo``."""
    if image_format not in ("jpeg", "png"):
        raise ValueError(f"image_format must be jpeg or png, got {image_format!r}")
    img, source_format = _decoded(data, grayscale, resize, resize_mode)
    img.info.pop("transparency", None)  # composited over white; a kept key breaks PNG's writer
    out = io.BytesIO()
    if image_format == "jpeg":
        img.save(out, format="JPEG", quality=quality)
    else:
        img.save(out, format="PNG")
    return out.getvalue(), ImageInfo(image_format, img.height, img.width, 1 if grayscale else 3,
                                     source_format=source_format)


@naming_library_messages
def raw_pixels(data: bytes, grayscale: bool = False, resize: tuple[int, int] | None = None,
               resize_mode: str = "stretch") -> tuple[bytes, ImageInfo]:
    """Decodes an image's first frame, EXIF orientation applied, to uint8 pixels (row-major height x width x
    channels: RGB, or one if ``grayscale``), resized to ``resize`` (``resized``), and their ``ImageInfo``."""
    img, source_format = _decoded(data, grayscale, resize, resize_mode)
    return img.tobytes(), ImageInfo("raw", img.height, img.width, 1 if grayscale else 3, source_format=source_format)
