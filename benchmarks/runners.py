"""Runners: every job on each runner, its output's bytes and its CPU.

    python -m benchmarks.runners CASE [--quick] [ARG ...]

Cases:

- ``runners_table``: Every job on three runners: did it run, are its bytes the DirectRunner's, and what CPU did it take.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Callable

from benchmarks import common


# -- case runners_table -----------------------------------------------------------------------------------

_RUNNERS_TABLE_DOC = """Every job on three runners: did it run, are its bytes the DirectRunner's, and what CPU did it take.

    python -m benchmarks.runners runners_table [--size_mb 16] [--work /var/tmp/runners-table]

Writes a sample dataset (``tfrecord-shards sample``: 177 images at the default
16 MiB, 2 of them broken, and 20 of a new class for ``append``) under ``--work``,
then runs build, plan, verify, reshard and append on:

- ``direct``: the DirectRunner (Beam's default, one process);
- ``external``: ``--runner PortableRunner --job_endpoint embed --environment_type
  EXTERNAL`` on Beam's worker pool started in a mount namespace with a /tmp of
  its own (``tests.servers.start_worker_pool``; needs ``unshare -m``, as root);
- ``dask``: ``--runner DaskRunner`` on a ``distributed.LocalCluster`` of 2
  worker processes (1 thread each), started in a process of its own.

``--work`` must not lie under /tmp: the external workers see a /tmp of their
own, so inputs and outputs lie where both see them (they share that folder
and nothing else: no temporary folder, no memory).

Each job's launcher runs as a subprocess (``python -m beam_jobs.cli.main``); its
CPU seconds (user + system, its waited-for children included) come from
``os.wait4``. The engine's CPU is added: for ``external`` the pool process
and the workers it started and waited for (``/proc``: its own and its
children's times, before and after the job), for ``dask`` the cluster's
process tree (scheduler, nannies, workers). "Same bytes" compares every file
of the output folder and its ``index/`` with the DirectRunner's
(``dataset_info.json`` without the folder's name), plan's JSON without its
times, free disk and output folder, verify's first output line without its time. The
DirectRunner's own row says "-". Prints a Markdown table and writes
``benchmarks/runners_table.json``.
"""

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


JOBS = ("build", "plan", "verify", "reshard", "append")
RUNNERS = ("direct", "external", "dask")
FLAGS = ["--shard_size_mb", "2", "--max_bad_fraction", "0.2", "--seed", "3"]
_CLUSTER = """
import sys, time, distributed
cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None)
print(cluster.scheduler_address, flush=True)
while True:
    time.sleep(3600)
"""


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=ROOT, AWS_EC2_METADATA_DISABLED="true")


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a process, its live descendants and every child any of them waited for."""
    import psutil

    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _launch(argv: list[str], log: str) -> tuple[int, float, float, str]:
    """Runs ``tfrecord-shards ARGV``; (status, CPU s of the launcher and its children, wall s, stdout)."""
    started = time.monotonic()
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "beam_jobs.cli.main", *argv], cwd=ROOT, env=_env(),
                                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime, time.monotonic() - started, out


def _plan(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        plan = json.load(fh)
    plan = {key: value for key, value in plan.items() if "seconds" not in key}
    plan.get("disk", {}).pop("free_bytes", None)
    plan.pop("output_dir", None)  # each runner plans into a folder of its own
    return plan


def _verify_line(out: str) -> str:
    return re.sub(r" in [\d.]+ s", "", out.splitlines()[0] if out else "")


def _args(job: str, work: str, runner: str) -> tuple[list[str], Callable[[], object]]:
    """The job's flags for ``runner``'s run and what to compare with the DirectRunner's."""
    from tests.reliability_support import folder_bytes

    out = os.path.join(work, "out", f"{job}-{runner}")
    raw, more, built = os.path.join(work, "raw"), os.path.join(work, "more"), os.path.join(work, "out", "build-direct")
    if job == "build":
        return ["--input", raw, "--output_dir", out, *FLAGS], lambda: folder_bytes(out)
    if job == "plan":
        path = out + ".json"
        return (["--input", raw, "--output_dir", out, "--plan_json", path, *FLAGS], lambda: _plan(path))
    if job == "verify":
        return ["--output_dir", built], None
    if job == "reshard":
        return (["--input", os.path.join(built, "train-*.tfrecord"), "--output_dir", out, "--num_shards", "2",
                 "--split", "train"], lambda: folder_bytes(out))
    shutil.copytree(built, out)
    return ["--input", more, "--output_dir", out, *FLAGS], lambda: folder_bytes(out)


def _engines(work: str, wanted: list[str]):
    """Starts the engines ``wanted`` needs: {runner: (flags, CPU-reading function, stop function)}."""
    from tests.servers import start_worker_pool
    from tests.servers import stop_server
    from tests.servers import unshare_refused

    engines = {"direct": ([], lambda: 0.0, lambda: None)}
    if "external" in wanted:
        refused = unshare_refused()
        if refused:
            print(f"external: skipped: {refused}", file=sys.stderr)
        else:
            pool = start_worker_pool(os.path.join(work, "pool.log"))
            pid = pool.process.pid  # unshare execs sh, which execs the pool's python: one process
            engines["external"] = (["--runner", "PortableRunner", "--job_endpoint", "embed", "--environment_type",
                                    "EXTERNAL", "--environment_config", pool.address],
                                   lambda: _tree_cpu(pid), lambda: stop_server(pool.process))
    if "dask" in wanted:
        proc = subprocess.Popen([sys.executable, "-c", _CLUSTER], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        address = proc.stdout.readline().decode().strip()

        def stop() -> None:
            proc.terminate()
            proc.wait(timeout=60)

        engines["dask"] = (["--runner", "DaskRunner", "--dask_client_address", address],
                           lambda: _tree_cpu(proc.pid), stop)
    return engines


def runners_table_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_RUNNERS_TABLE_DOC.split("\n\n")[0])
    parser.add_argument("--size_mb", type=float, default=16.0, help="The sample's size (about 80 KiB an image).")
    parser.add_argument("--work", default="/var/tmp/runners-table", help="A folder outside /tmp, made afresh.")
    parser.add_argument("--runners", default=",".join(RUNNERS))
    parser.add_argument("--json", default=os.path.join(ROOT, "benchmarks", "runners_table.json"))
    args = parser.parse_args(argv)
    work = os.path.realpath(args.work)
    if work == "/tmp" or work.startswith("/tmp/"):
        parser.error("--work must not lie under /tmp: the external workers see a /tmp of their own")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "out"))
    sample = [sys.executable, "-m", "beam_jobs.cli.main", "sample"]
    subprocess.run([*sample, "--output", os.path.join(work, "raw"), "--size_mb", str(args.size_mb), "--broken", "2"],
                   cwd=ROOT, env=_env(), check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*sample, "--output", os.path.join(work, "more"), "--size_mb", str(args.size_mb / 10),
                    "--classes", "sunflower", "--seed", "1"], cwd=ROOT, env=_env(), check=True,
                   stdout=subprocess.DEVNULL)
    images = sum(len(files) for _, _, files in os.walk(os.path.join(work, "raw")))
    wanted = ["direct"] + [r for r in args.runners.split(",") if r in RUNNERS and r != "direct"]
    engines = _engines(work, wanted)
    rows: dict[str, dict[str, dict]] = {}
    reference: dict[str, object] = {}
    try:
        for runner in [r for r in wanted if r in engines]:
            flags, engine_cpu, _ = engines[runner]
            for job in JOBS:
                job_args, result = _args(job, work, runner)
                before = engine_cpu()
                status, cpu, wall, out = _launch([job, *job_args, *flags],
                                                 os.path.join(work, f"{job}-{runner}.log"))
                engine = engine_cpu() - before
                found = _verify_line(out) if job == "verify" else (result() if status == 0 else None)
                if runner == "direct":
                    reference[job] = found
                row = {"ran": status == 0, "launcher_cpu_s": round(cpu, 1), "engine_cpu_s": round(engine, 1),
                       "cpu_s": round(cpu + engine, 1), "wall_s": round(wall, 1),
                       "same": None if runner == "direct" else (status == 0 and found == reference[job])}
                rows.setdefault(job, {})[runner] = row
                print(f"{job} on {runner}: {row}", file=sys.stderr, flush=True)
    finally:
        for _, _, stop in engines.values():
            stop()
    cores = os.cpu_count()
    lines = [f"{images} images ({args.size_mb:g} MiB, `tfrecord-shards sample`), {cores} cores; "
             "ran / same bytes as DirectRunner / CPU s (launcher + engine)", "",
             "| job | " + " | ".join(RUNNERS) + " |", "|---|" + "---|" * len(RUNNERS)]
    for job in JOBS:
        cells = []
        for runner in RUNNERS:
            row = rows.get(job, {}).get(runner)
            if row is None:
                cells.append("not run")
                continue
            same = "-" if row["same"] is None else ("yes" if row["same"] else "no")
            cells.append(f"{'yes' if row['ran'] else 'no'} / {same} / {row['cpu_s']:.1f}")
        lines.append(f"| {job} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump({"images": images, "size_mb": args.size_mb, "cores": cores, "rows": rows}, fh, indent=1,
                  sort_keys=True)
    return 0 if all(row["ran"] and row["same"] in (None, True) for job in rows.values() for row in job.values()) else 1


CASES = {
    "runners_table": common.Case(runners_table_main, _RUNNERS_TABLE_DOC,
                                 ("--size_mb", "2", "--runners", "direct", "--json", os.devnull)),
}


if __name__ == "__main__":
    sys.exit(common.run_case(CASES, sys.argv[1:]))
