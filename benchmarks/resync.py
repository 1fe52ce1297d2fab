"""Benchmark: reading TFRecord files after damage, when record starts must be found by scanning.

Writes, under ``benchmarks/.cache/resync``, files with no ``.idx`` (so every byte
range finds its first record by scanning):

- ``zeros-{N}mb.tfrecord``: N MiB of zero bytes (no record anywhere);
- ``middle-{N}mb.tfrecord``: N MiB of ~100 KB Examples whose middle quarter is
  overwritten with zeros (one damaged stretch).

and runs ``verify_shards --files F`` and ``reshard --input F --skip_corrupt`` on
each as a fresh process on the DirectRunner (one worker), printing wall time,
exit status and, for verify, the problems reported.

    python -m benchmarks.resync [--sizes 64,256] [--kinds zeros,middle]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

from tests.tfrecord_fixtures import write_tfrecords
from tests.helpers import encode_example

_CACHE = os.path.join(os.path.dirname(__file__), ".cache", "resync")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MIB = 1 << 20


def _zeros(size_mb: int) -> str:
    path = os.path.join(_CACHE, f"zeros-{size_mb}mb.tfrecord")
    if not os.path.exists(path):
        os.makedirs(_CACHE, exist_ok=True)
        with open(path, "wb") as fh:
            fh.truncate(size_mb * _MIB)
    return path


def _middle(size_mb: int) -> str:
    path = os.path.join(_CACHE, f"middle-{size_mb}mb.tfrecord")
    if not os.path.exists(path):
        rng = random.Random(0)
        records, total = [], 0
        while total < size_mb * _MIB:
            records.append(encode_example({"data": rng.randbytes(rng.randint(50_000, 150_000))}))
            total += len(records[-1]) + 16
        data = bytearray(write_tfrecords(path, records, index=False))
        start, stop = len(data) * 3 // 8, len(data) * 5 // 8
        data[start:stop] = bytes(stop - start)
        with open(path, "wb") as fh:
            fh.write(data)
    return path


def _run(cmd: list[str]) -> tuple[float, int, str]:
    env = dict(os.environ, PYTHONPATH=_REPO)
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=_REPO, env=env, capture_output=True, text=True)
    return time.monotonic() - started, done.returncode, (done.stdout + done.stderr).strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,256", help="File sizes in MiB, comma-separated.")
    parser.add_argument("--kinds", default="zeros,middle", help="Files to make: zeros, middle.")
    args = parser.parse_args(argv)
    makers = {"zeros": _zeros, "middle": _middle}
    beam = ["--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
    print(f"{'file':<26} {'job':<8} {'s':>8} {'exit':>4}  problems (offset, kind) / last line")
    for size in (int(s) for s in args.sizes.split(",")):
        for path in (makers[kind](size) for kind in args.kinds.split(",")):
            name = os.path.basename(path)
            report = os.path.join(_CACHE, "report.json")
            seconds, status, _ = _run([sys.executable, "-m", "beam_jobs.verify_shards", "--files", path,
                                       "--report", report, *beam])
            with open(report) as fh:
                problems = [(p["offset"], p["kind"]) for p in json.load(fh)["problems"]]
            print(f"{name:<26} {'verify':<8} {seconds:8.1f} {status:>4}  {problems}")
            out = os.path.join(_CACHE, "out")
            shutil.rmtree(out, ignore_errors=True)
            seconds, status, text = _run([sys.executable, "-m", "beam_jobs.reshard", "--input", path,
                                          "--output_dir", out, "--split", "train", "--skip_corrupt",
                                          *beam])
            print(f"{name:<26} {'reshard':<8} {seconds:8.1f} {status:>4}  {text.splitlines()[-1][:90]}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
