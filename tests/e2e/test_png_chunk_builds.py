"""A build stores PNGs that real TensorFlow decodes without libpng's warnings.

TensorFlow printed 223 ``PNG warning: iCCP: known incorrect sRGB profile``
lines reading one shard set. The real build job runs on PNGs (and a TIFF
that becomes a PNG) whose iCCP chunk makes libpng warn; the records are read
back and decoded with ``tf.io.decode_png`` in a subprocess, whose stderr must
hold no ``PNG warning``, with the source's pixels. ``passthrough`` keeps every
source byte. The summary and the manifest count the fixed records.
"""

from __future__ import annotations

import hashlib
import io

import pytest
from PIL import Image

from tests import imagegen
from tests.icc_fixtures import HP_SRGB, chunk, iccp, png_with, png_warnings, tensorflow_decodes
from tests.shard_fixtures import build_records, load_manifest

_INPUTS = {
    "a/hp.png": png_with("RGB", iccp(HP_SRGB)),
    "a/hp_gamma.png": png_with("RGBA", iccp(HP_SRGB, b"Photoshop ICC profile"),
                               chunk(b"gAMA", (45455).to_bytes(4, "big"))),
    "a/rgb_profile_on_gray.png": png_with("L", iccp(HP_SRGB)),
    "a/plain.png": imagegen.png(),
    "b/hp.tiff": imagegen.encode(imagegen.image("RGB", 13, 7), "TIFF", icc_profile=HP_SRGB),
}
_WARNED = ("a/hp.png", "a/hp_gamma.png", "a/rgb_profile_on_gray.png")


def _build(tmp_path, capsys, *flags: str) -> tuple[str, str, dict[str, dict]]:
    return build_records(tmp_path, capsys, _INPUTS, *flags)


@pytest.mark.slow
def test_default_build_stores_pngs_tensorflow_decodes_without_warnings(tmp_path, capsys):
    out, stdout, records = _build(tmp_path, capsys)
    sources = [_INPUTS[name] for name in _WARNED]
    stored = [records[name]["image/encoded"] for name in sorted(records)]
    decoded = tensorflow_decodes(sources + stored, str(tmp_path))
    before, after = decoded[:len(sources)], dict(zip(sorted(records), decoded[len(sources):]))
    assert all(png_warnings(result) for result in before)  # the sources make libpng warn
    assert {name: png_warnings(result) for name, result in after.items()} == {name: [] for name in records}
    for name, result in zip(_WARNED, before):
        assert after[name]["pixels"] == result["pixels"]
    tiff = Image.open(io.BytesIO(_INPUTS["b/hp.tiff"]))
    assert records["b/hp.tiff"]["image/format"] == b"png"
    assert Image.open(io.BytesIO(records["b/hp.tiff"]["image/encoded"])).tobytes() == tiff.tobytes()
    for name, ex in records.items():  # the key stays the source's sha256
        assert ex["image/key/sha256"].decode() == hashlib.sha256(_INPUTS[name]).hexdigest()
    assert records["a/plain.png"]["image/encoded"] == _INPUTS["a/plain.png"]
    images = load_manifest(out)["images"]
    assert images["png_chunks_fixed"] == {"iccp_dropped": 1, "iccp_to_srgb": 3}
    assert images["converted"] == {"tiff": 1}
    assert ("  PNG chunks fixed for TensorFlow: 4 records (iCCP profile libpng rejects -> dropped: 1; "
            "iCCP known incorrect sRGB profile -> sRGB: 3)\n") in stdout


@pytest.mark.slow
def test_passthrough_keeps_every_source_byte(tmp_path, capsys):
    out, stdout, records = _build(tmp_path, capsys, "--image_mode", "passthrough")
    for name, ex in records.items():
        assert ex["image/encoded"] == _INPUTS[name]
    assert load_manifest(out)["images"]["png_chunks_fixed"] == {}
    assert "PNG chunks fixed" not in stdout


@pytest.mark.slow
def test_reencode_to_png_is_counted_too(tmp_path, capsys):
    out, stdout, records = _build(tmp_path, capsys, "--image_mode", "reencode", "--image_format", "png",
                                  "--grayscale")
    decoded = tensorflow_decodes([ex["image/encoded"] for ex in records.values()], str(tmp_path))
    assert [png_warnings(result) for result in decoded] == [[]] * len(records)
    # Pillow copies the source's RGB profile into each gray PNG but the composited RGBA one's.
    assert load_manifest(out)["images"]["png_chunks_fixed"] == {"iccp_dropped": 3}
    assert ("  PNG chunks fixed for TensorFlow: 3 records (iCCP profile libpng rejects -> dropped: 3)\n"
            in stdout)


@pytest.mark.slow
def test_verify_decodes_the_fixed_records(tmp_path, capsys):
    from beam_jobs import verify_shards

    out, _, _ = _build(tmp_path, capsys)
    assert verify_shards.run(["--output_dir", out, "--decode_images"]) == 0
