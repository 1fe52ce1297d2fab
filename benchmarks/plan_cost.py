"""What a plan costs against the build it plans, on the same photos, in the same run.

    python -m benchmarks.plan_cost [--size_mb 440 | --input DIR] [--rounds 3]

Every case is a fresh process, the cases interleaved round by round (the
photos stay in the page cache after the first round):

- the build job, default flags (``beam_jobs.build_shards --input DIR --output_dir OUT``);
- the plan job with the same flags (``beam_jobs.plan_build``), into an output folder that does
  not exist (the plan must leave it so: checked after each run);
- three loops in one process, no Beam, that isolate what the plan's survey costs per input:
  ``heads`` reads each file's first 64 KiB and checks that header (what a plan without
  duplicates would read), ``whole`` reads each file whole and checks its header, ``whole+sha256``
  also hashes it (what the plan does).

Prints a Markdown table (median wall and CPU seconds of all processes, and the ratio to the
build's) and one JSON line with every round.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from typing import Sequence

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

__all__ = ["run"]

_LOOPS = ("heads", "whole", "whole+sha256")


def _files(root: str) -> list[str]:
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(folder, n) for n in sorted(names) if not n.startswith(".")]
    return found


def loop(root: str, kind: str) -> None:
    """Surveys every file of ``root`` in this process as ``kind`` says; prints ``RESULT {json}``."""
    from transforms.errors import ImageError
    from transforms.images.codec import HEAD_BYTES
    from transforms.images.records import EncodeSettings
    from transforms.images.survey import survey_image

    settings = EncodeSettings()
    started, nbytes, rejected = time.perf_counter(), 0, 0
    for path in _files(root):
        with open(path, "rb") as fh:
            data = fh.read(HEAD_BYTES) if kind == "heads" else fh.read()
        nbytes += len(data)
        if kind == "whole+sha256":
            hashlib.sha256(data).digest()
        try:
            survey_image(data, settings)
        except ImageError:
            rejected += 1
    print("RESULT " + json.dumps({"kind": kind, "bytes": nbytes, "rejected": rejected,
                                  "seconds": time.perf_counter() - started}), flush=True)


def run(argv: Sequence[str] | None = None) -> dict:
    """Runs the benchmark; prints the table and a JSON line, and returns the figures."""
    from benchmarks.measure import (add_photo_flags, checkout_env, interleaved_rounds, medians, photo_root,
                                    ratio_table)

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_photo_flags(parser, 440)
    args = parser.parse_args(argv)
    root = photo_root(args)
    size = sum(os.path.getsize(p) for p in _files(root))
    cases = {
        "build job": lambda out: [sys.executable, "-m", "beam_jobs.build_shards", "--input", root,
                                  "--output_dir", out],
        "plan job": lambda out: [sys.executable, "-m", "beam_jobs.plan_build", "--input", root,
                                 "--output_dir", out],
        **{f"loop: {kind}": (lambda kind: lambda out: [sys.executable, "-m", "benchmarks.plan_cost", "_loop",
                                                       root, kind])(kind) for kind in _LOOPS},
    }

    def untouched(name: str, out: str) -> None:
        if name == "plan job" and os.path.exists(out):
            raise SystemExit(f"the plan created {out}")

    with tempfile.TemporaryDirectory(prefix="plan_cost_") as tmp:
        found = interleaved_rounds(cases, args.rounds, tmp, checkout_env(), after=untouched)
    median = medians(found)
    build_wall, build_cpu = median["build job"]
    files = len(_files(root))
    print(ratio_table(f"{files} photos, {size / 2**20:.0f} MiB, {args.rounds} rounds", median, "build job", "build"))
    figures = {"input": root, "files": files, "bytes": size, "rounds": found,
               "plan_wall_ratio": round(median["plan job"][0] / build_wall, 3),
               "plan_cpu_ratio": round(median["plan job"][1] / build_cpu, 3),
               "load_after": round(os.getloadavg()[0], 2)}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    if sys.argv[1:2] == ["_loop"]:
        loop(sys.argv[2], sys.argv[3])
    else:
        run()
