"""One worker process or two: what a local build and verify cost in CPU and wall seconds.

    tfrecord-shards sample --output D300 --size_mb 300
    python -m benchmarks.worker_count --data D300 [--rounds 2]

Runs, each a fresh process, the cases interleaved round after round, on the
DirectRunner: the build job on ``--data`` with one worker (``--direct_running_mode
in_memory``, the default under 1 GiB) and with two worker processes
(``--direct_running_mode multi_processing --direct_num_workers 2``), then the
verify job on the one-worker build's output, the same two ways. For each: the
median wall seconds and CPU seconds (user + system) of the whole process tree
(``wait4``: the job's process and its worker processes), and their ratios to
one worker. ``os.cpu_count()`` and the load at the start are printed: the rule
the jobs follow (``transforms/beam_compat.py``) is set from these figures on
the machine's core count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks.measure import checkout_env, machine, run_measured  # noqa: E402

__all__ = ["main"]

_ONE = ["--direct_running_mode", "in_memory"]
_TWO = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="Folder of images (tfrecord-shards sample output).")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", help="Write every run's figures here.")
    args = parser.parse_args(argv)
    env, tmp = checkout_env(), tempfile.mkdtemp(prefix="worker-count-")
    built = os.path.join(tmp, "built")
    python = [sys.executable, "-m"]
    cases = {
        "build, 1 worker": python + ["beam_jobs.build_shards", "--input", args.data, "--output_dir", "{out}", *_ONE],
        "build, 2 worker processes": python + ["beam_jobs.build_shards", "--input", args.data, "--output_dir",
                                               "{out}", *_TWO],
        "verify, 1 worker": python + ["beam_jobs.verify_shards", "--output_dir", built, *_ONE],
        "verify, 2 worker processes": python + ["beam_jobs.verify_shards", "--output_dir", built, *_TWO],
    }
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    about = machine()
    try:
        first = run_measured([a.replace("{out}", built) for a in cases["build, 1 worker"]], _ROOT,
                             os.path.join(tmp, "log"), env=env)  # the set verify reads (untimed)
        if first.returncode != 0:
            raise SystemExit(f"build failed: {first.output[-2000:]}")
        for _ in range(args.rounds):
            for name, command in cases.items():
                out = os.path.join(tmp, "out")
                shutil.rmtree(out, ignore_errors=True)
                measured = run_measured([a.replace("{out}", out) for a in command], _ROOT,
                                        os.path.join(tmp, "log"), env=env)
                if measured.returncode != 0:
                    raise SystemExit(f"{name} failed: {measured.output[-2000:]}")
                found[name].append((measured.seconds, measured.cpu_seconds))
                print(f"{name}: {measured.seconds:.1f} s wall, {measured.cpu_seconds:.1f} CPU s", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    median = {name: (statistics.median(s for s, _ in runs), statistics.median(c for _, c in runs))
              for name, runs in found.items()}
    print(f"{about['cores']} cores, load at start {about['load_average_at_start']}")
    print("| run | wall s | CPU s | wall / 1 worker's | CPU / 1 worker's |")
    print("|---|---:|---:|---:|---:|")
    for name, (wall, cpu) in median.items():
        wall0, cpu0 = median[name.split(",")[0] + ", 1 worker"]
        print(f"| {name} | {wall:.1f} | {cpu:.1f} | {wall / wall0:.2f} | {cpu / cpu0:.2f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"machine": about, "runs": found}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
