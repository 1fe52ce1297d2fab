"""What resuming a killed build costs against a full build, on the same photos, in the same run.

    python -m benchmarks.resume_cost [--size_mb 1320 | --input DIR] [--rounds 3] [--at 0.8]

Each round, in fresh processes, with the photos in the page cache (one warm-up build first):

- a full build (``beam_jobs.build_shards --input DIR --output_dir FULL``, default flags);
- the same build into another folder, killed with SIGKILL (its whole process group, worker
  processes included, as a crash or a preemption would) after ``--at`` times the full build's
  wall time of that round;
- the same command again into the killed run's folder: the resumed run, timed. Its folder must be
  byte-identical (sha256 of every file) to the full build's, or the benchmark stops.

Prints a Markdown table (median wall and CPU seconds, the ratio to the full build's) and one JSON
line with every round and what each resumed run said it reused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Sequence

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

__all__ = ["run"]


def _folder_digest(folder: str) -> dict[str, str]:
    out = {}
    for parent, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(parent, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = hashlib.file_digest(fh, "sha256").hexdigest()
    return out


def _killed_at(command: list[str], seconds: float, log: str, env: dict) -> float:
    """Runs ``command`` and kills its process group after ``seconds``; returns when it was killed."""
    with open(log, "wb") as fh:
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=_ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return time.perf_counter() - started
    raise SystemExit(f"the build ended ({proc.returncode}) before it was killed at {seconds:.1f} s")


def run(argv: Sequence[str] | None = None) -> dict:
    """Runs the benchmark; prints the table and a JSON line, and returns the figures."""
    from benchmarks.measure import checkout_env, run_measured

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size_mb", type=float, default=1320)
    parser.add_argument("--input", default=None, help="A photo folder to use instead of the generated one.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--at", type=float, default=0.8, help="When to kill, as a fraction of a full build.")
    args = parser.parse_args(argv)
    if args.input:
        root = args.input
    else:
        from benchmarks import photos

        root = photos.dataset(args.size_mb).root
    env = checkout_env()
    build = [sys.executable, "-m", "beam_jobs.build_shards", "--input", root, "--output_dir"]
    rounds = []
    with tempfile.TemporaryDirectory(prefix="resume_cost_") as tmp:
        full, resumed, log = os.path.join(tmp, "full"), os.path.join(tmp, "resumed"), os.path.join(tmp, "log")
        warm = run_measured(build + [full], _ROOT, log, env=env)  # the photos into the page cache
        if warm.returncode != 0:
            raise SystemExit(f"the build failed: {warm.output[-2000:]}")
        for _ in range(args.rounds):
            shutil.rmtree(full, ignore_errors=True)
            shutil.rmtree(resumed, ignore_errors=True)
            whole = run_measured(build + [full], _ROOT, log, env=env)
            killed_after = _killed_at(build + [resumed], args.at * whole.seconds, log, env)
            again = run_measured(build + [resumed], _ROOT, log, env=env)
            if whole.returncode != 0 or again.returncode != 0:
                raise SystemExit(f"a build failed: {again.output[-2000:]}")
            if _folder_digest(full) != _folder_digest(resumed):
                raise SystemExit("the resumed build's folder differs from the full build's")
            said = re.search(r"resumed: .*", again.output)
            rounds.append({"full": [whole.seconds, whole.cpu_seconds], "killed_after": killed_after,
                           "resumed": [again.seconds, again.cpu_seconds],
                           "said": said.group(0) if said else "(nothing resumed)"})
    files = sum(len(names) for _, _, names in os.walk(root))
    size = sum(os.path.getsize(os.path.join(p, n)) for p, _, names in os.walk(root) for n in names)
    medians = {name: (statistics.median(r[name][0] for r in rounds), statistics.median(r[name][1] for r in rounds))
               for name in ("full", "resumed")}
    print(f"| {files} photos, {size / 2**20:.0f} MiB, killed at {args.at:.0%}, {args.rounds} rounds | wall s | "
          "CPU s | wall / full build's | CPU / full build's |")
    print("|---|---:|---:|---:|---:|")
    for name, label in (("full", "full build"), ("resumed", "resumed build")):
        wall, cpu = medians[name]
        print(f"| {label} | {wall:.2f} | {cpu:.2f} | {wall / medians['full'][0]:.2f} | "
              f"{cpu / medians['full'][1]:.2f} |")
    figures = {"input": root, "files": files, "bytes": size, "at": args.at, "rounds": rounds,
               "wall_ratio": round(medians["resumed"][0] / medians["full"][0], 3),
               "cpu_ratio": round(medians["resumed"][1] / medians["full"][1], 3),
               "load_after": round(os.getloadavg()[0], 2)}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    run()
