"""Peak memory of the reshard job against the size of its input.

Writes uncompressed TFRecord files of random 100 KiB Example-like records
(``--sizes_mb``, default 200 and 1000 MB), reshards each into 64 MiB shards on
the DirectRunner in a fresh process, and reports that process tree's peak RSS
(``ru_maxrss`` of the child, from ``wait4``). Memory is bounded when the
larger input costs no more than 1.2x the smaller.

Run: ``python -m benchmarks.reshard_memory [--sizes_mb 200,1000] [--workdir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from tests.helpers import encode_example
from transforms.tfrecord.framing import frame_record

RECORD_BYTES = 100 * 1024


def write_input(folder: str, size_mb: int, seed: int = 0) -> int:
    """Writes about ``size_mb`` MB of records in 100 MB files; returns the number of records."""
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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


if __name__ == "__main__":
    main()
