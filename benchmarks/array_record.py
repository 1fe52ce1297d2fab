"""ArrayRecord shards against TFRecord ones: build CPU per added GB, and Grain's random access.

    python -m benchmarks.array_record [--input PHOTOS] [--size_mb 60] [--rounds 2] [--reads 10000]

1. Build: the same folder (``--input``, else noise JPEGs of about 90 KB generated once into
   ``benchmarks/.cache/noise-<size>mb``) and its first quarter are built with ``--format
   tfrecord`` and ``--format array_record`` (``--num_shards 8``), each run a fresh process,
   rounds interleaved. Prints median CPU and wall seconds per build and per added GB (full
   less quarter), and the ArrayRecord build's ratio to the TFRecord one's.
2. Random access: 10,000 random record indices (seed 0) read through Grain's
   ``ArrayRecordDataSource`` from the full ArrayRecord build's shards, and from files holding
   the same records written by ArrayRecord's own ``ArrayRecordWriter`` with the same options
   (``group_size:1,uncompressed``), one file per shard; each a fresh source, median of
   ``--rounds``. Prints records per second of each, their ratio, and whether the two sets of
   files are byte-identical.

Ends with one JSON line of every figure.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks.measure import checkout_env, interleaved_rounds, machine  # noqa: E402

__all__ = ["noise_photos", "run"]

_CACHE = os.path.join(_ROOT, "benchmarks", ".cache")


def noise_photos(size_mb: float) -> str:
    """A folder of 4 class folders of noise JPEGs (about 90 KB each) totalling ``size_mb`` MB; made once."""
    import numpy as np
    from PIL import Image

    root = os.path.join(_CACHE, f"noise-{size_mb:g}mb")
    if os.path.isdir(root):
        return root
    rng = np.random.default_rng(0)
    partial, total, index = root + ".partial", 0, 0
    while total < size_mb * 1e6:
        pixels = rng.integers(0, 256, (180, 200, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
        path = os.path.join(partial, f"class{index % 4}", f"{index:05d}.jpg")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(buffer.getvalue())
        total += buffer.tell()
        index += 1
    os.rename(partial, root)
    return root


def _quarter(root: str, tmp: str) -> str:
    """A folder of links to the first quarter of each class folder's files."""
    quarter = os.path.join(tmp, "quarter")
    for name in sorted(os.listdir(root)):
        files = sorted(os.listdir(os.path.join(root, name)))
        os.makedirs(os.path.join(quarter, name))
        for file in files[: len(files) // 4]:
            os.symlink(os.path.join(root, name, file), os.path.join(quarter, name, file))
    return quarter


def _size(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files)


def _build(src: str, file_format: str):
    return lambda out: [sys.executable, "-m", "beam_jobs.build_shards", "--input", src, "--output_dir", out,
                        "--num_shards", "8", "--format", file_format]


def _read_rate(files: list[str], indexes: list[int]) -> float:
    """Records per second reading ``indexes`` one by one through Grain's ArrayRecordDataSource."""
    import grain

    source = grain.sources.ArrayRecordDataSource(files)
    started = time.perf_counter()
    for index in indexes:
        source[index]
    return len(indexes) / (time.perf_counter() - started)


def run(root: str, rounds: int, reads: int) -> dict:
    from array_record.python.array_record_module import ArrayRecordWriter

    from transforms.arrayrecord.shard_file import WRITER_OPTIONS, read_records

    env = checkout_env()
    result: dict = {"machine": machine(), "input": root}
    with tempfile.TemporaryDirectory(prefix="bench-array-record-") as tmp:
        inputs = {"full": root, "quarter": _quarter(root, tmp)}
        result["input_bytes"] = {name: _size(path) for name, path in inputs.items()}
        kept = os.path.join(tmp, "kept")

        def keep(name: str, out: str) -> None:
            if name == "full array_record" and not os.path.isdir(kept):
                os.rename(out, kept)

        cases = {f"{size} {fmt}": _build(path, fmt) for size, path in inputs.items()
                 for fmt in ("tfrecord", "array_record")}
        found = interleaved_rounds(cases, rounds, tmp, env, after=keep)
        med = {name: (statistics.median(s for s, _ in runs), statistics.median(c for _, c in runs))
               for name, runs in found.items()}
        added_gb = (result["input_bytes"]["full"] - result["input_bytes"]["quarter"]) / 1e9
        per_gb = {fmt: tuple((med[f"full {fmt}"][i] - med[f"quarter {fmt}"][i]) / added_gb for i in (0, 1))
                  for fmt in ("tfrecord", "array_record")}
        result["build"] = {"runs": found, "median_wall_cpu": med, "per_added_gb_wall_cpu": per_gb,
                           "array_record_vs_tfrecord_cpu_per_added_gb": per_gb["array_record"][1] / per_gb["tfrecord"][1]}

        ours = sorted(os.path.join(kept, name) for name in os.listdir(kept) if name.endswith(".array_record"))
        theirs = []
        for path in ours:
            copy = os.path.join(tmp, "own-writer", os.path.basename(path))
            os.makedirs(os.path.dirname(copy), exist_ok=True)
            writer = ArrayRecordWriter(copy, WRITER_OPTIONS)
            for _, record in read_records(path):
                writer.write(record)
            writer.close()
            theirs.append(copy)
        total = sum(1 for path in ours for _ in read_records(path))
        indexes = random.Random(0).choices(range(total), k=reads)
        rates = {"ours": [], "own_writer": []}
        for _ in range(rounds):
            rates["ours"].append(_read_rate(ours, indexes))
            rates["own_writer"].append(_read_rate(theirs, indexes))
        best = {name: max(values) for name, values in rates.items()}
        same = all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(ours, theirs))
        middle = {name: statistics.median(values) for name, values in rates.items()}
        result["random_access"] = {"records": total, "reads": reads, "records_per_s": rates, "best": best,
                                   "median": middle, "ours_vs_own_writer": middle["ours"] / middle["own_writer"],
                                   "same_bytes": same}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", default=None, help="A folder of class folders (default: generated noise JPEGs).")
    parser.add_argument("--size_mb", type=float, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reads", type=int, default=10000)
    args = parser.parse_args()
    result = run(args.input or noise_photos(args.size_mb), args.rounds, args.reads)
    build = result["build"]
    print("| build | quarter CPU s | full CPU s | CPU s per added GB | wall s per added GB |")
    print("|---|---:|---:|---:|---:|")
    for fmt in ("tfrecord", "array_record"):
        wall, cpu = build["per_added_gb_wall_cpu"][fmt]
        print(f"| {fmt} | {build['median_wall_cpu'][f'quarter {fmt}'][1]:.2f} | "
              f"{build['median_wall_cpu'][f'full {fmt}'][1]:.2f} | {cpu:.1f} | {wall:.1f} |")
    print(f"ArrayRecord / TFRecord CPU per added GB: {build['array_record_vs_tfrecord_cpu_per_added_gb']:.2f}")
    access = result["random_access"]
    print(f"Grain random access, {access['reads']} reads of {access['records']} records (median): ours "
          f"{access['median']['ours']:.0f}/s, ArrayRecord's own writer {access['median']['own_writer']:.0f}/s "
          f"({access['ours_vs_own_writer']:.2f}x); files byte-identical: {access['same_bytes']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
