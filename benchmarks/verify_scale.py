"""Verify per GB: the verify job against Beam's ReadFromTFRecord + parse, at two sizes.

    python -m benchmarks.verify_scale [--sizes 260 520] [--repeat 3] [--mode 1proc]

Builds (once, into ``benchmarks/.cache/``) a shard set of 8 shards from the
photos of each size (``benchmarks/photos.py``, ``--validate header``), then
runs, round after round, the verify job and ``benchmarks/cases.py beam_read``
on each set, each a fresh process (``benchmarks/measure.py``). Reports the
median wall and CPU seconds of each, and the marginal seconds per GB: the
difference between the two sizes over the difference in bytes, which leaves
out start-up.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks.measure import run_measured  # noqa: E402
from benchmarks.photos import CACHE, dataset  # noqa: E402

__all__ = ["main"]

_MODES = {"1proc": ["--direct_num_workers", "1", "--direct_running_mode", "in_memory"],
          "2threads": ["--direct_num_workers", "2", "--direct_running_mode", "multi_threading"],
          "2procs": ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]}


def _shard_set(size_mb: float) -> str:
    folder = os.path.join(CACHE, f"verify-shards-{size_mb:g}mb")
    if not os.path.exists(os.path.join(folder, "manifest.json")):
        ds = dataset(size_mb)
        subprocess.run([sys.executable, "-m", "beam_jobs.build_shards", "--input", ds.root,
                        "--output_dir", folder, "--num_shards", "8", "--validate", "header"],
                       cwd=_ROOT, check=True)
    return folder


def _bytes(folder: str) -> int:
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(folder, "*.tfrecord")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs=2, default=[260, 520])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mode", choices=sorted(_MODES), default="1proc")
    parser.add_argument("--verify_module", default="beam_jobs.verify_shards",
                        help="The verify job's module (to measure a variant of it).")
    args = parser.parse_args(argv)
    flags = _MODES[args.mode]
    folders = {size: _shard_set(size) for size in args.sizes}
    logs = os.path.join(CACHE, "logs")
    os.makedirs(logs, exist_ok=True)
    cases = {}
    for size, folder in folders.items():
        cases[("verify", size)] = [sys.executable, "-m", args.verify_module, "--output_dir", folder]
        cases[("beam_read", size)] = [sys.executable, "-m", "benchmarks.cases", "beam_read",
                                      "--pattern", os.path.join(folder, "*.tfrecord")]
    runs: dict = {key: [] for key in cases}
    for round_ in range(args.repeat):
        for key, command in cases.items():
            measured = run_measured(command + flags, _ROOT, os.path.join(logs, f"scale-{key[0]}.log"))
            if measured.returncode != 0:
                raise SystemExit(f"{key} failed:\n{measured.output[-2000:]}")
            runs[key].append(measured)
            print(f"  round {round_ + 1} {key[0]:9s} {key[1]:g} MB: {measured.seconds:6.2f} s, "
                  f"{measured.cpu_seconds:6.2f} s CPU", flush=True)
    small, large = args.sizes
    gb = (_bytes(folders[large]) - _bytes(folders[small])) / 1e9
    print(f"\n{args.mode}, medians of {args.repeat} rounds; marginal per GB = "
          f"(t({large:g} MB) - t({small:g} MB)) / {gb:.3f} GB")
    print("| case | s at small | s at large | CPU s small | CPU s large | marginal s/GB | CPU s/GB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in ("verify", "beam_read"):
        wall = [statistics.median(r.seconds for r in runs[(name, s)]) for s in args.sizes]
        cpu = [statistics.median(r.cpu_seconds for r in runs[(name, s)]) for s in args.sizes]
        print(f"| {name} | {wall[0]:.2f} | {wall[1]:.2f} | {cpu[0]:.2f} | {cpu[1]:.2f} | "
              f"{(wall[1] - wall[0]) / gb:.2f} | {(cpu[1] - cpu[0]) / gb:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
