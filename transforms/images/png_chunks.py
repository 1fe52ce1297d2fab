"""PNG colour chunks that make libpng print warnings, fixed without touching a pixel.

docs/images.md, "No decoder noise", says which chunk ``fix_png_chunks`` rewrites and why libpng then
reads the file as before, less the warning. The table of known profiles is libpng's
``png_sRGB_checks`` (``png.c``, libpng 1.6.38); the checks of a profile follow ``png_handle_iCCP``
(``pngrutil.c``), ``png_icc_check_length``, ``png_icc_check_header`` and ``png_icc_check_tag_table``
(``png.c``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

__all__ = ["PNG_CHUNK_FIXES", "SrgbProfile", "SRGB_PROFILES", "fix_png_chunks"]

# Fix name (as counted in the manifest's ``images.png_chunks_fixed``) -> what it does.
PNG_CHUNK_FIXES = {
    "iccp_to_srgb": "iCCP known incorrect sRGB profile -> sRGB",
    "iccp_dropped": "iCCP profile libpng rejects -> dropped",
}


@dataclass(frozen=True)
class SrgbProfile:
    """One ICC sRGB profile libpng recognises (an entry of ``png_sRGB_checks``).

    Attributes:
        name: The profile's file name or description, as libpng's table gives it.
        md5: The profile ID (header bytes 84-99) libpng compares first; zero
            for the profiles that have none.
        intent: The rendering intent in the profile's header.
        broken: libpng reports ``known incorrect sRGB profile`` for it.
    """

    name: str
    length: int
    adler32: int
    crc32: int
    md5: bytes
    intent: int
    broken: bool


def _md5(*words: int) -> bytes:
    return b"".join(word.to_bytes(4, "big") for word in words)


_NO_MD5 = bytes(16)

# libpng's png_sRGB_checks, in its order (glennrp/libpng png.c, libpng 1.6.38).
SRGB_PROFILES = (
    SrgbProfile("sRGB_IEC61966-2-1_black_scaled.icc", 3048, 0x0A3FD9F6, 0x3B8772B9,
                _md5(0x29F83DDE, 0xAFF255AE, 0x7842FAE4, 0xCA83390D), 0, False),
    SrgbProfile("sRGB_IEC61966-2-1_no_black_scaling.icc", 3052, 0x4909E5E1, 0x427EBB21,
                _md5(0xC95BD637, 0xE95D8A3B, 0x0DF38F99, 0xC1320389), 1, False),
    SrgbProfile("sRGB_v4_ICC_preference_displayclass.icc", 60988, 0xFD2144A1, 0x306FD8AE,
                _md5(0xFC663378, 0x37E2886B, 0xFD72E983, 0x8228F1B8), 0, False),
    SrgbProfile("sRGB_v4_ICC_preference.icc", 60960, 0x209C35D2, 0xBBEF7812,
                _md5(0x34562ABF, 0x994CCD06, 0x6D2C5721, 0xD0D68C5D), 0, False),
    SrgbProfile("sRGB_IEC61966-2-1_noBPC.icc", 3024, 0xA054D762, 0x5D5129CE, _NO_MD5, 1, False),
    SrgbProfile("HP-Microsoft sRGB v2 perceptual", 3144, 0xF784F3FB, 0x182EA552, _NO_MD5, 0, True),
    SrgbProfile("HP-Microsoft sRGB v2 media-relative", 3144, 0x0398F3FC, 0xF29E526D, _NO_MD5, 1, True),
)

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOUR_CHUNKS = frozenset((b"iCCP", b"sRGB", b"gAMA", b"cHRM"))
# libpng's default PNG_USER_CHUNK_MALLOC_MAX: a longer profile is refused for a limit of the
# build, not of the file; such a file is left as it is.
_PROFILE_LIMIT = 8_000_000
_HEADER = 132


@dataclass(frozen=True)
class _Chunk:
    kind: bytes
    start: int  # offset of the length field
    end: int  # offset after the CRC

    def crc_ok(self, data: bytes) -> bool:
        stored = int.from_bytes(data[self.end - 4:self.end], "big")
        return stored == zlib.crc32(memoryview(data)[self.start + 4:self.end - 4])


def _chunks_before_image_data(data: bytes) -> list[_Chunk] | None:
    """The chunks from IHDR up to the first IDAT (excluded), or None if they cannot be walked."""
    if not data.startswith(_SIGNATURE):
        return None
    chunks, pos, size = [], len(_SIGNATURE), len(data)
    while pos + 12 <= size:
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        end = pos + 12 + length
        if length > 2**31 - 1 or end > size or not (kind.isascii() and kind.isalpha()):
            return None
        if kind in (b"IDAT", b"IEND"):
            return chunks
        chunks.append(_Chunk(kind, pos, end))
        pos = end
    return None


def _chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


def _be32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at:at + 4], "big")


class _Inflater:
    """The profile's zlib stream, inflated a part at a time as libpng reads it."""

    def __init__(self, stream: bytes) -> None:
        self._zlib = zlib.decompressobj(0)  # the window size the stream's header gives
        self._pending = stream

    def read(self, size: int) -> bytes | None:
        """The next ``size`` bytes of the profile, or None if the stream ends or fails first."""
        if size == 0:
            return b""
        try:
            out = self._zlib.decompress(self._pending, size)
        except zlib.error:
            return None
        self._pending = self._zlib.unconsumed_tail
        return out if len(out) == size else None


def _iccp_verdict(body: bytes, color_type: int) -> tuple[str, SrgbProfile | None]:
    """``(why libpng refuses the profile or "", the ``SRGB_PROFILES`` entry it is or None)``."""
    read_length = min(81, len(body))
    if len(body) < 14 or len(body) - read_length < 11:
        return "too short", None
    keyword = body[:min(80, read_length)]
    keyword_length = keyword.find(b"\0")
    keyword_length = len(keyword) if keyword_length < 0 else keyword_length
    if not 1 <= keyword_length <= 79:
        return "bad keyword", None
    if not (keyword_length + 1 < read_length and body[keyword_length + 1] == 0):
        return "bad compression method", None
    inflater = _Inflater(body[keyword_length + 2:])
    header = inflater.read(_HEADER)
    if header is None:
        return "profile truncated or not a zlib stream", None
    length = _be32(header, 0)
    if length < _HEADER:
        return "profile too short", None
    if length > _PROFILE_LIMIT:
        return "", None  # refused for the build's limit: left alone
    why = _header_problem(header, length, color_type)
    if why:
        return why, None
    tag_count = _be32(header, 128)
    table = inflater.read(12 * tag_count)
    if table is None:
        return "tag table truncated", None
    for at in range(0, len(table), 12):
        start, size = _be32(table, at + 4), _be32(table, at + 8)
        if start > length or size > length - start:
            return "ICC profile tag outside profile", None
    rest = inflater.read(length - _HEADER - len(table))
    if rest is None:
        return "profile truncated", None
    return "", _known_profile(header + table + rest)


def _header_problem(header: bytes, length: int, color_type: int) -> str:
    """The error ``png_icc_check_header`` gives the profile's first 132 bytes ("" if none; its
    warnings leave the profile in use)."""
    if _be32(header, 0) != length:
        return "length does not match profile"
    if header[8] > 3 and length & 3:
        return "invalid length"
    tags = _be32(header, 128)
    if tags > 357913930 or length < _HEADER + 12 * tags:
        return "tag count too large"
    if _be32(header, 64) >= 0xFFFF:
        return "invalid rendering intent"
    if header[36:40] != b"acsp":
        return "invalid signature"
    space = header[16:20]
    if space == b"RGB ":
        if not color_type & 2:
            return "RGB color space not permitted on grayscale PNG"
    elif space == b"GRAY":
        if color_type & 2:
            return "Gray color space not permitted on RGB PNG"
    else:
        return "invalid ICC profile color space"
    if header[12:16] == b"abst":
        return "invalid embedded Abstract ICC profile"
    if header[12:16] == b"link":
        return "unexpected DeviceLink ICC profile class"
    if header[20:24] not in (b"XYZ ", b"Lab "):
        return "unexpected ICC PCS encoding"
    return ""


def _known_profile(profile: bytes) -> SrgbProfile | None:
    """The ``SRGB_PROFILES`` entry ``profile`` is, matched as ``png_compare_ICC_profile_with_sRGB`` does."""
    intent = _be32(profile, 64)
    for known in SRGB_PROFILES:
        if (profile[84:100] == known.md5 and len(profile) == known.length and intent == known.intent
                and zlib.adler32(profile) == known.adler32 and zlib.crc32(profile) == known.crc32):
            return known
    return None


def fix_png_chunks(data: bytes) -> tuple[bytes, str]:
    """Returns a PNG with its warned-about colour chunk fixed and the ``PNG_CHUNK_FIXES`` name of
    the fix, or ``(data, "")`` (the same object) when there is nothing to fix."""
    chunks = _chunks_before_image_data(data)
    if not chunks or chunks[0].kind != b"IHDR" or chunks[0].end - chunks[0].start != 25:
        return data, ""
    profiles = [chunk for chunk in chunks if chunk.kind in (b"iCCP", b"sRGB")]
    if len(profiles) != 1 or profiles[0].kind != b"iCCP" or not profiles[0].crc_ok(data):
        return data, ""  # none, or libpng says "too many profiles" (or "CRC error") whatever we do
    iccp = profiles[0]
    if any(chunk.kind == b"PLTE" and chunk.start < iccp.start for chunk in chunks):
        return data, ""  # out of place: libpng says so whatever the chunk holds
    color_type = data[chunks[0].start + 8 + 9]
    rejected, profile = _iccp_verdict(data[iccp.start + 8:iccp.end - 4], color_type)
    if rejected:
        if any(chunk.kind in _COLOUR_CHUNKS for chunk in chunks if chunk is not iccp):
            return data, ""  # libpng ignores the gAMA or cHRM after a refused profile, not without it
        return data[:iccp.start] + data[iccp.end:], "iccp_dropped"
    if profile is not None and profile.broken:  # its intent is the header's, which the entry matched
        return data[:iccp.start] + _chunk(b"sRGB", bytes((profile.intent,))) + data[iccp.end:], "iccp_to_srgb"
    return data, ""
