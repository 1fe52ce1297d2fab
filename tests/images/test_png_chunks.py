"""Unit tests of transforms.images.png_chunks, held to what real TensorFlow prints and decodes.

Each case is a small PNG with an iCCP chunk (and the chunks around it) that
libpng warns about, or leaves alone; ``tensorflow_decodes`` decodes every case
before and after ``fix_png_chunks`` in one TensorFlow subprocess and reports
the ``PNG warning`` lines and the pixels.
"""

from __future__ import annotations

import io
import pickle
import zlib

import pytest
from PIL import Image

from tests import imagegen
from tests.icc_fixtures import (HP_SRGB, chunk, chunks, gray_profile, iccp, png_with, png_warnings,
                                tensorflow_decodes, with_intent)
from transforms.images.image_codec import ImageInfo
from tests.helpers import first_frame_png
from transforms.images.items import ImageMeta, SourceImage
from transforms.images.png_chunks import PNG_CHUNK_FIXES, SRGB_PROFILES, fix_png_chunks
from tests.helpers import iccp_verdict
from transforms.images.records import EncodeSettings, encode_image, image_count_keys, image_counts
from transforms.images.survey import survey_image
from transforms.tfrecord.run_files import RunSlice


def _be32(value: int) -> bytes:
    return value.to_bytes(4, "big")


_SRGB_CHRM = b"".join(map(_be32, (31270, 32900, 64000, 33000, 30000, 60000, 15000, 6000)))
_D65 = bytes.fromhex("0000f3510001000000016bcc")


def _bad_crc(data: bytes) -> bytes:
    return data[:-1] + bytes((data[-1] ^ 1,))


def _edited(profile: bytes) -> bytes:
    return profile[:300] + bytes((profile[300] ^ 1,)) + profile[301:]


# name: (PNG, what TensorFlow warns before the fix, the fix, what it still warns after)
CASES = {
    # The known incorrect HP/Microsoft profiles become sRGB.
    "hp_rgb": (png_with("RGB", iccp(HP_SRGB)),
               ["iCCP: known incorrect sRGB profile"], "iccp_to_srgb", []),
    "hp_media_relative_rgba": (png_with("RGBA", iccp(with_intent(HP_SRGB, 1))),
                               ["iCCP: known incorrect sRGB profile"], "iccp_to_srgb", []),
    "hp_palette": (png_with("P", iccp(HP_SRGB)), ["iCCP: known incorrect sRGB profile"], "iccp_to_srgb", []),
    "hp_with_gamma_and_chromaticities": (  # as /usr/share/icons' openjdk icons hold it
        png_with("RGBA", chunk(b"pHYs", _be32(2835) * 2 + b"\1"), iccp(HP_SRGB, b"Photoshop ICC profile"),
                 chunk(b"gAMA", _be32(45455)), chunk(b"cHRM", _SRGB_CHRM)),
        ["iCCP: known incorrect sRGB profile"], "iccp_to_srgb", []),
    "hp_after_other_gamma": (  # the gamma's own warning stays: sRGB is checked against it the same way
        png_with("RGB", chunk(b"gAMA", _be32(100000)), iccp(HP_SRGB)),
        ["iCCP: gamma value does not match sRGB", "iCCP: known incorrect sRGB profile"], "iccp_to_srgb",
        ["sRGB: gamma value does not match sRGB"]),
    # Profiles libpng refuses are dropped when no other colour chunk is there.
    "rgb_profile_on_gray": (png_with("L", iccp(HP_SRGB)),
                            ["iCCP: profile 'ICC Profile': 'RGB ': RGB color space not permitted on "
                             "grayscale PNG"], "iccp_dropped", []),
    "gray_profile_on_rgb": (png_with("RGB", iccp(gray_profile(), level=0)),
                            ["iCCP: profile 'ICC Profile': 'GRAY': Gray color space not permitted on "
                             "RGB PNG"], "iccp_dropped", []),
    "intent_byte_swapped": (  # scikit-image's page.png
        png_with("L", iccp(gray_profile(intent=0x01000000), level=0)),
        ["iCCP: profile 'ICC Profile': 1000000h: invalid rendering intent"], "iccp_dropped", []),
    "too_short": (png_with("RGB", chunk(b"iCCP", b"ICC Profile\0\0x")), ["iCCP: too short"],
                  "iccp_dropped", []),
    "gray_profile_too_short": (png_with("L", iccp(gray_profile())), ["iCCP: too short"], "iccp_dropped", []),
    "not_zlib": (png_with("RGB", iccp(b"", stream=bytes(40))), ["iCCP: too short"], "iccp_dropped", []),
    "bad_compression_method": (png_with("RGB", iccp(HP_SRGB, method=1)),
                               ["iCCP: bad compression method"], "iccp_dropped", []),
    "truncated_profile": (png_with("RGB", iccp(b"", stream=zlib.compress(HP_SRGB)[:-300])),
                          ["iCCP: unexpected zlib return code"], "iccp_dropped", []),
    # Left as they are.
    "gray_profile": (png_with("L", iccp(gray_profile(), level=0)), [], "", []),
    "illuminant_not_d50": (png_with("L", iccp(gray_profile(illuminant=_D65), level=0)),
                           ["iCCP: profile 'ICC Profile': 0h: PCS illuminant is not D50"], "", None),
    "edited_hp": (png_with("RGB", iccp(_edited(HP_SRGB))),
                  ["iCCP: Not recognizing known sRGB profile that has been edited"], "", None),
    "hp_after_plte": (png_with("P", iccp(HP_SRGB), after=b"PLTE"), ["iCCP: out of place"], "", None),
    "hp_and_srgb": (png_with("RGB", iccp(HP_SRGB), chunk(b"sRGB", b"\0")),
                    ["iCCP: known incorrect sRGB profile", "sRGB: too many profiles"], "", None),
    "two_hp_profiles": (png_with("RGB", iccp(HP_SRGB), iccp(HP_SRGB)),
                        ["iCCP: known incorrect sRGB profile", "iCCP: too many profiles"], "", None),
    "hp_bad_crc": (png_with("RGB", _bad_crc(iccp(HP_SRGB))),
                   ["iCCP: CRC error", "iCCP: known incorrect sRGB profile"], "", None),
    "refused_profile_and_gamma": (png_with("L", iccp(HP_SRGB), chunk(b"gAMA", _be32(45455))),
                                  ["iCCP: profile 'ICC Profile': 'RGB ': RGB color space not permitted on "
                                   "grayscale PNG"], "", None),
}


@pytest.fixture(scope="module")
def decoded(tmp_path_factory):
    """Case name -> (TensorFlow's result before the fix, after it)."""
    names = sorted(CASES)
    pngs = [CASES[name][0] for name in names] + [fix_png_chunks(CASES[name][0])[0] for name in names]
    results = tensorflow_decodes(pngs, str(tmp_path_factory.mktemp("decoded")))
    return {name: (results[i], results[len(names) + i]) for i, name in enumerate(names)}


@pytest.mark.cpu_budget(6.0)  # the first test pays the module's one TensorFlow run of every case
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_tensorflow_warns_as_the_case_says_before_the_fix(name, decoded):
    before, _ = decoded[name]
    assert not before["error"] and png_warnings(before) == CASES[name][1]


@pytest.mark.cpu_budget(6.0)  # the first test pays the module's one TensorFlow run of every case
@pytest.mark.parametrize("name", sorted(name for name in CASES if CASES[name][2]))
def test_tensorflow_decodes_the_fixed_file_to_the_same_pixels_without_the_warning(name, decoded):
    before, after = decoded[name]
    assert png_warnings(after) == CASES[name][3]
    assert not after["error"] and after["pixels"] == before["pixels"]  # channels 0, 1, 3 and 4, 16 bits
    assert set(before["pixels"]) == {"0", "1", "3", "4"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fix_is_the_one_the_case_names(name):
    data, _, fix, _ = CASES[name]
    fixed, got = fix_png_chunks(data)
    assert got == fix
    if not fix:
        assert fixed is data
    assert fix_png_chunks(fixed) == (fixed, "")  # nothing left to fix


@pytest.mark.parametrize("name", sorted(name for name in CASES if CASES[name][2]))
def test_only_the_iccp_chunk_changes_and_every_crc_is_valid(name):
    data, _, fix, _ = CASES[name]
    fixed, _ = fix_png_chunks(data)
    before, after = chunks(data), chunks(fixed)
    at = [kind for kind, _, _ in before].index(b"iCCP")
    if fix == "iccp_to_srgb":
        profile = zlib.decompress(before[at][1].split(b"\0", 2)[2])
        assert after[at] == (b"sRGB", profile[67:68], True) and profile[64:67] == bytes(3)
        assert after[:at] + after[at + 1:] == before[:at] + before[at + 1:]
    else:
        assert after == before[:at] + before[at + 1:]
    assert all(valid for _, _, valid in after)
    start = data.index(b"iCCP") - 4
    end = start + 12 + len(before[at][1])
    assert fixed.startswith(data[:start]) and fixed.endswith(data[end:])  # IDAT and IEND as they were


def test_the_sRGB_chunk_holds_the_profiles_intent():
    assert chunks(fix_png_chunks(CASES["hp_rgb"][0])[0])[1][:2] == (b"sRGB", b"\0")
    assert chunks(fix_png_chunks(CASES["hp_media_relative_rgba"][0])[0])[1][:2] == (b"sRGB", b"\1")


def test_the_hp_profile_is_libpngs_table_entry_and_only_it():
    body = iccp(HP_SRGB)[8:-4]
    assert iccp_verdict(body, 2) == ("", SRGB_PROFILES[5])
    assert SRGB_PROFILES[5].name == "HP-Microsoft sRGB v2 perceptual" and SRGB_PROFILES[5].broken
    assert iccp_verdict(iccp(with_intent(HP_SRGB, 1))[8:-4], 6) == ("", SRGB_PROFILES[6])
    assert SRGB_PROFILES[6].name == "HP-Microsoft sRGB v2 media-relative" and SRGB_PROFILES[6].broken
    assert (zlib.adler32(HP_SRGB), zlib.crc32(HP_SRGB), len(HP_SRGB)) == (0xF784F3FB, 0x182EA552, 3144)
    assert iccp_verdict(iccp(_edited(HP_SRGB))[8:-4], 2) == ("", None)
    assert iccp_verdict(iccp(with_intent(HP_SRGB, 2))[8:-4], 2) == ("", None)
    assert iccp_verdict(body, 0) == ("RGB color space not permitted on grayscale PNG", None)
    assert [profile.broken for profile in SRGB_PROFILES].count(True) == 2


def test_files_whose_chunks_cannot_be_walked_are_left_alone():
    data = CASES["hp_rgb"][0]
    image_data_end = data.index(b"IEND") - 4
    for size in range(image_data_end):
        cut = data[:size]
        assert fix_png_chunks(cut)[0] is cut
    for other in (b"", b"GIF89a", imagegen.jpeg(), data[:33] + _be32(2**31) + data[37:]):
        assert fix_png_chunks(other) == (other, "")
    assert fix_png_chunks(data + b"trailing")[0].endswith(b"IEND\xaeB`\x82trailing")


# --- Where the build stores PNGs ---------------------------------------------------------


def _saved(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **params)
    return out.getvalue()


def _kinds(png: bytes) -> list[bytes]:
    return [kind for kind, _, _ in chunks(png)]


def test_tf_mode_fixes_a_kept_png_and_passthrough_keeps_every_byte():
    data = CASES["hp_rgb"][0]
    stored, info = encode_image(data, EncodeSettings())
    assert stored == fix_png_chunks(data)[0] and b"iCCP" not in stored
    assert (info.format, info.source_format, info.png_fix) == ("png", "png", "iccp_to_srgb")
    stored, info = encode_image(data, EncodeSettings(mode="passthrough"))
    assert stored is data and info.png_fix == ""
    plain = imagegen.png()
    stored, info = encode_image(plain, EncodeSettings())
    assert stored is plain and info.png_fix == ""


def test_tf_mode_fixes_the_profile_pillow_copies_into_a_converted_png():
    tiff = _saved(imagegen.image("RGB", 13, 7), "TIFF", icc_profile=HP_SRGB)
    assert b"iCCP" in _kinds(first_frame_png(tiff))  # Pillow writes the source's profile into the PNG
    stored, info = encode_image(tiff, EncodeSettings())
    assert b"iCCP" not in _kinds(stored) and b"sRGB" in _kinds(stored)
    assert (info.format, info.source_format, info.png_fix) == ("png", "tiff", "iccp_to_srgb")


@pytest.mark.parametrize("grayscale, fix", [(False, "iccp_to_srgb"), (True, "iccp_dropped")])
def test_reencode_fixes_the_profile_pillow_copies_into_its_png(grayscale, fix):
    jpeg = _saved(imagegen.image("RGB", 13, 7), "JPEG", icc_profile=HP_SRGB)
    settings = EncodeSettings(mode="reencode", image_format="png", grayscale=grayscale)
    stored, info = encode_image(jpeg, settings)
    assert b"iCCP" not in _kinds(stored) and info.png_fix == fix
    stored, info = encode_image(jpeg, EncodeSettings(mode="reencode", image_format="jpeg"))
    assert info.png_fix == "" and stored[:2] == b"\xff\xd8"  # libjpeg has no such warnings
    stored, info = encode_image(jpeg, EncodeSettings(mode="raw"))
    assert info.png_fix == ""


@pytest.mark.parametrize("name", ["hp_rgb", "rgb_profile_on_gray", "gray_profile"])
def test_a_plan_measures_the_fixed_png_exactly(name):
    data = CASES[name][0]
    stored, info = encode_image(data, EncodeSettings())
    surveyed = survey_image(data, EncodeSettings())
    assert surveyed.exact and surveyed.stored_bytes == len(stored) and surveyed.info == info


def test_fixed_records_are_counted_per_fix():
    fixed = ImageInfo("png", 7, 13, 3, "png", png_fix="iccp_to_srgb")
    converted = ImageInfo("png", 7, 13, 3, "tiff", png_fix="iccp_dropped")
    assert image_count_keys(fixed) == [("source_formats", "png"), ("png_chunks_fixed", "iccp_to_srgb")]
    assert ("png_chunks_fixed", "iccp_dropped") in image_count_keys(converted)
    counts = image_counts([(key, 2) for key in image_count_keys(fixed)]
                          + [(key, 1) for key in image_count_keys(converted)])
    assert counts["png_chunks_fixed"] == {"iccp_dropped": 1, "iccp_to_srgb": 2}
    assert image_counts([])["png_chunks_fixed"] == {}
    assert set(PNG_CHUNK_FIXES) == {"iccp_to_srgb", "iccp_dropped"}


@pytest.mark.parametrize("run", [None, RunSlice("/tmp/run-1", 10, 200)])
def test_image_meta_keeps_its_png_fix_through_pickling(run):
    meta = ImageMeta(SourceImage("/data/a.png", "a.png", "train", "a"), 0, "ab" * 32,
                     ImageInfo("png", 7, 13, 3, "png", png_fix="iccp_to_srgb"), 1000, 5, run=run)
    assert pickle.loads(pickle.dumps(meta, pickle.HIGHEST_PROTOCOL)) == meta
