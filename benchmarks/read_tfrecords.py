"""Benchmark: reading one ~50 MB TFRecord file split by byte range vs read whole.

Writes a file of image Examples (real JPEGs of about ``--record_kb``, plus a
``.idx``) under ``benchmarks/.cache`` and reads it on the local runner with
``--workers`` workers, in four ways:

- Beam's ``ReadFromTFRecord``, which reads a file as one unit (the baseline);
- ``ReadFromTFRecords`` forced to one range (``min_bundle_size`` = file size);
- ``ReadFromTFRecords`` split by the runner, record starts from the ``.idx``;
- the same without the index (record starts found by scanning).

Each is timed twice: counting records only, and doing the verify job's
per-record work (Example parse, schema, full image decode). Times are whole
pipeline runs including start-up; ratios are against the baseline in the
same run.

    python -m benchmarks.read_tfrecords [--size_mb 50] [--record_kb 100] [--workers 2]
"""

from __future__ import annotations

import argparse
import io
import os
import random
import time

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from PIL import Image, ImageFilter

from tests.tfrecord_fixtures import image_example
from transforms.tfrecord.framing import frame_record
from tests.helpers import format_index
from transforms.beam_compat import local_runner
from transforms.tfrecord_source import ReadFromTFRecords
from transforms.verify.checks import check_record

_CACHE = os.path.join(os.path.dirname(__file__), ".cache")


def _jpeg(rng: random.Random, target_kb: float) -> tuple[bytes, int, int]:
    side = int((target_kb * 1024 / 0.26) ** 0.5)  # blurred noise at q90: ~0.26 bytes per pixel
    img = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
    img = img.filter(ImageFilter.GaussianBlur(1.5))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue(), side, side


def _make_file(size_mb: int, record_kb: float) -> tuple[str, int]:
    path = os.path.join(_CACHE, f"bench-{size_mb}mb-{record_kb:g}kb.tfrecord")
    if not os.path.exists(path + ".idx"):
        os.makedirs(_CACHE, exist_ok=True)
        rng = random.Random(0)
        sizes, written = [], 0
        with open(path, "wb") as fh:
            while written < size_mb << 20:
                encoded, height, width = _jpeg(rng, record_kb)
                label = len(sizes) % 10
                framed = frame_record(image_example(label, f"class{label}", encoded, "jpeg",
                                                    height, width))
                fh.write(framed)
                sizes.append(len(framed))
                written += len(framed)
        with open(path + ".idx", "wb") as fh:
            fh.write(format_index(sizes))
    no_index = path[:-len(".tfrecord")] + "-noidx.tfrecord"
    if not os.path.exists(no_index):
        os.link(path, no_index)
    with open(path + ".idx", "rb") as fh:
        return path, len(fh.read().splitlines())


def _count(item) -> None:
    Metrics.counter("benchmark", "records").inc()


def _verify(record: bytes) -> None:
    check, _ = check_record("bench", 0, record, schema=True, decode_images=True)
    assert not check.problems, check.problems
    Metrics.counter("benchmark", "records").inc()


def _run(options: PipelineOptions, read, work) -> tuple[float, int]:
    started = time.perf_counter()
    p = beam.Pipeline(runner=local_runner(options), options=options)
    _ = read(p) | "Work" >> beam.Map(work)
    result = p.run()
    result.wait_until_finish()
    seconds = time.perf_counter() - started
    counters = result.metrics().query(MetricsFilter().with_name("records"))["counters"]
    return seconds, sum(c.committed or c.attempted or 0 for c in counters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size_mb", type=int, default=50)
    parser.add_argument("--record_kb", type=float, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mode", default="multi_processing",
                        choices=("in_memory", "multi_threading", "multi_processing"))
    parser.add_argument("--repeat", type=int, default=2, help="Runs per case; the fastest counts.")
    args = parser.parse_args()
    path, count = _make_file(args.size_mb, args.record_kb)
    no_index = path[:-len(".tfrecord")] + "-noidx.tfrecord"
    options = PipelineOptions([f"--direct_num_workers={args.workers}",
                               f"--direct_running_mode={args.mode}"])
    reads = [
        ("Beam ReadFromTFRecord (whole file)", lambda p: p | beam.io.ReadFromTFRecord(path)),
        ("ReadFromTFRecords, one range", lambda p: p | ReadFromTFRecords(
            path, min_bundle_size=os.path.getsize(path))),
        ("ReadFromTFRecords, split, .idx", lambda p: p | ReadFromTFRecords(path)),
        ("ReadFromTFRecords, split, scanning", lambda p: p | ReadFromTFRecords(no_index)),
    ]
    print(f"{path}: {os.path.getsize(path) / 2**20:.0f} MiB, {count} records; "
          f"{args.workers} workers ({args.mode}); best of {args.repeat}")
    for label, work in (("count records", _count), ("parse + decode images", _verify)):
        print(f"{label}:")
        baseline = None
        for name, read in reads:
            seconds, records = min(_run(options, read, work) for _ in range(args.repeat))
            assert records == count, (name, records, count)
            baseline = baseline or seconds
            print(f"  {name:36s} {seconds:6.2f} s  {records / seconds:7.0f} records/s  "
                  f"{baseline / seconds:5.2f}x")


if __name__ == "__main__":
    main()
