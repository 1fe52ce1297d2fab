"""Faults: damaged images, archives, reshard memory and near-duplicates.

    python -m benchmarks.faults CASE [--quick] [ARG ...]

Cases:

- ``corruption``: Which damaged images each ``--validate`` level rejects, and what each costs.
- ``archives``: Building from an archive against building from the same photos extracted.
- ``reshard_memory``: Peak memory of the reshard job against the size of its input.
- ``near_duplicates``: What the near-duplicate check across splits finds and costs (``--near_duplicates``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass
from typing import Sequence

from benchmarks import common
from benchmarks.common import checkout_env, run_measured
from transforms.images import image_codec as codec


# -- case corruption --------------------------------------------------------------------------------------

_CORRUPTION_DOC = """Which damaged images each ``--validate`` level rejects, and what each costs.

    python -m benchmarks.faults corruption [--seed 1] [--rounds 5] [--out benchmarks/corruption.json]

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

Cost: ``read_image_info(data, LEVEL)`` over the intact files, MB/s of file
bytes in one thread, the median of ``--rounds`` rounds, all levels measured
in every round.

Prints the tables (Markdown) and writes to ``--out`` the counts, the cost and
every case where the levels above ``header`` disagree or TensorFlow fails on
a file some level passes, with each level's dead-letter reason and detail.
"""

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
    from PIL import Image
    import numpy as np

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
    from transforms.errors import ImageError
    from transforms.images.records import EncodeSettings
    from transforms.images.records import encode_image

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
        import numpy as np

        got = self.decode(data)
        if isinstance(got, str):
            return "tf error"
        same = got.shape == intact.shape and np.array_equal(got, intact)
        return "tf same" if same else "tf silent"


def _cost(samples: list[Sample], rounds: int, tf: _TensorFlow) -> dict:
    """MB/s of ``read_image_info`` per level (and of TensorFlow's decode) on the intact files."""
    cases = {level: (lambda data, level=level: codec.read_image_info(data, level)) for level in LEVELS}
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


def corruption_run(seed: int = 1, rounds: int = 5) -> dict:
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


def corruption_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_CORRUPTION_DOC.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the cost measurement")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "corruption.json"))
    args = parser.parse_args(argv)
    result = corruption_run(args.seed, args.rounds)
    print(table(result))
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


# -- case archives ----------------------------------------------------------------------------------------

_ARCHIVES_DOC = """Building from an archive against building from the same photos extracted.

    python -m benchmarks.faults archives [--photos FOLDER] [--rounds 2]

The photos (``benchmarks/common.py``, ~4,000 photos of ~110 KB in class
folders; default: the 440 MB dataset) and their first quarter are each
packed, once, into a tar (``tar -cf``: class folders), a tar of class tars
(ImageNet's layout) and a stored zip, in a scratch folder. Each input is then
built by ``beam_jobs.build_shards`` in a fresh process (one process: below
1 GiB of input), rounds interleaved, and measured: wall and CPU seconds, peak
RSS, and the bytes the process wrote to disk (``/proc/self/io``
``write_bytes``, read by the child as it ends: the shards, run files and
manifest, and any copy of the archive it would make).

Prints a Markdown table of medians: per input, whole-process wall and CPU
seconds and the marginal ones per added GB (full less quarter), each with its
ratio to the folder build's, peak RSS at both sizes, and MB written per MB of
input; then one JSON line with every run.
"""

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


archives_KINDS = ("folder", "tar", "tar_of_tars", "zip")


def _classes(root: str) -> list[str]:
    return sorted(name for name in os.listdir(root) if not name.startswith(".")
                  and os.path.isdir(os.path.join(root, name)))


def _files(folder: str) -> list[str]:
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def pack(root: str, kind: str, path: str) -> str:
    """``root``'s class folders as one input of ``kind`` at ``path`` (made once)."""
    if kind == "folder" or os.path.exists(path):
        return root if kind == "folder" else path
    partial = path + ".partial"
    if kind == "tar":
        with tarfile.open(partial, "w") as archive:
            for label in _classes(root):
                for name in _files(os.path.join(root, label)):
                    archive.add(os.path.join(root, label, name), arcname=f"{label}/{name}")
    elif kind == "tar_of_tars":
        inner = partial + ".inner"
        with tarfile.open(partial, "w") as outer:
            for label in _classes(root):
                with tarfile.open(inner, "w") as archive:
                    for name in _files(os.path.join(root, label)):
                        archive.add(os.path.join(root, label, name), arcname=name)
                outer.add(inner, arcname=f"{label}.tar")
        os.remove(inner)
    else:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as archive:  # JPEGs do not deflate
            for label in _classes(root):
                for name in _files(os.path.join(root, label)):
                    archive.write(os.path.join(root, label, name), f"{label}/{name}")
    os.rename(partial, path)
    return path


def _child(argv: list[str]) -> int:
    """Runs the build in this process, then prints the bytes it wrote to disk."""
    from beam_jobs import build_shards

    status = build_shards.run(argv)
    with open("/proc/self/io") as fh:
        io = dict(line.split(": ") for line in fh.read().splitlines())
    print(f"WRITE_BYTES {int(io['write_bytes'])}")
    return status


def _quarter(root: str, where: str) -> str:
    """The first quarter of each class folder's photos, hard-linked into ``where`` (made once)."""
    if not os.path.isdir(where):
        partial = where + ".partial"
        shutil.rmtree(partial, ignore_errors=True)
        for label in _classes(root):
            os.makedirs(os.path.join(partial, label))
            names = _files(os.path.join(root, label))
            for name in names[:len(names) // 4]:
                os.link(os.path.join(root, label, name), os.path.join(partial, label, name))
        os.rename(partial, where)
    return where


def _input_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(root)
               for name in names if not name.startswith("."))


def archives_run(full_root: str, quarter_root: str, rounds: int, scratch: str) -> dict:
    sizes = {"full": _input_bytes(full_root), "quarter": _input_bytes(quarter_root)}
    inputs = {(size, kind): pack(root, kind, os.path.join(scratch, f"{size}.{kind}.{'zip' if kind == 'zip' else 'tar'}"))
              for size, root in (("full", full_root), ("quarter", quarter_root)) for kind in archives_KINDS}
    runs = []
    env = checkout_env()
    for r in range(rounds):
        for (size, kind), source in inputs.items():
            out = os.path.join(scratch, "out")
            shutil.rmtree(out, ignore_errors=True)
            cmd = [sys.executable, "-m", "benchmarks.faults", "archives", "--child", "--input", source,
                   "--output_dir", out]
            m = run_measured(cmd, _ROOT, os.path.join(scratch, f"log-{size}-{kind}-{r}.txt"), env)
            if m.returncode != 0:
                raise SystemExit(f"{kind} {size} build failed:\n{m.output[-3000:]}")
            written = int(m.output.rsplit("WRITE_BYTES ", 1)[1].split()[0])
            records = json.load(open(os.path.join(out, "manifest.json")))["records"]
            runs.append({"round": r, "size": size, "kind": kind, "seconds": m.seconds, "cpu": m.cpu_seconds,
                         "rss": m.rss_process, "written": written, "records": records})
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    return {"input_bytes": sizes, "runs": runs}


def archives_table(result: dict) -> str:
    sizes = result["input_bytes"]
    gb = (sizes["full"] - sizes["quarter"]) / 1e9

    def med(kind: str, size: str, key: str) -> float:
        return statistics.median(r[key] for r in result["runs"] if r["kind"] == kind and r["size"] == size)

    def figures(kind: str) -> dict[str, float]:
        return {"wall": med(kind, "full", "seconds"), "cpu": med(kind, "full", "cpu"),
                "wall_gb": (med(kind, "full", "seconds") - med(kind, "quarter", "seconds")) / gb,
                "cpu_gb": (med(kind, "full", "cpu") - med(kind, "quarter", "cpu")) / gb}

    base = figures("folder")
    lines = ["| input | records | wall s (x folder) | CPU s (x folder) | wall s per added GB (x folder) | "
             "CPU s per added GB (x folder) | peak RSS quarter / full | MB written per MB in |",
             "|---|---|---|---|---|---|---|---|"]
    for kind in archives_KINDS:
        f = figures(kind)
        cells = [f"{f[key]:.2f} ({f[key] / base[key]:.2f})" for key in ("wall", "cpu", "wall_gb", "cpu_gb")]
        lines.append(f"| {kind} | {med(kind, 'full', 'records'):.0f} | " + " | ".join(cells) + " | "
                     f"{med(kind, 'quarter', 'rss') / 2**20:.0f} / {med(kind, 'full', 'rss') / 2**20:.0f} MiB | "
                     f"{med(kind, 'full', 'written') / sizes['full']:.2f} |")
    return "\n".join(lines)


def archives_main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    parser = argparse.ArgumentParser(description=_ARCHIVES_DOC.splitlines()[0])
    parser.add_argument("--photos", default=None, help="Folder of class folders (default: the 440 MB photos).")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scratch", default=None, help="Where the archives are packed (default: a temp folder).")
    args = parser.parse_args(argv)
    root = args.common.rstrip("/") if args.photos else common.dataset(440).root
    scratch = args.scratch or tempfile.mkdtemp(prefix="archives-bench-")
    os.makedirs(scratch, exist_ok=True)
    result = archives_run(root, _quarter(root, os.path.join(scratch, "quarter")), args.rounds, scratch)
    print(archives_table(result))
    print(json.dumps(result))
    return 0


# -- case reshard_memory ----------------------------------------------------------------------------------

_RESHARD_MEMORY_DOC = """Peak memory of the reshard job against the size of its input.

Writes uncompressed TFRecord files of random 100 KiB Example-like records
(``--sizes_mb``, default 200 and 1000 MB), reshards each into 64 MiB shards on
the DirectRunner in a fresh process, and reports that process tree's peak RSS
(``ru_maxrss`` of the child, from ``wait4``). Memory is bounded when the
larger input costs no more than 1.2x the smaller.

Run: ``python -m benchmarks.faults reshard_memory [--sizes_mb 200,1000] [--workdir DIR]``.
"""

RECORD_BYTES = 100 * 1024


def write_input(folder: str, size_mb: int, seed: int = 0) -> int:
    """Writes about ``size_mb`` MB of records in 100 MB files; returns the number of records."""
    from tests.helpers import encode_example
    from transforms.tfrecord.framing import frame_record

    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    count, written, index = 0, 0, 0
    while written < size_mb * 10**6:
        path = os.path.join(folder, f"in-{index:05d}.tfrecord")
        with open(path, "wb") as fh:
            file_bytes = 0
            while file_bytes < 100 * 10**6 and written < size_mb * 10**6:
                record = frame_record(encode_example({"image/encoded": rng.randbytes(RECORD_BYTES),
                                                      "image/class/label": count % 10}))
                fh.write(record)
                file_bytes += len(record)
                written += len(record)
                count += 1
        index += 1
    return count


def peak_rss_mib(argv: list[str]) -> tuple[float, float]:
    """(peak RSS in MiB of the command's process, wall seconds)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    err = proc.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"reshard failed: {err[-2000:]}")
    return usage.ru_maxrss / 1024, wall


def reshard_memory_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=_RESHARD_MEMORY_DOC.splitlines()[0])
    parser.add_argument("--sizes_mb", default="200,1000")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="reshard-memory-")
    rows = []
    for size in (int(s) for s in args.sizes_mb.split(",")):
        folder = os.path.join(work, f"in-{size}")
        records = write_input(folder, size)
        out = os.path.join(work, f"out-{size}")
        shutil.rmtree(out, ignore_errors=True)
        rss, wall = peak_rss_mib([sys.executable, "-m", "beam_jobs.reshard", "--input",
                                  os.path.join(folder, "*.tfrecord"), "--output_dir", out,
                                  "--split", "train", "--shard_size_mb", "64"])
        rows.append({"size_mb": size, "records": records, "peak_rss_mib": round(rss, 1),
                     "wall_s": round(wall, 1)})
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(rows, indent=1))
    if len(rows) > 1:
        print(f"peak RSS, largest over smallest: {rows[-1]['peak_rss_mib'] / rows[0]['peak_rss_mib']:.2f}x")


# -- case near_duplicates ---------------------------------------------------------------------------------

_NEAR_DUPLICATES_DOC = """What the near-duplicate check across splits finds and costs (``--near_duplicates``).

On the first ``--count`` photos of ``benchmarks/common.py`` (each a crop of
one of 17 photographs, resized, colour-jittered, sharpened, with grain):

- found: each photo's copy resized to 90% (bicubic) and saved at JPEG
  quality 80, against the photo: the distance between their hashes;
- false pairs: every pair of unrelated photos (cut from different
  photographs, or from one photograph but mirrored, or with crops
  overlapping less than ``RELATED_IOU``; scikit-image's motorcycle_left
  and motorcycle_right are one scene, a stereo pair): how many lie within
  each distance. Pairs of overlapping crops of one photograph are
  near-duplicates by any measure and are counted apart;
- the distance chosen: the smallest that finds every copy, and the false
  pairs there;
- cost: ``bucket_pairs`` over a full bucket (``DEFAULT_BUCKET_CAP``
  random hashes, a tenth of them in validation); ``inspect_image`` of every photo with and without the hash, one
  thread, alternating rounds (microseconds per image, seconds per GB, ratio),
  and whole builds (``--split_fractions train=0.9,validation=0.1``) with
  ``--near_duplicates off`` and ``report``, alternating, in one process
  each (wall and CPU seconds, ratio).

    python -m benchmarks.faults near_duplicates [--count 1000] [--rounds 3] [--photos DIR]

It prints a table and one JSON line.
"""

RELATED_IOU = 0.25
_SCENES = {"motorcycle_right.png": "motorcycle_left.png"}  # one scene, two cameras


def _near_duplicates_files(folder: str, count: int) -> list[str]:
    found = []
    for dirpath, _, names in os.walk(folder):
        found += [os.path.join(dirpath, n) for n in names if n.endswith(".jpg")]
    found.sort(key=lambda p: int(os.path.basename(p)[4:-4]))  # img_0000123.jpg
    if len(found) < count:
        raise SystemExit(f"{folder} holds {len(found)} photos, fewer than --count {count}")
    return found[:count]


def _copy(data: bytes) -> bytes:
    """The photo resized to 90% and saved at JPEG quality 80."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        w, h = image.size
        small = image.convert("RGB").resize((int(w * 0.9), int(h * 0.9)), Image.Resampling.BICUBIC)
    out = io.BytesIO()
    small.save(out, format="JPEG", quality=80)
    return out.getvalue()


def _iou(a: tuple, b: tuple) -> float:
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def related_matrix(indexes: list[int]) -> np.ndarray:
    """True where two photos are overlapping crops of one photograph (or scene), unmirrored alike."""
    import numpy as np

    recipes = [common.recipe(i) for i in indexes]
    n = len(recipes)
    related = np.zeros((n, n), dtype=bool)
    for i in range(n):
        a = recipes[i]
        for j in range(i + 1, n):
            b = recipes[j]
            same = _SCENES.get(a.source, a.source) == _SCENES.get(b.source, b.source)
            if same and a.flip == b.flip and _iou(a.box, b.box) >= RELATED_IOU:
                related[i, j] = related[j, i] = True
    return related


def quality(datas: list[bytes], indexes: list[int]) -> dict:
    from transforms.images.choices import DEFAULT_NEAR_DUPLICATE_DISTANCE
    from transforms.images.perceptual import perceptual_hash
    from transforms.images.perceptual import popcount
    import numpy as np

    hashes = np.array([perceptual_hash(d) for d in datas], dtype=np.uint64)
    copies = np.array([perceptual_hash(_copy(d)) for d in datas], dtype=np.uint64)
    found = popcount(hashes ^ copies).astype(int)
    apart = popcount(hashes[:, None] ^ hashes[None, :]).astype(int)
    upper = np.triu(np.ones(apart.shape, dtype=bool), 1)
    related = related_matrix(indexes)
    unrelated = apart[upper & ~related]
    near_related = apart[upper & related]
    chosen = int(found.max())
    return {"photos": len(datas), "copy_distance_max": chosen,
            "copy_distance_hist": np.bincount(found).tolist(),
            "unrelated_pairs": int(unrelated.size), "unrelated_min": int(unrelated.min()),
            "unrelated_within": {k: int((unrelated <= k).sum()) for k in range(0, 17, 2)},
            "related_pairs": int(near_related.size),
            "related_within": {k: int((near_related <= k).sum()) for k in range(0, 17, 2)},
            "smallest_distance_finding_every_copy": chosen,
            "false_pairs_at_default": int((unrelated <= DEFAULT_NEAR_DUPLICATE_DISTANCE).sum())}


def inspect_cost(datas: list[bytes], rounds: int) -> dict:
    from transforms.images.inspection import inspect_image
    from transforms.images.items import SourceImage
    from transforms.images.records import EncodeSettings

    settings = EncodeSettings()
    source = SourceImage("p.jpg", "p.jpg", "train", "a")
    times = {False: [], True: []}
    for _ in range(rounds):
        for hashed in (False, True):
            start = time.process_time()
            for data in datas:
                inspect_image(source, data, {"a": 0}, None, settings, 0, {}, hashed)
            times[hashed].append(time.process_time() - start)
    gb = sum(map(len, datas)) / 1e9
    plain, hashed = min(times[False]), min(times[True])
    return {"plain_us_per_image": plain / len(datas) * 1e6, "hashed_us_per_image": hashed / len(datas) * 1e6,
            "added_us_per_image": (hashed - plain) / len(datas) * 1e6,
            "plain_cpu_s_per_gb": plain / gb, "added_cpu_s_per_gb": (hashed - plain) / gb,
            "ratio": hashed / plain}


def compare_cost(rounds: int) -> dict:
    """``bucket_pairs`` over a full bucket (``DEFAULT_BUCKET_CAP`` random hashes, 90% train, 10% validation)."""
    from transforms.images.choices import DEFAULT_NEAR_DUPLICATE_DISTANCE
    from transforms.images.near_duplicates import DEFAULT_BUCKET_CAP
    from transforms.images.near_duplicates import HashedImage
    from transforms.images.near_duplicates import bucket_pairs
    import numpy as np

    rng = np.random.default_rng(0)
    values = rng.integers(0, 2**63, DEFAULT_BUCKET_CAP, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    members = [HashedImage(f"{i:064x}", int(v), "validation" if i % 10 == 0 else "train", f"{i}.jpg", f"{i}.jpg")
               for i, v in enumerate(values)]
    best = min(_timed(bucket_pairs, members, DEFAULT_NEAR_DUPLICATE_DISTANCE) for _ in range(rounds))
    return {"members": len(members), "ms_per_full_bucket": best * 1e3}


def _timed(fn, *args) -> float:
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


def _build(folder: str, out: str, mode: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "beam_jobs.build_shards", "--input", folder, "--output_dir", out,
                    "--split_fractions", "train=0.9,validation=0.1", "--near_duplicates", mode,
                    "--max_bad_fraction", "1"], cwd=_ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(out)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def build_cost(files: list[str], rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "in")
        for path in files:  # one class folder each: the build reads exactly these photos
            target = os.path.join(folder, os.path.basename(os.path.dirname(path)), os.path.basename(path))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.link(path, target) if os.stat(path).st_dev == os.stat(tmp).st_dev else shutil.copy(path, target)
        runs = {"off": [], "report": []}
        for _ in range(rounds):
            for mode in runs:
                runs[mode].append(_build(folder, os.path.join(tmp, "out"), mode))
    gb = sum(os.path.getsize(p) for p in files) / 1e9
    best = {mode: (min(w for w, _ in r), min(c for _, c in r)) for mode, r in runs.items()}
    return {"gb": gb, "off_wall_s": best["off"][0], "report_wall_s": best["report"][0],
            "off_cpu_s": best["off"][1], "report_cpu_s": best["report"][1],
            "wall_ratio": best["report"][0] / best["off"][0], "cpu_ratio": best["report"][1] / best["off"][1],
            "added_cpu_s_per_gb": (best["report"][1] - best["off"][1]) / gb}


def near_duplicates_main(argv: Sequence[str] | None = None) -> None:
    from transforms.images.choices import DEFAULT_NEAR_DUPLICATE_DISTANCE

    parser = argparse.ArgumentParser(description=_NEAR_DUPLICATES_DOC.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--photos", default=None, help="A folder of common.py's photos (default: made here).")
    parser.add_argument("--skip_builds", action="store_true")
    args = parser.parse_args(argv)
    folder = args.photos or common.dataset(args.count * common.MEAN_BYTES / 1e6 * 1.2).root
    files = _near_duplicates_files(folder, args.count)
    indexes = [int(os.path.basename(p)[4:-4]) for p in files]
    datas = [open(p, "rb").read() for p in files]
    result = {"quality": quality(datas, indexes), "inspect": inspect_cost(datas, args.rounds),
              "compare": compare_cost(args.rounds)}
    if not args.skip_builds:
        result["build"] = build_cost(files, args.rounds)
    q, c = result["quality"], result["inspect"]
    print(f"copies (90% + JPEG q80) of {q['photos']} photos: distance max {q['copy_distance_max']}, "
          f"histogram {q['copy_distance_hist']}")
    print(f"unrelated pairs: {q['unrelated_pairs']}, min distance {q['unrelated_min']}, within k: "
          f"{q['unrelated_within']}")
    print(f"overlapping crops of one photograph: {q['related_pairs']}, within k: {q['related_within']}")
    print(f"default distance {DEFAULT_NEAR_DUPLICATE_DISTANCE}: false pairs {q['false_pairs_at_default']}")
    print(f"inspect_image: {c['plain_us_per_image']:.0f} -> {c['hashed_us_per_image']:.0f} us/image "
          f"(+{c['added_us_per_image']:.0f}; {c['plain_cpu_s_per_gb']:.2f} + {c['added_cpu_s_per_gb']:.2f} "
          f"CPU s/GB; {c['ratio']:.2f}x)")
    print(f"a full bucket of {result['compare']['members']} hashes (90% train) compared in "
          f"{result['compare']['ms_per_full_bucket']:.0f} ms")
    if "build" in result:
        b = result["build"]
        print(f"build of {b['gb'] * 1e3:.0f} MB: off {b['off_wall_s']:.1f} s wall / {b['off_cpu_s']:.1f} CPU s, "
              f"report {b['report_wall_s']:.1f} s / {b['report_cpu_s']:.1f} CPU s "
              f"({b['wall_ratio']:.2f}x wall, {b['cpu_ratio']:.2f}x CPU; +{b['added_cpu_s_per_gb']:.1f} CPU s/GB)")
    print(json.dumps(result))


CASES = {
    "corruption": common.Case(corruption_main, _CORRUPTION_DOC, ("--rounds", "1", "--out", os.devnull)),
    "archives": common.Case(archives_main, _ARCHIVES_DOC, ("--rounds", "1")),
    "reshard_memory": common.Case(reshard_memory_main, _RESHARD_MEMORY_DOC, ("--sizes_mb", "4,8")),
    "near_duplicates": common.Case(near_duplicates_main, _NEAR_DUPLICATES_DOC,
                                   ("--count", "40", "--rounds", "1", "--skip_builds")),
}


if __name__ == "__main__":
    sys.exit(common.run_case(CASES, sys.argv[1:]))
