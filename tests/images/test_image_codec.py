"""Unit tests for transforms.images.image_codec on small real files made by tests/imagegen.py."""

from __future__ import annotations

import io
import struct
import tracemalloc
from dataclasses import replace
from typing import Callable

import numpy as np
import pytest
from PIL import Image

from tests import imagegen
from transforms.images import image_codec as images
from transforms.errors import ImageError
from transforms.images.image_codec import VALIDATE_LEVELS, ImageInfo

# id -> (bytes, expected ImageInfo). Sizes are (width, height) in imagegen, ImageInfo is (h, w).
_GRAY16 = np.array([[0, 255, 256, 32768, 65535], [1, 4096, 40000, 65280, 65279]], dtype=np.uint16)

CASES: dict[str, tuple[Callable[[], bytes], ImageInfo]] = {
    "jpeg_rgb": (lambda: imagegen.jpeg("RGB"), ImageInfo("jpeg", 24, 32, 3)),
    "jpeg_gray": (lambda: imagegen.jpeg("L"), ImageInfo("jpeg", 24, 32, 1)),
    "jpeg_cmyk": (lambda: imagegen.jpeg("CMYK"), ImageInfo("jpeg", 24, 32, 4)),
    "jpeg_odd_size": (lambda: imagegen.jpeg("RGB", size=(17, 9)), ImageInfo("jpeg", 9, 17, 3)),
    # read_image_info gives the size the file stores and the EXIF orientation (tf mode applies it).
    "jpeg_exif6": (lambda: imagegen.jpeg("RGB", exif_orientation=6), ImageInfo("jpeg", 24, 32, 3, orientation=6)),
    "png_rgb": (lambda: imagegen.png("RGB"), ImageInfo("png", 24, 32, 3)),
    "png_rgba": (lambda: imagegen.png("RGBA"), ImageInfo("png", 24, 32, 4)),
    "png_gray": (lambda: imagegen.png("L"), ImageInfo("png", 24, 32, 1)),
    "png_gray_alpha": (lambda: imagegen.png("LA"), ImageInfo("png", 24, 32, 2)),
    "png_palette": (lambda: imagegen.png("P"), ImageInfo("png", 24, 32, 3)),
    "png_palette_transparent": (lambda: imagegen.png("P", transparency=True), ImageInfo("png", 24, 32, 4)),
    "png_16bit": (lambda: imagegen.png_16bit(_GRAY16), ImageInfo("png", 2, 5, 1)),
    "gif_animated": (lambda: imagegen.gif_animated(3), ImageInfo("gif", 12, 16, 3)),
    "bmp": (lambda: imagegen.bmp(), ImageInfo("bmp", 10, 20, 3)),
    "tiff": (lambda: imagegen.tiff(), ImageInfo("tiff", 10, 20, 3)),
    "webp": (lambda: imagegen.webp(), ImageInfo("webp", 10, 20, 3)),
}


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return {name: make() for name, (make, _) in CASES.items()}


def test_generated_files_are_what_the_table_says(files: dict[str, bytes]) -> None:
    # Guards the table itself: Pillow must see the mode each case is meant to exercise.
    modes = {name: Image.open(io.BytesIO(data)).mode for name, data in files.items()}
    assert modes["jpeg_cmyk"] == "CMYK"
    assert modes["png_16bit"] == "I;16"
    assert modes["png_palette"] == modes["png_palette_transparent"] == "P"
    assert "transparency" in Image.open(io.BytesIO(files["png_palette_transparent"])).info
    assert "transparency" not in Image.open(io.BytesIO(files["png_palette"])).info
    assert Image.open(io.BytesIO(files["gif_animated"])).n_frames == 3
    assert Image.open(io.BytesIO(files["jpeg_exif6"])).getexif()[imagegen.EXIF_ORIENTATION] == 6


def test_generated_files_are_deterministic() -> None:
    for name, (make, _) in CASES.items():
        assert make() == make(), name


# --- read_image_info ------------------------------------------------------------------


@pytest.mark.parametrize("level", VALIDATE_LEVELS)
@pytest.mark.parametrize("name", list(CASES))
def test_inspect_image_table(files: dict[str, bytes], name: str, level: str) -> None:
    assert images.read_image_info(files[name], level) == CASES[name][1]


@pytest.mark.parametrize("name", list(CASES))
def test_decode_size_is_full_inspection(files: dict[str, bytes], name: str) -> None:
    assert images.decode_size(files[name]) == CASES[name][1]


def test_inspect_image_rejects_unknown_level(files: dict[str, bytes]) -> None:
    with pytest.raises(ValueError, match="validate must be one of"):
        images.read_image_info(files["png_rgb"], "thorough")


@pytest.mark.parametrize("level", VALIDATE_LEVELS)
@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty_file"),
        (b"hello, this is a text file, not a picture\n" * 3, "not_an_image"),
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "not_an_image"),
        (bytes(range(256)), "not_an_image"),
        (b"\xff\xd8", "not_an_image"),  # only the JPEG SOI marker
        (b"\x89PNG\r\n\x1a\n", "not_an_image"),  # only the PNG signature
    ],
    ids=["empty", "text", "svg", "binary", "jpeg_soi", "png_signature"],
)
def test_not_images(data: bytes, reason: str, level: str) -> None:
    with pytest.raises(ImageError) as info:
        images.read_image_info(data, level)
    assert info.value.reason == reason


def _jpeg_header_end(data: bytes) -> int:
    """Offset just past the JPEG start-of-scan segment: where entropy-coded data begins."""
    sos = data.index(b"\xff\xda")
    (length,) = struct.unpack(">H", data[sos + 2:sos + 4])
    return sos + 2 + length


def _png_chunk(data: bytes, kind: bytes) -> tuple[int, int]:
    """(offset of the chunk's data, its length) of the first chunk of ``kind``."""
    pos = 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        if data[pos + 4:pos + 8] == kind:
            return pos + 8, length
        pos += 12 + length
    raise AssertionError(f"no {kind!r} chunk")


def test_truncated_jpeg_at_every_length(files: dict[str, bytes]) -> None:
    data = files["jpeg_rgb"]
    header_end = _jpeg_header_end(data)
    assert 100 < header_end < len(data) - 100
    for cut in range(1, len(data)):
        for level in ("structure", "decode", "full"):
            with pytest.raises(ImageError) as info:
                images.read_image_info(data[:cut], level)
            expected = {"truncated"} if cut >= header_end else {"truncated", "not_an_image"}
            assert info.value.reason in expected, (cut, level, info.value)
        if cut >= header_end:
            # The header alone is intact, so the cheapest level does not see the damage.
            assert images.read_image_info(data[:cut], "header") == CASES["jpeg_rgb"][1]


def test_truncated_png_inside_pixel_data(files: dict[str, bytes]) -> None:
    data = files["png_rgb"]
    start, length = _png_chunk(data, b"IDAT")
    cuts = range(start, start + (3 * length) // 4)
    assert len(cuts) > 100
    for cut in cuts:
        for level in ("structure", "decode", "full"):
            with pytest.raises(ImageError) as info:
                images.read_image_info(data[:cut], level)
            assert info.value.reason == "truncated", (cut, level, info.value)
        assert images.read_image_info(data[:cut], "header") == CASES["png_rgb"][1]


def test_truncated_png_before_pixel_data_fails_at_every_level(files: dict[str, bytes]) -> None:
    data = files["png_rgb"]
    start, _ = _png_chunk(data, b"IDAT")
    for cut in range(1, start):
        for level in ("structure", "decode", "full"):
            with pytest.raises(ImageError):
                images.read_image_info(data[:cut], level)


def test_truncated_later_animation_frame_fails_full_validation_only(files: dict[str, bytes]) -> None:
    data = files["gif_animated"]
    # Each frame starts with a graphic control extension (0x21 0xf9 0x04).
    frames = [i for i in range(len(data) - 2) if data[i:i + 3] == b"\x21\xf9\x04"]
    assert len(frames) == 3
    inside_later_frames = [*range(frames[1] + 20, frames[2] - 10), *range(frames[2] + 20, len(data) - 10)]
    assert len(inside_later_frames) > 300
    for cut in inside_later_frames:
        with pytest.raises(ImageError) as info:
            images.read_image_info(data[:cut], "full")
        assert info.value.reason in ("truncated", "undecodable"), (cut, info.value)
        assert "animation frame" in info.value.detail
        # The first frame is intact, and 'decode' only decodes the first frame.
        assert images.read_image_info(data[:cut], "decode") == CASES["gif_animated"][1]


@pytest.mark.parametrize("name", ["jpeg_rgb", "png_rgb", "gif_animated", "webp", "tiff", "bmp"])
def test_truncated_to_half_fails_full_validation(files: dict[str, bytes], name: str) -> None:
    data = files[name]
    with pytest.raises(ImageError) as info:
        images.read_image_info(data[:len(data) // 2], "full")
    assert info.value.reason in ("truncated", "undecodable")


# --- Decompression bombs ------------------------------------------------------------------


# Pillow only warns for 1x-2x its limit. The module must refuse those too even when the
# warning is not turned into an error (pytest, like any catch_warnings block, resets filters).
@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@pytest.mark.parametrize("level", VALIDATE_LEVELS)
@pytest.mark.parametrize("side", [20000, 10000])  # 4e8 px: over 2x Pillow's limit; 1e8 px: over 1x
def test_decompression_bomb_is_refused_from_the_header(side: int, level: str) -> None:
    data = imagegen.png_declaring(side, side)
    assert len(data) < 100
    tracemalloc.start()
    try:
        with pytest.raises(ImageError) as info:
            images.read_image_info(data, level)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.reason == "decompression_bomb"
    assert f"{side * side}" in info.value.detail
    assert peak < 50 * 1024 * 1024


@pytest.mark.parametrize("convert", [images.reencode_image, images.raw_pixels])
def test_decompression_bomb_is_refused_by_converters(convert) -> None:
    with pytest.raises(ImageError) as info:
        convert(imagegen.png_declaring(20000, 20000))
    assert info.value.reason == "decompression_bomb"


def test_a_large_but_allowed_header_is_not_a_bomb() -> None:
    # 9000 x 9000 = 8.1e7 pixels, under Pillow's 89,478,485 limit.
    assert images.read_image_info(imagegen.png_declaring(9000, 9000), "header") == ImageInfo("png", 9000, 9000, 1)


# --- reencode_image ------------------------------------------------------------------------


def _open(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


@pytest.mark.parametrize("fmt, pillow_format", [("jpeg", "JPEG"), ("png", "PNG")])
@pytest.mark.parametrize("name", list(CASES))
def test_reencode_every_source(files: dict[str, bytes], name: str, fmt: str, pillow_format: str) -> None:
    out, info = images.reencode_image(files[name], fmt)
    img = _open(out)
    assert (img.format, img.mode) == (pillow_format, "RGB")
    assert replace(info, source_format="") == ImageInfo(fmt, img.height, img.width, 3)
    expected = CASES[name][1]
    if name == "jpeg_exif6":
        assert (info.height, info.width) == (expected.width, expected.height)
    else:
        assert (info.height, info.width) == (expected.height, expected.width)
    assert images.reencode_image(files[name], fmt) == (out, info)  # deterministic


@pytest.mark.parametrize(
    "fmt, grayscale, resize, mode, size",
    [
        ("jpeg", False, (8, 6), "RGB", (8, 6)),
        ("jpeg", True, None, "L", (32, 24)),
        ("jpeg", True, (64, 10), "L", (64, 10)),
        ("png", False, (5, 40), "RGB", (5, 40)),
        ("png", True, (3, 3), "L", (3, 3)),
        ("png", True, (32, 24), "L", (32, 24)),  # resize to the same size
    ],
)
def test_reencode_resize_and_grayscale(files: dict[str, bytes], fmt: str, grayscale: bool,
                                       resize: tuple[int, int] | None, mode: str,
                                       size: tuple[int, int]) -> None:
    out, info = images.reencode_image(files["png_rgba"], fmt, grayscale=grayscale, resize=resize)
    img = _open(out)
    assert (img.mode, img.size) == (mode, size)
    assert replace(info, source_format="") == ImageInfo(fmt, size[1], size[0], 1 if grayscale else 3)
    assert images.read_image_info(out, "full") == replace(info, source_format="")


def test_reencode_png_is_lossless(files: dict[str, bytes]) -> None:
    out, _ = images.reencode_image(files["png_rgb"], "png")
    assert np.array_equal(np.asarray(_open(out)), imagegen.pattern(24, 32, 3))


def test_reencode_jpeg_quality_changes_the_bytes(files: dict[str, bytes]) -> None:
    low, _ = images.reencode_image(files["png_rgb"], "jpeg", quality=10)
    high, _ = images.reencode_image(files["png_rgb"], "jpeg", quality=95)
    assert len(low) < len(high)


def test_reencode_rejects_unknown_format(files: dict[str, bytes]) -> None:
    with pytest.raises(ValueError, match="jpeg or png"):
        images.reencode_image(files["png_rgb"], "webp")


def test_reencode_applies_exif_orientation(files: dict[str, bytes]) -> None:
    out, info = images.reencode_image(files["jpeg_exif6"], "png")
    assert (info.width, info.height) == (24, 32)  # stored 32 wide, 24 high, rotated a quarter turn
    assert _open(out).size == (24, 32)
    # Orientation 6 means "rotate 90 degrees clockwise to display".
    rotated = np.frombuffer(images.raw_pixels(files["jpeg_exif6"])[0], np.uint8).reshape(32, 24, 3)
    upright = np.frombuffer(images.raw_pixels(files["jpeg_rgb"])[0], np.uint8).reshape(24, 32, 3)
    assert np.array_equal(rotated, np.rot90(upright, k=-1))


# --- raw_pixels ------------------------------------------------------------------------------


@pytest.mark.parametrize("grayscale", [False, True])
@pytest.mark.parametrize("resize", [None, (7, 5)])
@pytest.mark.parametrize("name", list(CASES))
def test_raw_pixels_byte_count(files: dict[str, bytes], name: str, grayscale: bool,
                               resize: tuple[int, int] | None) -> None:
    raw, info = images.raw_pixels(files[name], grayscale=grayscale, resize=resize)
    channels = 1 if grayscale else 3
    expected = CASES[name][1]
    if resize is not None:
        height, width = resize[1], resize[0]
    elif name == "jpeg_exif6":
        height, width = expected.width, expected.height
    else:
        height, width = expected.height, expected.width
    assert replace(info, source_format="") == ImageInfo("raw", height, width, channels)
    assert len(raw) == height * width * channels


@pytest.mark.parametrize("mode, channels, grayscale", [("RGB", 3, False), ("L", 1, True)])
def test_raw_pixels_are_row_major_hwc(mode: str, channels: int, grayscale: bool) -> None:
    expected = imagegen.pattern(24, 32, channels)
    raw, info = images.raw_pixels(imagegen.png(mode), grayscale=grayscale)
    assert raw == expected.tobytes()  # C order: row by row, channels innermost
    shape = (info.height, info.width, info.channels)
    assert np.array_equal(np.frombuffer(raw, np.uint8).reshape(shape), expected.reshape(shape))
    # A pixel spot check that does not rely on numpy's own layout.
    y, x = 5, 17
    offset = (y * 32 + x) * channels
    assert list(raw[offset:offset + channels]) == [int(v) for v in np.atleast_1d(expected[y, x])]


def test_16bit_is_scaled_not_clipped() -> None:
    raw, info = images.raw_pixels(imagegen.png_16bit(_GRAY16), grayscale=True)
    assert (info.height, info.width, info.channels) == (2, 5, 1)
    assert list(raw) == [0, 0, 1, 128, 255, 0, 16, 156, 255, 254]
    rgb, _ = images.raw_pixels(imagegen.png_16bit(_GRAY16))
    assert list(rgb) == [v for v in raw for _ in range(3)]
    out, _ = images.reencode_image(imagegen.png_16bit(_GRAY16), "png", grayscale=True)
    assert np.asarray(_open(out)).ravel().tolist() == list(raw)


def test_rgba_is_composited_on_white() -> None:
    pixels = bytes([255, 0, 0, 0,  # transparent red -> white
                    0, 0, 255, 255,  # opaque blue stays blue
                    0, 0, 0, 128,  # half-transparent black -> mid grey
                    10, 200, 30, 255])
    data = imagegen.encode(Image.frombytes("RGBA", (4, 1), pixels), "PNG")
    raw, _ = images.raw_pixels(data)
    got = np.frombuffer(raw, np.uint8).reshape(4, 3).tolist()
    assert got[0] == [255, 255, 255]
    assert got[1] == [0, 0, 255]
    assert all(abs(v - 127) <= 1 for v in got[2])
    assert got[3] == [10, 200, 30]
    gray, _ = images.raw_pixels(data, grayscale=True)
    assert gray[0] == 255


def test_gray_alpha_is_composited_on_white() -> None:
    data = imagegen.encode(Image.frombytes("LA", (2, 1), bytes([0, 0, 40, 255])), "PNG")
    raw, info = images.raw_pixels(data, grayscale=True)
    assert (info.channels, list(raw)) == (1, [255, 40])


def test_palette_transparency_becomes_white(files: dict[str, bytes]) -> None:
    src = _open(files["png_palette_transparent"])
    indexes = np.asarray(src)
    palette = np.array(src.getpalette()[:48], np.uint8).reshape(16, 3)
    raw, _ = images.raw_pixels(files["png_palette_transparent"])
    got = np.frombuffer(raw, np.uint8).reshape(24, 32, 3)
    assert (indexes == 0).any() and (indexes != 0).any()
    assert (got[indexes == 0] == 255).all()
    assert np.array_equal(got[indexes != 0], palette[indexes[indexes != 0]])
    # Without transparency, index 0 keeps its palette colour.
    opaque, _ = images.raw_pixels(files["png_palette"])
    assert np.array_equal(np.frombuffer(opaque, np.uint8).reshape(24, 32, 3), palette[indexes])


def test_cmyk_jpeg_decodes_to_rgb(files: dict[str, bytes]) -> None:
    raw, info = images.raw_pixels(files["jpeg_cmyk"])
    expected = np.asarray(_open(files["jpeg_cmyk"]).convert("RGB"))
    assert replace(info, source_format="jpeg") == ImageInfo("raw", 24, 32, 3, source_format="jpeg")
    assert raw == expected.tobytes()


def test_animated_gif_uses_the_first_frame(files: dict[str, bytes]) -> None:
    first = np.asarray(_open(files["gif_animated"]).convert("RGB"))
    gif = Image.open(io.BytesIO(files["gif_animated"]))
    gif.seek(1)
    second = np.asarray(gif.convert("RGB"))
    assert not np.array_equal(first, second)
    raw, _ = images.raw_pixels(files["gif_animated"])
    assert raw == first.tobytes()


def test_truncated_source_cannot_be_converted(files: dict[str, bytes]) -> None:
    data = files["png_rgb"]
    start, length = _png_chunk(data, b"IDAT")
    for convert in (images.reencode_image, images.raw_pixels):
        with pytest.raises(ImageError) as info:
            convert(data[:start + length // 2])
        assert info.value.reason == "truncated"


def test_image_error_pickles_with_its_fields() -> None:
    import pickle
    err = pickle.loads(pickle.dumps(ImageError("truncated", "OSError: image file is truncated")))
    assert (err.reason, err.detail) == ("truncated", "OSError: image file is truncated")


def test_reencode_to_png_of_a_bilevel_image_with_a_colour_key() -> None:
    """A 1-bit PNG's colour key stayed in the RGB image and broke PNG's writer, failing the job."""
    src = io.BytesIO()
    Image.new("1", (4, 3), 1).save(src, format="PNG", transparency=255)
    out, info = images.reencode_image(src.getvalue(), "png")
    assert (info.format, info.height, info.width, info.channels) == ("png", 3, 4, 3)
    assert _open(out).mode == "RGB"


# --- --resize_mode ----------------------------------------------------------------


def _halves(width: int = 40, height: int = 20) -> bytes:
    """A PNG whose left quarter is red, right quarter blue, middle green."""
    img = Image.new("RGB", (width, height), (0, 255, 0))
    img.paste((255, 0, 0), (0, 0, width // 4, height))
    img.paste((0, 0, 255), (width - width // 4, 0, width, height))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("mode, size", [
    ("stretch", (10, 10)), ("fit", (10, 5)), ("crop", (10, 10)),
])
def test_resize_modes_give_their_sizes(mode: str, size: tuple[int, int]) -> None:
    for convert in (images.raw_pixels, lambda d, g, r, m: images.reencode_image(d, "png", 95, g, r, m)):
        data, info = convert(_halves(), False, (10, 10), mode)
        assert (info.width, info.height) == size
    pixels, info = images.raw_pixels(_halves(), False, (10, 10), mode)
    arr = np.frombuffer(pixels, np.uint8).reshape(info.height, info.width, 3)
    red_left = arr[:, 0, 0].min() > 200 and arr[:, 0, 1].max() < 60
    assert red_left == (mode != "crop")  # the centre crop cuts the red and blue quarters off


def test_unknown_resize_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="resize mode"):
        images.raw_pixels(_halves(), False, (10, 10), "squash")


# --- image-library messages -------------------------------------------------------


def _webp_compressed_tiff() -> bytes:
    """A TIFF declaring WEBP compression, which Pillow's bundled libtiff cannot decode."""
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 20, 30)).save(buf, format="TIFF", compression="tiff_adobe_deflate")
    data = bytearray(buf.getvalue())
    ifd = struct.unpack_from("<I", data, 4)[0]
    for i in range(struct.unpack_from("<H", data, ifd)[0]):
        entry = ifd + 2 + 12 * i
        if struct.unpack_from("<H", data, entry)[0] == 259:  # Compression
            struct.pack_into("<H", data, entry + 8, 50001)  # COMPRESSION_WEBP
    return bytes(data)


def _malformed_mpo_jpeg() -> bytes:
    """A good JPEG with an APP2 'MPF' segment that is not a valid MP index."""
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, format="JPEG")
    data = buf.getvalue()
    payload = b"MPF\x00" + b"II*\x00" + b"\x08\x00\x00\x00" + b"\xff" * 8
    return data[:2] + b"\xff\xe2" + struct.pack(">H", len(payload) + 2) + payload + data[2:]


def test_libtiff_message_goes_to_the_dead_letter_not_stderr(capfd) -> None:
    with pytest.raises(ImageError) as caught:
        images.read_image_info(_webp_compressed_tiff(), "full")
    assert "WEBP compression support is not configured" in caught.value.detail
    assert capfd.readouterr().err == ""


def test_pillow_warning_about_a_good_image_is_dropped(capfd) -> None:
    import warnings

    data = _malformed_mpo_jpeg()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        info = images.read_image_info(data, "full")
        again = images.read_image_info(data, "full")
    assert info == again and info.format == "jpeg"
    assert not [w for w in seen if "MPO" in str(w.message)]
    assert capfd.readouterr().err == ""


def test_pillow_messages_are_kept_per_thread() -> None:
    import threading
    import warnings

    from transforms.images.library_messages import captured_messages

    results: dict[str, list[str]] = {}
    barrier = threading.Barrier(2)

    def work(name: str, text: str) -> None:
        with captured_messages() as messages:
            barrier.wait()
            warnings.warn(text, UserWarning)
            barrier.wait()
        results[name] = list(messages)

    threads = [threading.Thread(target=work, args=(n, f"about {n}")) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {"a": ["UserWarning: about a"], "b": ["UserWarning: about b"]}


def test_a_pillow_logger_made_after_the_first_capture_is_routed_too() -> None:
    """The router is installed once, and again only when loggers were added since."""
    import logging
    import uuid

    from transforms.images.library_messages import captured_messages

    with captured_messages():
        pass
    late = logging.getLogger(f"PIL.LatePlugin{uuid.uuid4().hex}")
    try:
        with captured_messages() as messages:
            late.warning("a late plugin's message")
        assert messages == ["warning: a late plugin's message"]
    finally:
        del logging.root.manager.loggerDict[late.name]


def _lab_tiff() -> bytes:
    out = io.BytesIO()
    Image.new("LAB", (8, 6), (60, 140, 100)).save(out, format="TIFF")
    return out.getvalue()


def _cmyk_jpeg_with_its_profile() -> bytes:
    from tests.icc_fixtures import gray_profile

    out = io.BytesIO()
    Image.new("CMYK", (8, 6), (10, 200, 30, 0)).save(
        out, format="JPEG", quality=95, icc_profile=gray_profile(space=b"CMYK", profile_class=b"prtr"))
    return out.getvalue()


@pytest.mark.parametrize("source", [_lab_tiff, _cmyk_jpeg_with_its_profile], ids=["lab", "cmyk"])
@pytest.mark.parametrize("convert", [lambda data: images.upright_first_frame_png(data, True)[0],
                                     lambda data: images.reencode_image(data, "png")[0]], ids=["png", "reencoded"])
def test_a_png_converted_to_rgb_carries_no_profile_of_another_colour_space(source, convert) -> None:
    # Pillow converts LAB through an sRGB profile it makes with the current time and keeps in the image's
    # info: written into the PNG, the same input gave other bytes a second later. A CMYK image keeps its
    # CMYK profile, which does not describe RGB pixels (libpng refuses it). The pixels are sRGB: no profile.
    data = source()
    png = convert(data)
    written = Image.open(io.BytesIO(png))
    assert written.mode == "RGB" and "icc_profile" not in written.info
    assert b"iCCP" not in png
    assert written.tobytes() == Image.open(io.BytesIO(data)).convert("RGB").tobytes()


# --- A plain JPEG read without Pillow: the same answer as Pillow's header ------------------


def _both_ways(data: bytes, monkeypatch) -> tuple:
    """``read_image_info(data)`` at the ``structure`` and ``header`` levels, as built, then with every
    JPEG opened by Pillow first (as before the plain path): each an ImageInfo or the (reason, detail)
    of its ImageError."""
    outcomes: dict[bool, list] = {False: [], True: []}
    for pillow_first in (False, True):
        with monkeypatch.context() as patched:
            if pillow_first:
                patched.setattr(images, "_checked_jpeg", lambda data, headers_only=False: None)
            for validate in ("structure", "header"):
                try:
                    outcomes[pillow_first].append(images.read_image_info(data, validate))
                except ImageError as err:
                    outcomes[pillow_first].append((err.reason, err.detail))
    return tuple(outcomes[False]), tuple(outcomes[True])


def _header_damage(data: bytes) -> list[bytes]:
    """``data`` cut, and with one byte changed, at every offset of its headers (up to its first scan's data)."""
    scan = data.index(b"\xff\xda")
    end = min(len(data), scan + 2 + int.from_bytes(data[scan + 2:scan + 4], "big") + 8)
    damaged = [data[:cut] for cut in range(2, end)]
    for at in range(2, end):
        values = {0x00, 0xFF, data[at] ^ 0x01, data[at] ^ 0x80}
        if data[at - 1] == 0xFF:  # a marker's code: every other kind of marker in its place
            values |= {0x01, 0xC3, 0xC8, 0xCC, 0xD0, 0xD8, 0xD9, 0xDA, 0xDC, 0xDE, 0xE1, 0xED, 0xF0, 0xFE}
        damaged += [data[:at] + bytes((value,)) + data[at + 1:] for value in sorted(values - {data[at]})]
    return damaged


def test_a_plain_jpeg_is_read_without_opening_it_in_pillow(monkeypatch):
    opened = []
    pillow_open = Image.open
    monkeypatch.setattr(Image, "open", lambda *args, **kwargs: opened.append(1) or pillow_open(*args, **kwargs))
    assert images.read_image_info(imagegen.jpeg("RGB", size=(33, 17))) == ImageInfo("jpeg", 17, 33, 3)
    assert images.read_image_info(imagegen.jpeg("L")) == ImageInfo("jpeg", 24, 32, 1)
    assert images.read_image_info(imagegen.jpeg("RGB")[:700], "header") == ImageInfo("jpeg", 24, 32, 3)
    assert opened == []
    assert images.read_image_info(imagegen.jpeg("RGB", exif_orientation=6)).orientation == 6  # EXIF: Pillow's
    assert images.read_image_info(imagegen.jpeg("CMYK")).channels == 4
    assert images.read_image_info(imagegen.jpeg("L"), "decode") == ImageInfo("jpeg", 24, 32, 1)
    assert len(opened) == 3


@pytest.mark.parametrize("name", ["jpeg_rgb", "jpeg_gray", "jpeg_cmyk", "jpeg_exif6", "jpeg_odd_size"])
def test_damaged_jpeg_headers_are_read_as_pillow_reads_them(name, monkeypatch):
    data = CASES[name][0]()
    cases = _header_damage(data)
    differ = [(case[:40].hex(), *outcomes) for case in cases
              for outcomes in [_both_ways(case, monkeypatch)] if outcomes[0] != outcomes[1]]
    assert differ == []
    assert len(cases) > 500


def _segment(marker: int, body: bytes) -> bytes:
    return bytes((0xFF, marker)) + (len(body) + 2).to_bytes(2, "big") + body


_XMP = (b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta xmlns:x='adobe:ns:meta/'><rdf:RDF xmlns:rdf="
        b"'http://www.w3.org/1999/02/22-rdf-syntax-ns#'><rdf:Description xmlns:tiff="
        b"'http://ns.adobe.com/tiff/1.0/' tiff:Orientation='6'/></rdf:RDF></x:xmpmeta>")
# Headers after SOI that Pillow reads otherwise than libjpeg, or that say more than a size.
_ODD_HEADERS = {
    "short_jfif": _segment(0xE0, b"JFIF\x00\x01"), "short_adobe": _segment(0xEE, b"Adobe\x00"),
    "adobe": _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x01"), "short_icc": _segment(0xE2, b"ICC_PROFILE\x00"),
    "photoshop": _segment(0xED, b"Photoshop 3.0\x008BIM\x04\x04"), "mpf": _segment(0xE2, b"MPF\x00II*\x00"),
    "xmp_orientation": _segment(0xE1, _XMP), "comment": _segment(0xFE, b"made by hand"),
    "tem": b"\xff\x01", "fill": b"\xff\xff\xff", "junk": b"\x00\x01", "jpg0": _segment(0xF0, b"\xff\xd9ab"),
    "dhp": _segment(0xDE, b"\x08\x00\x10\x00\x10\x01\x01\x11\x00"), "dnl": _segment(0xDC, b"\x00\x10"),
}


@pytest.mark.parametrize("header", sorted(_ODD_HEADERS))
@pytest.mark.parametrize("name", ["jpeg_rgb", "jpeg_gray"])
def test_odd_jpeg_headers_are_read_as_pillow_reads_them(name, header, monkeypatch):
    data = CASES[name][0]()
    odd = data[:2] + _ODD_HEADERS[header] + data[2:]
    outcomes = _both_ways(odd, monkeypatch)
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("cut", ["eoi_first", "eoi_before_the_scan", "soi_eoi"])
def test_a_jpeg_that_ends_before_its_scan_is_read_as_pillow_reads_it(cut, monkeypatch):
    data = CASES["jpeg_rgb"][0]()
    ended = {"eoi_first": data[:2] + b"\xff\xd9" + data[2:], "soi_eoi": b"\xff\xd8\xff\xd9",
             "eoi_before_the_scan": data[:data.index(b"\xff\xda")] + b"\xff\xd9"}[cut]
    outcomes = _both_ways(ended, monkeypatch)
    assert outcomes[0] == outcomes[1]


@pytest.mark.slow
def test_every_corpus_jpeg_is_read_as_pillow_reads_it(monkeypatch):
    """Pillow's own test images and scikit-image's data (downloaded once, see messy_corpus)."""
    import os

    from tests.messy_corpus import pillow_test_images, skimage_images

    read, plain, differ = 0, 0, []
    for source in (pillow_test_images(), skimage_images()):
        for folder, _, names in os.walk(source):
            for name in sorted(names):
                with open(os.path.join(folder, name), "rb") as fh:
                    data = fh.read()
                if not data.startswith(b"\xff\xd8\xff"):
                    continue
                read += 1
                outcomes = _both_ways(data, monkeypatch)
                if outcomes[0] != outcomes[1]:
                    differ.append((name, *outcomes))
                frame = images._checked_jpeg(data)
                plain += bool(frame and frame.plain)
    assert differ == []
    assert read >= 60 and plain >= 10, (read, plain)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@pytest.mark.parametrize("side", [20000, 10001])  # over 2x Pillow's limit; over 1x
def test_a_plain_jpeg_declaring_too_many_pixels_is_refused_as_pillow_refuses_it(side, monkeypatch):
    data = imagegen.jpeg("RGB")
    sof = data.index(b"\xff\xc0") + 5  # the frame header's height, then width
    huge = data[:sof] + side.to_bytes(2, "big") * 2 + data[sof + 4:]
    assert images.check_structure(huge, "jpeg") is None and images._checked_jpeg(huge).plain
    outcomes = _both_ways(huge, monkeypatch)
    assert outcomes[0] == outcomes[1]
    assert all(outcome[0] == "decompression_bomb" for outcome in outcomes[0])
