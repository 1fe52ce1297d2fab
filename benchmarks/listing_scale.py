"""Listing at scale: ``DiscoverImages`` on a large input manifest or folder tree, one JSON line of figures.

    python -m benchmarks.listing_scale --rows 1000000            # a .jsonl manifest of N rows
    python -m benchmarks.listing_scale --files 200000 --folders 1000   # a tree of empty files

The input is written to ``--workdir`` (a temporary folder unless given; an
existing input of the same shape there is reused) by streaming, so writing it
does not raise this process's peak. The real ``DiscoverImages`` then lists it
on the DirectRunner, one process, and only the number of listed entries and
dead letters leaves the step (``Count.Globally``, lifted before the shuffle).
The figures printed are ``seconds`` (wall clock of the pipeline run),
``rss_before_mib`` (resident set before the pipeline), ``peak_rss_mib`` (this
process's peak, ``ru_maxrss``), ``entries`` and ``dead_letters``.

Extra arguments go to Beam.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from typing import Any, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from transforms.beam_compat import local_runner
from transforms.discover_images import DiscoverImages
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


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the benchmark; returns (and prints) the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=0, help="rows of a .jsonl manifest")
    parser.add_argument("--files", type=int, default=0, help="empty files of a folder tree")
    parser.add_argument("--folders", type=int, default=1000, help="class folders of the tree")
    parser.add_argument("--workdir", default=None, help="where the input is written (reused)")
    args, beam_args = parser.parse_known_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="listing_scale_")
    os.makedirs(workdir, exist_ok=True)
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
    listed = p | "Discover" >> DiscoverImages.of_inputs([source], LabelRules())
    for name, kind in (("entries", SourceImage), ("dead_letters", DeadLetter)):
        (listed
         | f"Only{name.title()}" >> beam.Filter(lambda entry, kind=kind: isinstance(entry, kind))
         | f"Count{name.title()}" >> beam.combiners.Count.Globally()
         | f"Report{name.title()}" >> beam.Map(_report, name))
    result = p.run()
    result.wait_until_finish()
    counts = {name: sum(r.committed for r in result.metrics().query(
        MetricsFilter().with_namespace(_NAMESPACE).with_name(name))["counters"])
        for name in ("entries", "dead_letters")}
    seconds = time.monotonic() - start
    figures = {"input": "manifest" if args.rows else "tree", "rows": args.rows, "files": args.files,
               "folders": args.folders if args.files else 0, "seconds": round(seconds, 1),
               "rss_before_mib": round(before), "peak_rss_mib": round(
                   resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
               **counts}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    run(sys.argv[1:])
    sys.exit(0)
