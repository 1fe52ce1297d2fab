"""Publishing many shards: renames in the one publish step against renames handed out to the workers.

    python -m benchmarks.publish_parallel [--shards 20000] [--rounds 1]

Each case is a fresh process that stages ``--shards`` empty gzip shard files
(no ``.idx``) in a local folder, takes its lock, and runs the real
``PublishShards`` on the DirectRunner, given one ``ShardResult`` per shard
(as ``WriteShards`` gives them; shard-list parts are written as in a build):

- ``serial``: every rename in ``PreparePublish`` (``parallel_from`` above
  the shard count: 16 threads in one worker, as before the change);
- ``parallel``: the renames handed out in chunks of ``RENAME_CHUNK`` to
  ``MoveStaged`` (the default from ``PARALLEL_MOVES`` renames);

each with 1 worker (in-process) and 2 worker processes (``multi_processing``).
The figure is the wall time of the pipeline (``PublishShards`` is all of
it: parts, prepare, renames, commit), and how many worker processes renamed
(the ``shard_sink/move_processes`` counter), and the time from the first
rename to the last (the renamed files' ctime). Prints a Markdown table and a
JSON line.

A local rename takes microseconds; on gs:// and s3:// one is a copy and a
delete (tens of ms). ``--rename_ms X`` makes every local rename of the run
(the worker processes' too) sleep X ms per file first, through a
``sitecustomize`` module put on the children's ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

_RUN_ID = "c" * 32
CASES = [("serial", 1), ("parallel", 1), ("serial", 2), ("parallel", 2)]


def _child(mode: str, workers: int, shards: int, folder: str) -> dict:
    """Stages ``shards`` files and publishes them; returns the wall seconds and the processes that renamed."""
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms import shard_sink
    from transforms.shardset.naming import join_path, shard_file_name
    from transforms.shardset.ownership import PublishPolicy
    from transforms.shardset.planning import SplitTotals
    from transforms.shardset.staged import ShardResult
    from transforms.storage.lock import acquire_lock
    from transforms.tfrecord.shard_writer import ShardStats

    staging = join_path(folder, f".staging/{_RUN_ID}")
    os.makedirs(staging)
    policy = PublishPolicy(_RUN_ID)
    acquire_lock(folder, policy, "build_shards")
    results = []
    for index in range(shards):
        name = shard_file_name("train", index, shards, "gzip")
        staged = join_path(staging, f"{name}.tmp")
        open(staged, "wb").close()
        results.append(ShardResult("train", index, shards, name, staged, None,
                                   ShardStats(1, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                                              {"0": 1})))
    options = ["--direct_num_workers", str(workers)] + (
        ["--direct_running_mode", "multi_processing"] if workers > 1 else [])
    p = beam.Pipeline(options=PipelineOptions(options))
    fields = {"created_by": "build_shards", "options": {}, "seed": 0}
    inputs = shard_sink.PublishInputs(
        p | "Results" >> beam.Create(results),
        p | "Totals" >> beam.Create([SplitTotals("train", 0, shards, 1, shards)]), (),
        p | "Labels" >> beam.Create([["daisy"]]), p | "Inputs" >> beam.Create([shards]),
        p | "Spec" >> beam.Create([{}]))
    _ = p | "Publish" >> shard_sink.PublishShards(
        shard_sink.ShardOutput(folder, "gzip"), policy, inputs, fields,
        parallel_from=shards + 1 if mode == "serial" else None)
    start = time.perf_counter()
    result = p.run()
    result.wait_until_finish()
    seconds = time.perf_counter() - start
    found = result.metrics().query(MetricsFilter().with_namespace("shard_sink").with_name(
        shard_sink.MOVE_PROCESSES))["counters"]
    changed = [os.stat(os.path.join(folder, n)).st_ctime_ns for n in os.listdir(folder) if n.endswith(".gz")]
    assert len(changed) == shards, len(changed)
    return {"mode": mode, "workers": workers, "seconds": seconds,
            "rename_span": (max(changed) - min(changed)) / 1e9,  # first to last rename (a rename sets ctime)
            "move_processes": sum(c.committed for c in found)}


_SLOW_RENAMES = """import os, time
_ms = float(os.environ.get("PUBLISH_BENCH_RENAME_MS", "0"))
if _ms:
    from apache_beam.io import localfilesystem
    _rename = localfilesystem.LocalFileSystem.rename
    def rename(self, sources, destinations):
        time.sleep(len(sources) * _ms / 1000)
        return _rename(self, sources, destinations)
    localfilesystem.LocalFileSystem.rename = rename
"""


def run(shards: int, rounds: int, rename_ms: float = 0.0) -> list[dict]:
    from benchmarks.measure import checkout_env

    env, site = checkout_env(), tempfile.mkdtemp(prefix="publish-parallel-site-")
    try:
        return _runs(shards, rounds, rename_ms, env, site)
    finally:
        shutil.rmtree(site, ignore_errors=True)


def _runs(shards: int, rounds: int, rename_ms: float, env: dict[str, str], site: str) -> list[dict]:
    if rename_ms:
        with open(os.path.join(site, "sitecustomize.py"), "w", encoding="utf-8") as fh:
            fh.write(_SLOW_RENAMES)
        env = {**env, "PYTHONPATH": os.pathsep.join([site, env.get("PYTHONPATH", "")]),
               "PUBLISH_BENCH_RENAME_MS": str(rename_ms)}
    runs = []
    for _ in range(rounds):
        for mode, workers in CASES:
            folder = tempfile.mkdtemp(prefix="publish-parallel-")
            try:
                out = subprocess.run([sys.executable, "-m", "benchmarks.publish_parallel", "--child", mode,
                                      "--workers", str(workers), "--shards", str(shards), "--folder", folder],
                                     check=True, capture_output=True, text=True, cwd=_ROOT, env=env)
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    return runs


def _table(runs: list[dict], shards: int) -> str:
    rows = [f"| renames of {shards:,} shards | workers | wall s (median) | vs serial, 1 worker | "
            "first to last rename, s (median) | processes that renamed |", "|---|---:|---:|---:|---:|---:|"]
    base = statistics.median(r["seconds"] for r in runs if (r["mode"], r["workers"]) == ("serial", 1))
    for mode, workers in CASES:
        mine = [r for r in runs if (r["mode"], r["workers"]) == (mode, workers)]
        wall = statistics.median(r["seconds"] for r in mine)
        span = statistics.median(r["rename_span"] for r in mine)
        rows.append(f"| {mode} | {workers} | {wall:.1f} | {wall / base:.2f}x | {span:.2f} | "
                    f"{'/'.join(str(r['move_processes']) for r in mine)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", choices=["serial", "parallel"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--folder")
    parser.add_argument("--rename_ms", type=float, default=0.0, help="sleep per renamed file (simulated store)")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.workers, args.shards, args.folder)))
        return 0
    runs = run(args.shards, args.rounds, args.rename_ms)
    print(f"{args.rename_ms} ms slept per renamed file")
    print(_table(runs, args.shards))
    print(json.dumps(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
