"""What resuming a killed build costs against a full build, on the same photos, in the same run.

    python -m benchmarks.resume_cost [--size_mb 1320 | --input DIR] [--rounds 3] [--at 0.8]

Each round, in fresh processes, with the photos in the page cache (one warm-up build first):

- a full build (``beam_jobs.build_shards --input DIR --output_dir FULL``, default flags);
- the same build into another folder, killed with SIGKILL (its whole process group, worker
  processes included, as a crash or a preemption would) where the full build was at ``--at``
  of its wall time: once as many staged shards are finished as the full build had finished
  then (a watcher notes them every 10 ms), so that a busy machine does not move the moment;
- the same command again into the killed run's folder: the resumed run, timed. Its folder must be
  byte-identical (sha256 of every file) to the full build's, or the benchmark stops.

Prints a Markdown table (median wall and CPU seconds, the ratio to the full build's) and one JSON
line with every round and what each resumed run said it reused.
"""

from __future__ import annotations

import argparse
import glob
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
import threading
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


def _shards_done(folder: str) -> int:
    """Staged shards the run writing into ``folder`` has finished (their done records)."""
    return len(glob.glob(os.path.join(glob.escape(folder), ".staging", "*", "*.tmp.done")))


class _Watcher(threading.Thread):
    """Notes, every 10 ms, how many staged shards a run into ``folder`` has finished."""

    def __init__(self, folder: str) -> None:
        super().__init__(daemon=True)
        self._folder = folder
        self._done = threading.Event()
        self.timeline: list[tuple[float, int]] = []

    def run(self) -> None:
        started = time.perf_counter()
        while not self._done.wait(0.01):
            self.timeline.append((time.perf_counter() - started, _shards_done(self._folder)))

    def stop(self) -> None:
        self._done.set()
        self.join()


def _killed_when(command: list[str], folder: str, shards: int, log: str, env: dict) -> float | None:
    """Runs ``command`` and kills its process group once ``shards`` staged shards are finished;
    returns when (None: it ended before)."""
    with open(log, "wb") as fh:
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=_ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        while proc.poll() is None:
            if _shards_done(folder) >= shards:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return time.perf_counter() - started
            time.sleep(0.005)
    return None


def run(argv: Sequence[str] | None = None) -> dict:
    """Runs the benchmark; prints the table and a JSON line, and returns the figures."""
    from benchmarks.measure import add_photo_flags, checkout_env, photo_root, run_measured

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_photo_flags(parser, 1320)
    parser.add_argument("--at", type=float, default=0.8, help="When to kill, as a fraction of a full build.")
    args = parser.parse_args(argv)
    root = photo_root(args)
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
            watcher = _Watcher(full)
            watcher.start()
            whole = run_measured(build + [full], _ROOT, log, env=env)
            watcher.stop()
            # Where the full build was at --at of its time: the killed build stops at the same point.
            shards = max([n for t, n in watcher.timeline if t <= args.at * whole.seconds] or [0])
            if shards == 0:
                raise SystemExit(f"at {args.at:.0%} of its time the build had finished no shard: use a later --at")
            killed_after = _killed_when(build + [resumed], resumed, shards, log, env)
            if killed_after is None:
                raise SystemExit("the build ended before it was killed")
            again = run_measured(build + [resumed], _ROOT, log, env=env)
            if whole.returncode != 0 or again.returncode != 0:
                raise SystemExit(f"a build failed: {again.output[-2000:]}")
            if _folder_digest(full) != _folder_digest(resumed):
                raise SystemExit("the resumed build's folder differs from the full build's")
            said = re.search(r"resumed: .*", again.output)
            rounds.append({"full": [whole.seconds, whole.cpu_seconds], "killed_after": killed_after,
                           "shards_finished_at_kill": shards,
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
