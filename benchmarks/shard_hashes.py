"""What hashing each shard costs a build: marginal CPU seconds per added GB, before and after.

    tfrecord-shards sample --output D150 --size_mb 150; tfrecord-shards sample --output D450 --size_mb 450
    python -m benchmarks.shard_hashes --small D150 --large D450 [--before OLD_CHECKOUT] [--rounds 2]

Builds each folder of images (``tfrecord-shards sample`` output, two sizes)
with the build job in one process (``--direct_running_mode in_memory``), each
run a fresh process, the cases interleaved round after round:

- ``before``: the code of ``--before`` (a checkout from before shards had a
  CRC32C: every shard hashed with sha256), when given;
- ``crc32c``: this checkout's default (a CRC32C of each shard and ``.idx``);
- ``crc32c + --shard_sha256``: this checkout, with the sha256 as well.

For each, the whole process tree's CPU seconds (user + system, ``wait4``) at
both sizes and the marginal cost, (large - small) CPU s over (large - small)
GB of image files, the median of the rounds' paired differences. Wall
seconds are given too; on a shared machine trust the CPU figures. First it
prints what sha256 and CRC32C alone cost per GB in one process, and what the
shard writer costs per GB with and without the sha256.
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

from benchmarks.measure import machine, run_measured  # noqa: E402

__all__ = ["main", "folder_bytes", "hash_costs", "writer_costs"]


def folder_bytes(root: str) -> int:
    """Bytes of the files under ``root``."""
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(root) for n in names)


def hash_costs(megabytes: int = 256) -> str:
    """CPU seconds per GB of sha256 and of CRC32C alone, in this process (one line)."""
    import hashlib
    import time

    import crc32c

    data = os.urandom(1 << 20) * megabytes
    started = time.process_time()
    hashlib.sha256(data).hexdigest()
    sha = time.process_time() - started
    started = time.process_time()
    crc32c.crc32c(data)
    crc = time.process_time() - started
    gb = len(data) / 1e9
    return f"hashing alone: sha256 {sha / gb:.2f} CPU s/GB, CRC32C {crc / gb:.3f} CPU s/GB"


def writer_costs(megabytes: int = 256, rounds: int = 3) -> str:
    """CPU seconds per GB the shard writer spends, sha256 off and on, in this process (one line).

    ``ShardWriter`` writes ``megabytes`` of 100 KB records (framed, counted, the
    ``.idx`` made, CRC32C always) to a file object that drops them; the median
    of ``rounds``.
    """
    import statistics
    import time

    from transforms.tfrecord.shard_writer import ShardWriter

    class _Null:
        def write(self, data) -> int:
            return len(data)

    record = os.urandom(100_000)
    count = megabytes * 10
    found = {}
    for sha256 in (False, True) * rounds:
        started = time.process_time()
        writer = ShardWriter(_Null(), "none", _Null(), sha256=sha256)
        for _ in range(count):
            writer.write_parts((record,), 1)
        writer.close()
        found.setdefault(sha256, []).append((time.process_time() - started) / (count * len(record) / 1e9))
    off, on = statistics.median(found[False]), statistics.median(found[True])
    return f"shard writer alone: {off:.2f} CPU s/GB (CRC32C), {on:.2f} with --shard_sha256 ({on - off:+.2f})"


def _env(checkout: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = checkout
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", required=True, help="Folder of images (the smaller).")
    parser.add_argument("--large", required=True, help="Folder of images (the larger).")
    parser.add_argument("--before", help="A checkout of the code before, for the 'before' case.")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", help="Write every run's figures here.")
    args = parser.parse_args(argv)
    print(hash_costs(), file=sys.stderr)
    print(writer_costs(), file=sys.stderr)
    cases = {"crc32c": (_ROOT, []), "crc32c + --shard_sha256": (_ROOT, ["--shard_sha256"])}
    if args.before:
        cases = {"before (sha256 of each shard)": (os.path.abspath(args.before), []), **cases}
    sizes = {"small": folder_bytes(args.small), "large": folder_bytes(args.large)}
    found: dict[str, dict[str, list[tuple[float, float]]]] = {c: {"small": [], "large": []} for c in cases}
    tmp = tempfile.mkdtemp(prefix="shard-hashes-")
    try:
        for _ in range(args.rounds):
            for size, data in (("small", args.small), ("large", args.large)):
                for name, (checkout, flags) in cases.items():
                    out = os.path.join(tmp, "out")
                    shutil.rmtree(out, ignore_errors=True)
                    cmd = [sys.executable, "-m", "beam_jobs.build_shards", "--input", data, "--output_dir", out,
                           "--direct_running_mode", "in_memory", *flags]
                    measured = run_measured(cmd, checkout, os.path.join(tmp, "log"), env=_env(checkout))
                    if measured.returncode != 0:
                        raise SystemExit(f"{name} failed: {measured.output[-2000:]}")
                    found[name][size].append((measured.seconds, measured.cpu_seconds))
                    print(f"{name} {size}: {measured.seconds:.1f} s wall, {measured.cpu_seconds:.1f} CPU s",
                          file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    added_gb = (sizes["large"] - sizes["small"]) / 1e9
    rows = {}
    for name, runs in found.items():
        marginal = statistics.median((large[1] - small[1]) / added_gb
                                     for small, large in zip(runs["small"], runs["large"]))
        rows[name] = {"cpu_small": statistics.median(c for _, c in runs["small"]),
                      "cpu_large": statistics.median(c for _, c in runs["large"]),
                      "wall_small": statistics.median(s for s, _ in runs["small"]),
                      "wall_large": statistics.median(s for s, _ in runs["large"]),
                      "cpu_s_per_gb": marginal}
    first = next(iter(rows.values()))["cpu_s_per_gb"]
    print(f"| build, 1 process | CPU s {sizes['small'] / 1e6:.0f} MB | CPU s {sizes['large'] / 1e6:.0f} MB | "
          f"wall s {sizes['large'] / 1e6:.0f} MB | marginal CPU s/GB | difference |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['cpu_small']:.1f} | {row['cpu_large']:.1f} | {row['wall_large']:.1f} | "
              f"{row['cpu_s_per_gb']:.1f} | {row['cpu_s_per_gb'] - first:+.1f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"machine": machine(), "bytes": sizes, "runs": found, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
