"""Fixed cost: a 20-photo build in one process against a 3-transform Beam pipeline on the same photos.

    python -m benchmarks.fixed_cost [--images 20] [--rounds 5]

Both run as fresh processes (``python -m ...``), interleaved, one DirectRunner
process each (no worker processes: the build job stays in one process below
1 GiB of input), so the figures are start-up, graph building and per-stage
cost, not image work:

- the build job: ``beam_jobs.build_shards --input PHOTOS --output_dir OUT``
  (folder survey, listing, checks, run files, planning, shards, publish);
- Beam's ``Create(paths) | Map(read, Example) | WriteToTFRecord``
  (``benchmarks/cases.py beam_build``), one shard;
- ``python -c "import apache_beam"``: the floor every Beam job pays.

Prints a Markdown table (median wall and CPU seconds, all processes, and the
build's ratio to the Beam pipeline) and one JSON line with every round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Sequence

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks import photos  # noqa: E402
from benchmarks.measure import checkout_env, interleaved_rounds, medians  # noqa: E402

__all__ = ["run"]


def _small_photos(count: int) -> str:
    """A folder of the first ``count`` benchmark photos (hard links into the cache)."""
    root = os.path.join(photos.CACHE, f"photos-first-{count}")
    if not os.path.isdir(root):
        full = photos.dataset(count * photos.MEAN_BYTES / 1e6 * 1.5)
        staging = root + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        taken = 0
        for folder, dirs, names in sorted(os.walk(full.root)):
            dirs.sort()
            for name in sorted(n for n in names if not n.startswith(".")):
                if taken == count:
                    break
                rel = os.path.relpath(os.path.join(folder, name), full.root)
                os.makedirs(os.path.join(staging, os.path.dirname(rel)), exist_ok=True)
                os.link(os.path.join(folder, name), os.path.join(staging, rel))
                taken += 1
        os.rename(staging, root)
    return root


def run(argv: Sequence[str] | None = None) -> dict:
    """Runs the benchmark; prints the table and a JSON line, and returns the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    root = _small_photos(args.images)
    cases = {
        "build job": lambda out: [sys.executable, "-m", "beam_jobs.build_shards", "--input", root,
                                  "--output_dir", out],
        "Beam Create | Map | WriteToTFRecord": lambda out: [
            sys.executable, "-m", "benchmarks.cases", "beam_build", "--input", root,
            "--output_dir", out, "--num_shards", "1"],
        "import apache_beam": lambda out: [sys.executable, "-c", "import apache_beam"],
    }
    with tempfile.TemporaryDirectory(prefix="fixed_cost_") as tmp:
        found = interleaved_rounds(cases, args.rounds, tmp, checkout_env())
    median = medians(found)
    beam_wall, beam_cpu = median["Beam Create | Map | WriteToTFRecord"]
    print(f"| {args.images} photos, {args.rounds} rounds | wall s | CPU s | CPU / Beam pipeline's |")
    print("|---|---:|---:|---:|")
    for name, (wall, cpu) in median.items():
        print(f"| {name.replace('|', chr(92) + '|')} | {wall:.2f} | {cpu:.2f} | {cpu / beam_cpu:.2f} |")
    figures = {"images": args.images, "rounds": found,
               "build_cpu_ratio": round(median["build job"][1] / beam_cpu, 3),
               "build_wall_ratio": round(median["build job"][0] / beam_wall, 3)}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    run()
