"""``verify --decode_with``: each named decoder must decode every image to its record's size.

A record TensorFlow decodes may still be refused, or decoded to another size,
by the reader a trainer uses. These builds are verified with the real
decoders (real TensorFlow and Pillow; torchvision and DALI are not installed
in the test environment, and a decoder that is not installed is simulated for
the message it gives).
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

import pytest

from tests import imagegen
from tests.shard_fixtures import run_build, write
from transforms.verify import decoders
from transforms.verify.decoders import decoder_problems, missing_decoders, parse_decoders

pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[compat]')")


def _gif_with_small_first_frame() -> bytes:
    return imagegen.gif_with_small_first_frame()


_INPUTS = {
    "a/photo.jpg": imagegen.jpeg("RGB", size=(17, 9)),
    "a/rotated.jpg": imagegen.jpeg("RGB", size=(32, 24), exif_orientation=6),
    "a/gray.png": imagegen.png("L"),
    "b/frame.gif": _gif_with_small_first_frame(),
    "b/scan.tiff": imagegen.tiff(),
}


def _features(data: bytes, height: int, width: int) -> dict:
    return {"image/encoded": ("bytes", [data]), "image/format": ("bytes", [b"jpeg"]),
            "image/height": ("int64", [height]), "image/width": ("int64", [width])}


def test_decoder_problems_name_the_decoder_and_what_it_did():
    data = _INPUTS["a/photo.jpg"]
    assert decoder_problems(_features(data, 9, 17), ["tf", "pillow"]) == []
    assert decoder_problems(_features(data, 17, 9), ["pillow"]) == [
        "pillow decodes it to 9x17 (HxW); the record says 17x9"]
    [tf_line, pillow_line] = decoder_problems(_features(b"not an image", 9, 17), ["tf", "pillow"])
    assert tf_line.startswith("tf refuses the image: InvalidArgumentError: ")
    assert pillow_line.startswith("pillow refuses the image: UnidentifiedImageError: ")


def test_decoder_names_are_checked():
    assert parse_decoders("tf, pillow,tf") == ("tf", "pillow")
    for bad in ("tf,opencv", "", ","):
        with pytest.raises(ValueError, match="--decode_with takes decoders among tf, pillow, torchvision, dali"):
            parse_decoders(bad)
    assert missing_decoders(["tf", "pillow"]) == []


def _build(tmp_path, capsys, *flags: str) -> str:
    root, out = tmp_path / "in", str(tmp_path / "out")
    for name, data in _INPUTS.items():
        write(str(root / name), data)
    status, _, stderr = run_build(capsys, "--input", str(root), "--output_dir", out, "--num_shards", "1", *flags)
    assert status == 0, stderr
    return out


def _verify(capsys, *argv: str) -> tuple[int, str, str]:
    from beam_jobs import verify_shards

    capsys.readouterr()
    status = verify_shards.run(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_default_build_decodes_with_tensorflow_and_pillow(tmp_path, capsys):
    out = _build(tmp_path, capsys)
    status, stdout, stderr = _verify(capsys, "--output_dir", out, "--decode_with", "tf,pillow")
    assert status == 0, stdout + stderr


@pytest.mark.slow
def test_passthrough_records_other_decoders_refuse_or_size_otherwise_are_reported(tmp_path, capsys):
    out = _build(tmp_path, capsys, "--image_mode", "passthrough")
    report = str(tmp_path / "report.json")
    status, stdout, stderr = _verify(capsys, "--output_dir", out, "--decode_with", "tf,pillow", "--report", report)
    assert status == 1
    problems = json.load(open(report))["problems"]
    assert {p["kind"] for p in problems} == {"decoder_mismatch"}
    details = sorted(p["detail"] for p in problems)
    assert len(details) == 2, details
    # the GIF: TensorFlow decodes the first frame's rectangle (what the record says), Pillow the screen
    assert details[0] == "pillow decodes it to 10x20 (HxW); the record says 10x8"
    assert details[1].startswith("tf refuses the image: InvalidArgumentError: ")  # the TIFF
    assert "decoder_mismatch" in stdout


def test_a_decoder_that_is_not_installed_is_named_in_one_line(tmp_path, capsys, monkeypatch):
    out = _build(tmp_path, capsys)
    installed = decoders._installed
    monkeypatch.setattr(decoders, "_installed",
                        lambda module: module not in ("torchvision", "nvidia.dali") and installed(module))
    status, stdout, stderr = _verify(capsys, "--output_dir", out, "--decode_with", "tf,torchvision")
    assert status == 0, stdout + stderr
    assert ("verify_shards: --decode_with torchvision: torchvision is not installed (pip install torch "
            "torchvision); verifying without it\n") in stderr
    status, _, stderr = _verify(capsys, "--output_dir", out, "--decode_with", "dali")
    assert status == 2
    assert stderr.strip().splitlines()[-1] == (
        "verify_shards: error: --decode_with dali: nvidia.dali is not installed (see NVIDIA DALI's "
        "installation guide)")
    status, _, stderr = _verify(capsys, "--output_dir", out, "--decode_with", "opencv")
    assert status == 2 and "--decode_with takes decoders among" in stderr.strip().splitlines()[-1]
