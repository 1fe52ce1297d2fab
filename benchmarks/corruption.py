"""Which damaged images each ``--validate`` level rejects, and what each costs.

    python -m benchmarks.corruption [--seed 1] [--rounds 5] [--out benchmarks/corruption.json]

The corpus (deterministic): the JPEGs scikit-image and scikit-learn ship
(hubble_deep_field, retina, rocket, china, flower), JPEGs Pillow makes from
scikit-image's PNGs (baseline, progressive, restart markers, grayscale, CMYK,
4:4:4, EXIF), scikit-image's own PNGs, and PNGs Pillow makes from them
(RGB, RGBA, gray, palette, 16-bit gray).

From every file, with generators seeded by the file's name and ``--seed``:

- ``truncated``: the first 5%, 10%, ..., 95% of the file;
- ``flip (header)``: 5 single bytes XORed with a random non-zero value, at
  random offsets before the image data (JPEG: before the first scan's
  entropy-coded data; PNG: before the first IDAT's data);
- ``flip (data)``: 15 bytes likewise, inside the image data (JPEG: from the
  first scan to the end; PNG: inside IDAT data, CRCs included);
- ``zeroed 4 KiB``: 10 random 4 KiB-aligned blocks set to zero.

A corruption that leaves the bytes as they were (a zero block of zeros) is
dropped. Each damaged file goes through the build's default image mode,
``encode_image(data, EncodeSettings(mode="tf", validate=LEVEL))``, for every
level; caught means it raised ``ImageError`` (a dead letter). It also goes to
``tf.io.decode_image(data, expand_animations=False)`` (if TensorFlow is
installed), what a training loop does with the record when validation lets it
through: ``tf error`` (the input pipeline fails), ``tf silent`` (decodes, but
the pixels differ from the intact file's) or ``tf same`` (harmless: identical
pixels, e.g. a byte flipped in EXIF).

Cost: ``inspect_image(data, LEVEL)`` over the intact files, MB/s of file
bytes in one thread, the median of ``--rounds`` rounds, all levels measured
in every round.

Prints the tables (Markdown) and writes to ``--out`` the counts, the cost and
every case where the levels above ``header`` disagree or TensorFlow fails on
a file some level passes, with each level's dead-letter reason and detail.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import statistics
import sys
import time
import zlib
from dataclasses import dataclass

import numpy as np
from PIL import Image

from transforms.errors import ImageError
from transforms.images import codec
from transforms.images.records import EncodeSettings, encode_image

__all__ = ["corpus", "corruptions", "run"]

LEVELS = codec.VALIDATE_LEVELS
KINDS = ("truncated", "flip (header)", "flip (data)", "zeroed 4 KiB")
_BLOCK = 4096


@dataclass(frozen=True)
class Sample:
    """One intact file of the corpus."""

    name: str
    format: str
    data: bytes


def _data_dirs() -> tuple[str, str]:
    import skimage
    import sklearn

    return skimage.data_dir, os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images")


def _saved(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **params)
    return out.getvalue()


def corpus() -> list[Sample]:
    """The intact JPEGs and PNGs, real files first, then files Pillow makes."""
    skimage_dir, sklearn_dir = _data_dirs()
    samples = []
    for folder, names in ((skimage_dir, ("hubble_deep_field.jpg", "retina.jpg", "rocket.jpg")),
                          (sklearn_dir, ("china.jpg", "flower.jpg"))):
        for name in names:
            with open(os.path.join(folder, name), "rb") as fh:
                samples.append(Sample(name, "jpeg", fh.read()))

    def source(name: str) -> Image.Image:
        with Image.open(os.path.join(skimage_dir, name)) as img:
            img.load()
            return img

    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x010F] = "Benchmark Camera"
    made_jpegs = {
        "astronaut-q90.jpg": (source("astronaut.png").convert("RGB"), dict(quality=90)),
        "chelsea-progressive.jpg": (source("chelsea.png").convert("RGB"),
                                    dict(quality=88, progressive=True)),
        "coffee-restart.jpg": (source("coffee.png").convert("RGB"),
                               dict(quality=92, restart_marker_blocks=8)),
        "camera-gray.jpg": (source("camera.png").convert("L"), dict(quality=85)),
        "ihc-cmyk.jpg": (source("ihc.png").convert("CMYK"), dict(quality=90)),
        "motorcycle-444-optimized.jpg": (source("motorcycle_left.png").convert("RGB"),
                                         dict(quality=95, subsampling=0, optimize=True)),
        "coins-exif.jpg": (source("coins.png").convert("RGB"), dict(quality=80, exif=exif)),
    }
    for name, (img, params) in made_jpegs.items():
        samples.append(Sample(name, "jpeg", _saved(img, "JPEG", **params)))
    for name in ("astronaut.png", "chelsea.png", "coffee.png", "camera.png", "coins.png",
                 "brick.png", "moon.png", "page.png", "logo.png", "motorcycle_right.png"):
        with open(os.path.join(skimage_dir, name), "rb") as fh:
            samples.append(Sample(name, "png", fh.read()))
    gray16 = np.asarray(source("camera.png").convert("L"), dtype=np.uint16) * 257
    made_pngs = {
        "gravel-pillow.png": source("gravel.png").convert("L"),
        "chelsea-palette.png": source("chelsea.png").convert("RGB").quantize(64),
        "ihc-rgba.png": source("ihc.png").convert("RGBA"),
        "camera-16bit.png": Image.fromarray(gray16),
    }
    for name, img in made_pngs.items():
        samples.append(Sample(name, "png", _saved(img, "PNG")))
    return samples


def _data_start(sample: Sample) -> int:
    """Offset where the image data starts: the first scan's entropy data, or the first IDAT's data."""
    data = sample.data
    if sample.format == "png":
        return data.index(b"IDAT") + 4
    pos = 2
    while True:
        pos = data.index(b"\xff", pos)
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if marker == 0xDA:
            return pos + 2 + length
        pos += 2 + length


def corruptions(sample: Sample, seed: int) -> list[tuple[str, int, bytes]]:
    """``(kind, offset, damaged bytes)`` of every corruption of one file (see the module docstring)."""
    data = sample.data
    size = len(data)
    rng = random.Random(f"{seed}:{zlib.crc32(sample.name.encode())}")
    out = [("truncated", size * pct // 100, data[:size * pct // 100]) for pct in range(5, 100, 5)]
    start = _data_start(sample)
    for kind, low, high, count in (("flip (header)", 2, start, 5),
                                   ("flip (data)", start, size - 2, 15)):
        for _ in range(count):
            at = rng.randrange(low, high)
            damaged = bytearray(data)
            damaged[at] ^= rng.randrange(1, 256)
            out.append((kind, at, bytes(damaged)))
    blocks = rng.sample(range(size // _BLOCK + 1), min(10, size // _BLOCK + 1))
    for block in blocks:
        at = block * _BLOCK
        damaged = bytearray(data)
        damaged[at:at + _BLOCK] = bytes(len(damaged[at:at + _BLOCK]))
        out.append(("zeroed 4 KiB", at, bytes(damaged)))
    return [(kind, at, damaged) for kind, at, damaged in out if damaged != data]


def _caught(data: bytes, level: str) -> str:
    """The dead-letter reason and detail the build gives, or '' when it keeps the image."""
    try:
        encode_image(data, EncodeSettings(mode="tf", validate=level))
    except ImageError as err:
        return str(err)
    return ""


class _TensorFlow:
    """``tf.io.decode_image`` as a training loop calls it, or nothing if TensorFlow is missing."""

    def __init__(self) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        try:
            import tensorflow as tf
        except ImportError:
            self.tf = None
            return
        self.tf = tf

    def decode(self, data: bytes) -> np.ndarray | str:
        try:
            return self.tf.io.decode_image(data, expand_animations=False).numpy()
        except (self.tf.errors.InvalidArgumentError, self.tf.errors.UnknownError) as err:
            return err.message.splitlines()[0]

    def verdict(self, data: bytes, intact: np.ndarray) -> str:
        """``tf error``, ``tf silent`` or ``tf same``."""
        got = self.decode(data)
        if isinstance(got, str):
            return "tf error"
        same = got.shape == intact.shape and np.array_equal(got, intact)
        return "tf same" if same else "tf silent"


def _cost(samples: list[Sample], rounds: int, tf: _TensorFlow) -> dict:
    """MB/s of ``inspect_image`` per level (and of TensorFlow's decode) on the intact files."""
    cases = {level: (lambda data, level=level: codec.inspect_image(data, level)) for level in LEVELS}
    if tf.tf is not None:
        cases["tf.io.decode_image"] = tf.decode
    times: dict[tuple[str, str], list[float]] = {}
    for sample in samples:  # warm up: plugins, caches
        for run in cases.values():
            run(sample.data)
    for _ in range(rounds):
        for name, run in cases.items():
            for fmt in ("jpeg", "png"):
                group = [s.data for s in samples if s.format == fmt]
                began = time.perf_counter()
                for data in group:
                    run(data)
                times.setdefault((name, fmt), []).append(time.perf_counter() - began)
    out = {}
    for name in cases:
        row = {}
        total_bytes = total_secs = 0.0
        for fmt in ("jpeg", "png"):
            size = sum(len(s.data) for s in samples if s.format == fmt)
            secs = statistics.median(times[(name, fmt)])
            row[fmt] = round(size / secs / 1e6, 1)
            total_bytes += size
            total_secs += secs
        row["all"] = round(total_bytes / total_secs / 1e6, 1)
        out[name] = row
    return out


@contextlib.contextmanager
def _quiet_stderr():
    """Sends file descriptor 2 (where libjpeg inside TensorFlow prints) to /dev/null."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def run(seed: int = 1, rounds: int = 5) -> dict:
    """Builds the corpus, damages it, checks every corruption; returns the results."""
    samples = corpus()
    tf = _TensorFlow()
    intact = {s.name: tf.decode(s.data) for s in samples} if tf.tf is not None else {}
    for s in samples:  # the corpus itself must pass every level
        for level in LEVELS:
            problem = _caught(s.data, level)
            if problem:
                raise SystemExit(f"intact {s.name} fails --validate {level}: {problem}")
    rows: dict[str, dict] = {}
    cases = []
    with _quiet_stderr():  # libjpeg's "Corrupt JPEG data" warnings, one per damaged file
        _check_all(samples, seed, tf, intact, rows, cases)
    keys = [f"{fmt} {kind}" for fmt in ("jpeg", "png") for kind in KINDS]
    rows = {key: rows[key] for key in keys if key in rows}
    total = {name: sum(row[name] for row in rows.values()) for name in next(iter(rows.values()))}
    rows["all"] = total
    return {"seed": seed, "rounds": rounds,
            "files": {s.name: {"format": s.format, "bytes": len(s.data)} for s in samples},
            "rows": rows, "cost_mb_per_s": _cost(samples, rounds, tf),
            "disagreements": [case for case in cases if _disagree(case)]}


def _disagree(case: dict) -> bool:
    """Cases where the levels above ``header`` differ, or TensorFlow fails where one passes."""
    caught = [bool(case[level]) for level in LEVELS if level != "header"]
    return len(set(caught)) > 1 or (case["tf"] == "tf error" and not all(caught))


def _check_all(samples: list[Sample], seed: int, tf: _TensorFlow, intact: dict,
               rows: dict[str, dict], cases: list[dict]) -> None:
    """Adds every corruption's outcome to ``rows`` (counts per class) and ``cases`` (one each)."""
    for sample in samples:
        for kind, at, damaged in corruptions(sample, seed):
            caught = {level: _caught(damaged, level) for level in LEVELS}
            verdict = tf.verdict(damaged, intact[sample.name]) if tf.tf is not None else ""
            key = f"{sample.format} {kind}"
            row = rows.setdefault(key, {"cases": 0, **{lv: 0 for lv in LEVELS},
                                        "tf error": 0, "tf silent": 0, "tf same": 0,
                                        **{f"tf error, passes {lv}": 0 for lv in LEVELS}})
            row["cases"] += 1
            for level in LEVELS:
                row[level] += bool(caught[level])
                if verdict == "tf error" and not caught[level]:
                    row[f"tf error, passes {level}"] += 1
            if verdict:
                row[verdict] += 1
            cases.append({"file": sample.name, "format": sample.format, "kind": kind,
                          "offset": at, "tf": verdict, **caught})


def table(result: dict) -> str:
    """The results as Markdown tables: corruptions caught, then cost."""
    levels = list(LEVELS)
    head = ["corruption", "cases", *levels, "tf error", "tf silent", "tf same",
            *(f"tf error, passes {lv}" for lv in levels)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, row in result["rows"].items():
        lines.append("| " + " | ".join([key] + [str(row[h]) for h in head[1:]]) + " |")
    cost = result["cost_mb_per_s"]
    lines += ["", "| MB/s, one thread | JPEG | PNG | all |", "|---|---|---|---|"]
    for name, row in cost.items():
        lines.append(f"| {name} | {row['jpeg']} | {row['png']} | {row['all']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the cost measurement")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "corruption.json"))
    args = parser.parse_args(argv)
    result = run(args.seed, args.rounds)
    print(table(result))
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
