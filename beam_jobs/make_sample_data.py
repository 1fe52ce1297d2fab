"""Writes a deterministic sample dataset of procedural images in class folders.

Usage: ``python -m beam_jobs.make_sample_data --output data/sample --size_mb 24 [--broken 2]``; ``--broken N``
adds N damaged files (a truncated JPEG, a text file named .jpg) so that a demo run shows dead letters.
Local folders only; no Beam needed.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from beam_jobs.cli import jobs
from beam_jobs.cli.declared import parsed_flags
from transforms.errors import UsageError
from transforms.images.samples import sample_images


def write_sample(output: str, size_mb: float, classes: Sequence[str], seed: int, broken: int) -> int:
    """Writes the dataset; returns the number of files written."""
    count = 0
    first_jpeg = None
    for image in sample_images(int(size_mb * 1024 * 1024), tuple(classes), seed=seed):
        path = os.path.join(output, image.relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(image.data)
        if first_jpeg is None and path.endswith(".jpg"):
            first_jpeg = image
        count += 1
    for i in range(broken):
        label = classes[i % len(classes)]
        if i % 2 == 0 and first_jpeg is not None:
            name, data = f"broken_truncated_{i}.jpg", first_jpeg.data[: len(first_jpeg.data) // 2]
        else:
            name, data = f"broken_not_an_image_{i}.jpg", b"this is not an image\n"
        os.makedirs(os.path.join(output, label), exist_ok=True)  # no image may have gone there
        with open(os.path.join(output, label, name), "wb") as fh:
            fh.write(data)
        count += 1
    return count


def _checked(args: argparse.Namespace) -> list[str]:
    """The class names; raises ``UsageError`` for an --output that is not a folder or no class."""
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise UsageError(f"--output {args.output} is a file; give a folder to create or to add to")
    classes = [name.strip() for name in args.classes.split(",") if name.strip()]
    if not classes:
        raise UsageError("--classes is empty; give comma-separated class names, e.g. daisy,rose")
    return classes


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Writes the sample dataset; returns the exit status."""
    try:
        args = parsed_flags(jobs.SAMPLE, argv, prog or "python -m beam_jobs.make_sample_data")
        if args is None:
            return 0
        classes = _checked(args)
    except UsageError as err:
        print(f"{jobs.SAMPLE.name}: error: {err}", file=sys.stderr)
        return 2
    try:
        count = write_sample(args.output, args.size_mb, classes, args.seed, args.broken)
    except OSError as err:
        print(f"{jobs.SAMPLE.name}: failed: cannot write {err.filename or args.output}: {err.strerror or err}",
              file=sys.stderr)
        return 1
    print(f"wrote {count} files to {args.output}")
    return 0


run = main


if __name__ == "__main__":
    from beam_jobs.cli.logs import run_as_command  # here: the sample itself needs no Beam

    run_as_command(run, "beam_jobs.make_sample_data")
