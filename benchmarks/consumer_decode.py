"""Decodes every record of a shard set as TensorFlow does, then as torchvision does, and compares.

A record is right when its consumer reads it as the README says. TensorFlow
is the reference consumer (the tests run it); torchvision is another, and its
wheels need not install where the tests run. So the check is in two steps,
each where its consumer is installed:

    # where TensorFlow is: what tf.io.decode_image(channels=3) gives each record
    python -m benchmarks.consumer_decode --shards OUT/train-*.tfrecord --reference ref.json
    # where torchvision is (CPU, and the GPU's JPEG decoder when CUDA is there)
    python -m benchmarks.consumer_decode --shards OUT/train-*.tfrecord --check ref.json

The check decodes ``image/encoded`` with ``torchvision.io.decode_image(mode=RGB)``
(and JPEGs again with ``decode_jpeg(device="cuda")``) and counts, per format,
the records whose decoded shape is the recorded ``image/height`` x
``image/width`` x 3, whose pixels equal TensorFlow's (sha256 of the uint8
array; a 16-bit PNG, which torchvision decodes to uint16, compared by its
high byte, as TF's ``decode_image`` keeps it), and, where they do not (JPEG decoders may round differently), the
largest difference between the two decodes' 16 x 16 block means (a wrongly
turned or coloured image differs by tens; a rounding difference by about 1).
It prints one JSON object and exits 1 if any record failed to decode, had
another shape, or differs from TensorFlow's by more than ``--tolerance``.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from transforms.example.codec import decode_example  # noqa: E402
from transforms.tfrecord.framing import iter_records  # noqa: E402


def _records(patterns: list[str]):
    """Yields ``(image/filename, format, height, width, encoded bytes)`` of every record, in file order."""
    for path in sorted(p for pattern in patterns for p in glob.glob(pattern)):
        with open(path, "rb") as fh:
            for offset, data in iter_records(fh, path):
                features = decode_example(data)
                value = lambda name: features[name][1][0]  # noqa: E731
                yield (value("image/filename").decode("utf-8", "replace"), value("image/format").decode(),
                       value("image/height"), value("image/width"), value("image/encoded"))


def reference(patterns: list[str]) -> dict:
    """TensorFlow's decoded shape and pixel sha256 of every record."""
    import tensorflow as tf

    out = {}
    for name, fmt, height, width, encoded in _records(patterns):
        pixels = tf.io.decode_image(encoded, channels=3, expand_animations=False).numpy()
        out[name] = {"format": fmt, "shape": list(pixels.shape), "recorded": [height, width, 3],
                     "sha256": hashlib.sha256(pixels.tobytes()).hexdigest(), "blocks": _blocks(pixels)}
    return out


def check(patterns: list[str], ref: dict, tolerance: float) -> dict:
    """torchvision's decodes against the reference, counted per format."""
    import torch
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg

    cuda = torch.cuda.is_available()
    formats: dict[str, dict] = {}
    failures = []
    for name, fmt, height, width, encoded in _records(patterns):
        row = formats.setdefault(fmt, {"records": 0, "shape_ok": 0, "pixels_equal_tf": 0, "max_abs_diff": 0,
                                       "16_bit": 0,
                                       "gpu_shape_ok": 0, "gpu_pixels_equal_tf": 0, "gpu_max_abs_diff": 0})
        row["records"] += 1
        data = torch.frombuffer(bytearray(encoded), dtype=torch.uint8)
        decodes = [("", lambda: decode_image(data, mode=ImageReadMode.RGB))]
        if cuda and fmt == "jpeg":
            decodes.append(("gpu_", lambda: decode_jpeg(data, mode=ImageReadMode.RGB, device="cuda").cpu()))
        for prefix, decode in decodes:
            try:
                chw = decode()
            except (RuntimeError, ValueError) as exc:
                failures.append(f"{prefix}{name} ({fmt}): {str(exc).splitlines()[0]}")
                continue
            if chw.dtype == torch.uint16:  # 16-bit PNGs: torchvision keeps 16 bits, TF keeps the high byte
                row["16_bit"] += 1
                chw = (chw.to(torch.int32) >> 8).to(torch.uint8)
            pixels = chw.permute(1, 2, 0).contiguous().numpy()
            if list(pixels.shape) != [height, width, 3]:
                failures.append(f"{prefix}{name} ({fmt}): shape {list(pixels.shape)}, recorded {height}x{width}")
                continue
            row[prefix + "shape_ok"] += 1
            expected = ref.get(name)
            if expected and hashlib.sha256(pixels.tobytes()).hexdigest() == expected["sha256"]:
                row[prefix + "pixels_equal_tf"] += 1
            elif expected:
                diff = max(abs(a - b) for a, b in zip(_blocks(pixels), expected["blocks"]))
                row[prefix + "max_abs_diff"] = max(row[prefix + "max_abs_diff"], round(diff, 2))
                if diff > tolerance:
                    failures.append(f"{prefix}{name} ({fmt}): block means differ from TensorFlow's by {diff:.1f}")
    import torchvision

    return {"torch": torch.__version__, "torchvision": torchvision.__version__, "cuda": cuda,
            "formats": formats, "failures": failures}


def _blocks(pixels) -> list[float]:
    """The means of a 16 x 16 grid of blocks of an ``[h, w, 3]`` uint8 array, per channel (768 floats)."""
    import numpy as np

    rows = np.linspace(0, pixels.shape[0], 17).astype(int)
    cols = np.linspace(0, pixels.shape[1], 17).astype(int)
    out = []
    for r0, r1 in zip(rows, rows[1:]):
        for c0, c1 in zip(cols, cols[1:]):
            block = pixels[r0:max(r1, r0 + 1), c0:max(c1, c0 + 1)].reshape(-1, 3)
            out.extend(float(v) for v in block.mean(axis=0).round(3))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", nargs="+", required=True, help="Shard files or glob patterns.")
    parser.add_argument("--reference", help="Write TensorFlow's decodes to this JSON file.")
    parser.add_argument("--check", help="Compare torchvision's decodes with this reference JSON file.")
    parser.add_argument("--tolerance", type=float, default=4.0,
                        help="The largest difference of block means from TensorFlow's decode that passes.")
    args = parser.parse_args(argv)
    if bool(args.reference) == bool(args.check):
        parser.error("give one of --reference and --check")
    if args.reference:
        ref = reference(args.shards)
        with open(args.reference, "w") as fh:
            json.dump(ref, fh, indent=1, sort_keys=True)
        print(json.dumps({"records": len(ref), "reference": args.reference}))
        return
    with open(args.check) as fh:
        ref = json.load(fh)
    result = check(args.shards, ref, args.tolerance)
    print(json.dumps(result, indent=1, sort_keys=True))
    sys.exit(1 if result["failures"] else 0)


if __name__ == "__main__":
    main()
