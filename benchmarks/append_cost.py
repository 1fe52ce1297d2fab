"""What appending 10% to a published set costs against rebuilding the whole set, in the same run.

    python -m benchmarks.append_cost [--size_mb 440 | --input DIR] [--rounds 3] [--new_every 10]

The photos are cut in two by hard links (no copy): ``base/`` (every photo but
each ``--new_every``-th) and ``new/`` (those), in the same class folders. A
set is built from ``base/`` once. Then, round by round, each case a fresh
process on a fresh copy of what it starts from (the copy is not timed):

- ``rebuild``: the build job from ``base/`` and ``new/`` together, into an empty folder;
- ``append``: the append job (``beam_jobs.append_shards``) of ``new/`` into a copy of the base set.

After each append, the published shards of the base set must still be there
byte for byte (under their new names). Prints a Markdown table (median wall
and CPU seconds of all processes, the ratio to the rebuild's) and one JSON line.
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

__all__ = ["run"]


def _split_photos(root: str, dest: str, every: int) -> tuple[str, str, int]:
    """Hard-links the photos of ``root`` into ``dest/base`` and ``dest/new``; returns both and the new bytes."""
    base, new = os.path.join(dest, "base"), os.path.join(dest, "new")
    count, new_bytes = 0, 0
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            if name.startswith("."):
                continue
            source = os.path.join(folder, name)
            rel = os.path.relpath(source, root)
            target = os.path.join(new if count % every == 0 else base, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.link(source, target)
            if count % every == 0:
                new_bytes += os.path.getsize(source)
            count += 1
    return base, new, new_bytes


def _shard_bytes(folder: str) -> set[bytes]:
    found = set()
    for name in os.listdir(folder):
        if name.endswith(".tfrecord"):
            with open(os.path.join(folder, name), "rb") as fh:
                found.add(fh.read())
    return found


def run(argv: Sequence[str] | None = None) -> dict:
    """Runs the benchmark; prints the table and a JSON line, and returns the figures."""
    from benchmarks.measure import (add_photo_flags, checkout_env, interleaved_rounds, medians, photo_root,
                                    ratio_table, run_measured)

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_photo_flags(parser, 440)
    parser.add_argument("--new_every", type=int, default=10, help="Every Nth photo is new (10: 10%%).")
    args = parser.parse_args(argv)
    root = photo_root(args)
    env = checkout_env()
    with tempfile.TemporaryDirectory(prefix="append_cost_", dir=os.path.dirname(os.path.abspath(root))) as tmp:
        base, new, new_bytes = _split_photos(root, tmp, args.new_every)
        published = os.path.join(tmp, "published")
        measured = run_measured([sys.executable, "-m", "beam_jobs.build_shards", "--input", base,
                                 "--output_dir", published], _ROOT, os.path.join(tmp, "log"), env=env)
        if measured.returncode != 0:
            raise SystemExit(f"the base build failed: {measured.output[-2000:]}")
        kept = _shard_bytes(published)
        cases = {
            "rebuild": lambda out: [sys.executable, "-m", "beam_jobs.build_shards", "--input", base,
                                    "--input", new, "--output_dir", out],
            "append": lambda out: [sys.executable, "-m", "beam_jobs.append_shards", "--input", new,
                                   "--output_dir", out],
        }
        rewritten = []

        def copy_published(name: str, out: str) -> None:
            if name == "append":
                shutil.copytree(published, out)

        def published_kept(name: str, out: str) -> None:
            if name == "append":
                rewritten.append(len(kept - _shard_bytes(out)))
                if rewritten[-1] > 1:
                    raise SystemExit(f"the append rewrote {rewritten[-1]} published shards")

        found = interleaved_rounds(cases, args.rounds, tmp, env, before=copy_published, after=published_kept)
        base_bytes = sum(os.path.getsize(os.path.join(f, n)) for f, _, names in os.walk(base) for n in names)
    median = medians(found)
    wall0, cpu0 = median["rebuild"]
    print(ratio_table(f"{base_bytes / 2**20:.0f} MiB published + {new_bytes / 2**20:.0f} MiB new, "
                      f"{args.rounds} rounds", median, "rebuild", "rebuild"))
    figures = {"input": root, "base_bytes": base_bytes, "new_bytes": new_bytes, "rounds": found,
               "published_shards_rewritten": rewritten,
               "append_wall_ratio": round(median["append"][0] / wall0, 3),
               "append_cpu_ratio": round(median["append"][1] / cpu0, 3),
               "load_after": round(os.getloadavg()[0], 2)}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    run()
