"""Listing at scale: ``DiscoverImages`` on a large input manifest or folder tree, one JSON line of figures.

    python -m benchmarks.listing_scale --rows 1000000            # a .jsonl manifest of N rows
    python -m benchmarks.listing_scale --files 200000 --folders 1000   # a tree of empty files

The input is written to ``--workdir`` (a temporary folder unless given; an
existing input of the same shape there is reused) by streaming, so writing it
does not raise this process's peak. The real ``DiscoverImages`` then lists it
on the DirectRunner, one process, and only the number of listed entries and
dead letters leaves the step (``Count.Globally``, lifted before the shuffle).
The figures printed are ``seconds`` (wall clock of the pipeline run),
``survey_s`` (of those, the listing tasks found before the pipeline:
``tests.helpers.discover_images_of``, which counts a local folder's files), ``tasks``,
``rss_before_mib`` (resident set before the pipeline), ``peak_rss_mib`` (this
process's peak, ``ru_maxrss``), ``entries`` and ``dead_letters``, and
``worker_cpu_s``: the CPU seconds (user + system) of each worker process the
runner started, busiest first, read with psutil every 0.2 s while the pipeline
runs (empty in one process), and ``busiest_share``, the busiest worker's share
of their sum (1.0: one worker did everything).

    python -m benchmarks.listing_scale --files 1000000 --folders 1 --baseline /work/main \
        --direct_num_workers 2 --direct_running_mode multi_processing

lists one class folder of 1,000,000 files with two worker processes, with the
code of ``--baseline`` (another checkout: the same script, run as a file with
that checkout on ``PYTHONPATH``) and of this one, in turn, ``--rounds`` times,
and prints each run's figures.

    python -m benchmarks.listing_scale --build_images 10000 --folders 10 --baseline /work/main

runs the build job (``beam_jobs.build_shards``, under ``benchmarks/child_usage.py
--count_stages``, measured by ``benchmarks/measure.py``) on a tree of that many
small PNGs in that many class folders, with each checkout in turn, and prints
its fused stages, wall seconds and peak RSS (``rss_tree``: the summed RSS of
the process and its workers; ``rss_process``: the largest single process).

Extra arguments go to Beam.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import subprocess
import tempfile
import threading
import time
from typing import Any, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from transforms.beam_compat import local_runner
from tests.helpers import discover_images_of
from transforms.images.items import SourceImage
from transforms.shardset.dead_letters import DeadLetter
from transforms.images.inputs import LabelRules

__all__ = ["write_manifest", "write_tree", "run"]


def write_manifest(path: str, rows: int) -> None:
    """Writes a JSON Lines manifest of ``rows`` rows over 100 classes (about 60 B a row)."""
    if os.path.exists(path) and sum(1 for _ in open(path, "rb")) == rows:
        return
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(rows):
            fh.write(f'{{"path": "imgs/{i % 1000:03d}/{i:08d}.jpg", "label": "class_{i % 100:02d}"}}\n')


def write_images(root: str, images: int, folders: int) -> None:
    """Writes ``images`` small PNGs (16x12, each with its number in its first pixels) over ``folders`` class folders."""
    from PIL import Image

    marker = os.path.join(root, f".made-{images}-{folders}")
    if os.path.exists(marker):
        return
    for i in range(images):
        folder = os.path.join(root, f"class_{i % folders:04d}")
        os.makedirs(folder, exist_ok=True)
        image = Image.new("RGB", (16, 12), (200, 120, 40))
        image.putpixel((0, 0), (i & 0xFF, i >> 8 & 0xFF, i >> 16 & 0xFF))
        image.save(os.path.join(folder, f"{i:08d}.png"))
    open(marker, "wb").close()


def write_tree(root: str, files: int, folders: int) -> None:
    """Writes ``files`` empty files spread over ``folders`` class folders below ``root``."""
    marker = os.path.join(root, f".made-{files}-{folders}")
    if os.path.exists(marker):
        return
    for i in range(files):
        folder = os.path.join(root, f"class_{i % folders:04d}")
        if i < folders:
            os.makedirs(folder, exist_ok=True)
        open(os.path.join(folder, f"{i:08d}.jpg"), "wb").close()
    open(marker, "wb").close()


_NAMESPACE = "listing_scale"


def _report(count: int, name: str) -> None:
    Metrics.counter(_NAMESPACE, name).inc(count)


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        kib = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    return kib / 1024


class _WorkerCpu:
    """CPU seconds of each process below this one, last read while it ran (psutil, every ``every`` s)."""

    def __init__(self, every: float = 0.2) -> None:
        self._every = every
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "_WorkerCpu":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            self._read(me, psutil)
            self._stop.wait(self._every)
        self._read(me, psutil)

    def _read(self, me, psutil) -> None:
        for proc in me.children(recursive=True):
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue  # ended in between: its last reading stands
            self._seen[proc.pid] = times.user + times.system

    def seconds(self) -> list[float]:
        """Each worker's CPU seconds, busiest first (processes that used under 0.5 s left out)."""
        return sorted((round(s, 1) for s in self._seen.values() if s >= 0.5), reverse=True)


def _compared(args, argv: Sequence[str], beam_args: Sequence[str], workdir: str) -> list[dict[str, Any]]:
    """Each round: this script's figures with ``--baseline``'s code, then with this checkout's."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rest = [a for i, a in enumerate(argv) if a != "--baseline" and (i == 0 or argv[i - 1] != "--baseline")
            and not a.startswith("--baseline=")]
    runs = []
    for round_ in range(args.rounds):
        for name, root in (("baseline", os.path.abspath(args.baseline)), ("this", here)):
            env = dict(os.environ, PYTHONPATH=root)
            if args.build_images:
                figures = _build_figures(root, env, workdir, beam_args)
            else:
                done = subprocess.run([sys.executable, os.path.abspath(__file__), *rest, "--workdir", workdir],
                                      cwd=workdir, env=env, capture_output=True, text=True, check=True)
                figures = json.loads(done.stdout.strip().splitlines()[-1])
            figures.update(code=name, checkout=root, commit=subprocess.run(
                ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
                round=round_)
            print(json.dumps(figures), flush=True)
            runs.append(figures)
    return runs


def _build_figures(root: str, env: dict, workdir: str, beam_args: Sequence[str]) -> dict[str, Any]:
    """The build job on ``workdir``'s image tree with ``root``'s code: stages, seconds, peak RSS."""
    from benchmarks.measure import run_measured

    source = next(os.path.join(workdir, name) for name in sorted(os.listdir(workdir)) if name.startswith("images-"))
    out = tempfile.mkdtemp(prefix="out_", dir=workdir)
    usage = os.path.join(out, "usage.json")
    measured = run_measured([sys.executable, "-m", "benchmarks.child_usage", usage, "--count_stages",
                             "beam_jobs.build_shards", "--input", source, "--output_dir", os.path.join(out, "set"),
                             "--num_shards", "4", *beam_args], cwd=root, log_path=os.path.join(out, "log"), env=env)
    if measured.returncode:
        raise SystemExit(f"the build with {root} failed: {measured.output[-2000:]}")
    with open(usage) as fh:
        (pipeline,) = json.load(fh)["pipelines"]
    return {"input": "build", "images": sum(len(files) for _, _, files in os.walk(source)) - 1,
            "stages": pipeline["stages"], "seconds": round(measured.seconds, 1),
            "cpu_s": round(measured.cpu_seconds, 1), "rss_tree_mib": round(measured.rss_tree / 2 ** 20),
            "rss_process_mib": round(measured.rss_process / 2 ** 20)}


def run(argv: Sequence[str] | None = None) -> dict[str, Any] | list[dict[str, Any]]:
    """Runs the benchmark; returns (and prints) the figures."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=0, help="rows of a .jsonl manifest")
    parser.add_argument("--files", type=int, default=0, help="empty files of a folder tree")
    parser.add_argument("--folders", type=int, default=1000, help="class folders of the tree")
    parser.add_argument("--build_images", type=int, default=0,
                        help="run the build job on a tree of this many small PNGs (with --baseline)")
    parser.add_argument("--workdir", default=None, help="where the input is written (reused)")
    parser.add_argument("--baseline", default=None, help="another checkout, measured in turn with this one")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of baseline and this checkout")
    args, beam_args = parser.parse_known_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="listing_scale_")
    os.makedirs(workdir, exist_ok=True)
    if args.build_images:
        source = os.path.join(workdir, f"images-{args.build_images}-{args.folders}")
        os.makedirs(source, exist_ok=True)
        write_images(source, args.build_images, args.folders)
        if not args.baseline:
            raise SystemExit("--build_images needs --baseline")
    if args.baseline:
        if not args.build_images and not args.rows:  # written once, before the runs that list it
            tree = os.path.join(workdir, f"tree-{args.files}-{args.folders}")
            os.makedirs(tree, exist_ok=True)
            write_tree(tree, args.files, args.folders)
        return _compared(args, argv, beam_args, workdir)
    if args.rows:
        source = os.path.join(workdir, f"rows-{args.rows}.jsonl")
        write_manifest(source, args.rows)
    else:
        source = os.path.join(workdir, f"tree-{args.files}-{args.folders}")
        os.makedirs(source, exist_ok=True)
        write_tree(source, args.files, args.folders)
    options = PipelineOptions(beam_args)
    before = _rss_mib()
    start = time.monotonic()
    p = beam.Pipeline(runner=local_runner(options), options=options)
    discover = discover_images_of([source], LabelRules())
    survey = time.monotonic() - start
    listed = p | "Discover" >> discover
    for name, kind in (("entries", SourceImage), ("dead_letters", DeadLetter)):
        (listed
         | f"Only{name.title()}" >> beam.Filter(lambda entry, kind=kind: isinstance(entry, kind))
         | f"Count{name.title()}" >> beam.combiners.Count.Globally()
         | f"Report{name.title()}" >> beam.Map(_report, name))
    with _WorkerCpu() as workers:
        result = p.run()
        result.wait_until_finish()
    counts = {name: sum(r.committed for r in result.metrics().query(
        MetricsFilter().with_namespace(_NAMESPACE).with_name(name))["counters"])
        for name in ("entries", "dead_letters")}
    seconds = time.monotonic() - start
    figures = {"input": "manifest" if args.rows else "tree", "rows": args.rows, "files": args.files,
               "folders": args.folders if args.files else 0, "seconds": round(seconds, 1),
               "survey_s": round(survey, 2), "tasks": len(getattr(discover, "_tasks", ())),
               "rss_before_mib": round(before), "peak_rss_mib": round(
                   resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
               **counts, "worker_cpu_s": workers.seconds(),
               "busiest_share": round(max(workers.seconds()) / sum(workers.seconds()), 2)
               if workers.seconds() else None}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    run(sys.argv[1:])
    sys.exit(0)
