"""Append job: new images and labels join a published shard set; its shards are kept.

Usage: ``tfrecord-shards append --input data/new_photos --output_dir out/flowers``. The build job with
``--append`` (see ``beam_jobs.build_shards`` and docs/next-day.md, "Add images to a published set"):
every flag is the build's.
"""

from __future__ import annotations

import sys
from typing import Sequence

from beam_jobs.cli import loading

if __name__ == "__main__":  # a command: its modules load with the collector paused (cli/loading.py)
    loading.pause()

from beam_jobs import build_shards  # noqa: E402
from beam_jobs.cli.logs import run_as_command  # noqa: E402


def run(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Runs the build job with ``--append``; returns the process exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return build_shards.run(["--append", *[arg for arg in argv if arg != "--append"]], prog=prog)


if __name__ == "__main__":
    run_as_command(run, "beam_jobs.append_shards")
