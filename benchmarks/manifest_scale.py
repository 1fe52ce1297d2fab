"""The manifest at 100M-image scale: ``manifest.json`` size and the publish step's peak memory.

A synthetic set of ``--shards`` shards (default 70,000) of ``--classes`` classes (default 1,000,
every class in every shard, as a global shuffle gives). Each measurement runs in a fresh process
and reports its peak RSS (``ru_maxrss``), next to a process that only imports the same modules:

- ``v1``: format 1 as publish built it before: every ``ShardResult`` with its label counts in one
  list (``AsList``), the ``Manifest`` of them, and ``manifest.json`` serialized in one piece;
- ``v2``: the real ``publish_shards`` into a local folder of staged (empty) shard files, given
  only the shard-list parts the workers staged beforehand (``WriteShardListParts``, worker side,
  not measured): it reads the shards' staged names from the parts' files. Also reported: the
  pickled size of what the publish step is given as side inputs (the parts), next to that of the
  written shards without label counts, which it was given before (``AsIter`` of ``DropLabelCounts``).

Format 1 at 70,000 x 1,000 passed 20 GiB of RSS and was stopped (the machine is shared), so
``v1`` runs at ``--v1_shards`` (default 7,000) and grows linearly with shards x classes.

Run: ``python -m benchmarks.manifest_scale [--shards N] [--classes N] [--v1_shards N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Iterator

_RUN_ID = "b" * 32


def _label_counts(index: int, classes: int) -> dict[str, int]:
    return {str(label): 2 for label in range(classes)}  # ~2,000 records a shard, every class


def _results(folder: str, shards: int, classes: int, with_counts: bool) -> Iterator:
    from transforms.shardset.staged import ShardResult
    from transforms.shardset.naming import join_path, shard_file_name
    from transforms.tfrecord.shard_writer import ShardStats

    staging = join_path(folder, f".staging/{_RUN_ID}")
    for index in range(shards):
        name = shard_file_name("train", index, shards, "gzip")
        counts = _label_counts(index, classes) if with_counts else {}
        stats = ShardStats(sum(counts.values()) if with_counts else 2 * classes, 157_286_400,
                           f"{index:064x}", counts)
        yield ShardResult("train", index, shards, name, join_path(staging, f"{name}.tmp"), None, stats)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _imports() -> None:
    import transforms.shard_sink  # noqa: F401
    import transforms.shardset.shard_list  # noqa: F401


def run_baseline(_folder: str, _shards: int, _classes: int) -> dict:
    _imports()
    return {"peak_mib": _peak_mib()}


def run_v1(folder: str, shards: int, classes: int) -> dict:
    """Format 1 as publish built it: all results with counts, then one manifest in one piece."""
    _imports()
    from transforms.shardset.manifest import ShardEntry, sorted_label_counts

    start = time.perf_counter()
    results = list(_results(folder, shards, classes, True))  # AsList(results)
    entries = [ShardEntry(r.file, r.stats.records, r.stats.bytes, r.stats.sha256, dict(r.stats.label_counts))
               for r in results]
    totals: dict[str, int] = {}
    for entry in entries:
        for label, count in entry.label_counts.items():
            totals[label] = totals.get(label, 0) + count
    doc = {"format": "tfrecord-shards", "format_version": 1, "created_by": "build_shards", "seed": 0,
           "compression": "gzip", "options": {}, "feature_spec": {},
           "labels": [f"class_{i:04d}" for i in range(classes)],
           "records": sum(e.records for e in entries), "dead_letters": 0,
           "splits": {"train": {"records": sum(e.records for e in entries),
                                "bytes": sum(e.bytes for e in entries),
                                "label_counts": sorted_label_counts(totals),
                                "shards": [e.to_dict() for e in entries]}}}
    data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    seconds = time.perf_counter() - start
    return {"manifest_bytes": len(data), "seconds": seconds, "peak_mib": _peak_mib()}


def stage(folder: str, shards: int, classes: int) -> None:
    """Worker side: the staged shard files and the shard-list parts (not measured)."""
    import pickle

    from transforms.shardset.ownership import PublishPolicy
    from transforms.shardset.staged import PART_SHARDS
    from transforms.storage.lock import acquire_lock
    from transforms.storage.shard_files import write_shard_list_part

    os.makedirs(os.path.join(folder, ".staging", _RUN_ID), exist_ok=True)
    acquire_lock(folder, PublishPolicy(_RUN_ID), "build_shards")
    part: list = []
    parts = []
    for result in _results(folder, shards, classes, True):
        open(result.staged, "wb").close()
        part.append(result)
        if len(part) == PART_SHARDS or result.index == shards - 1:
            key = ("train", result.index // PART_SHARDS)
            parts.append(write_shard_list_part((key, part), folder, _RUN_ID))
            part = []
    with open(os.path.join(folder, "parts.pickle"), "wb") as fh:
        pickle.dump(parts, fh)


def run_v2(folder: str, shards: int, classes: int) -> dict:
    """The real publish_shards, given only the staged parts of the shard list."""
    _imports()
    import pickle

    from tests.helpers import publish_shards
    from transforms.shardset.ownership import PublishPolicy
    from transforms.shardset.planning import SplitTotals

    with open(os.path.join(folder, "parts.pickle"), "rb") as fh:
        parts = pickle.load(fh)
    os.remove(os.path.join(folder, "parts.pickle"))
    side_input_bytes = len(pickle.dumps(parts))
    records = sum(sum(p.label_counts.values()) for p in parts)
    totals = [SplitTotals("train", 157_286_400 * shards, records, 1 << 20, shards)]
    fields = {"created_by": "build_shards", "options": {}, "seed": 0, "feature_spec": {}}
    start = time.perf_counter()
    publish_shards(folder, parts, totals, [],
                   [f"class_{i:04d}" for i in range(classes)], records, "gzip", fields, None,
                   PublishPolicy(_RUN_ID))
    seconds = time.perf_counter() - start
    return {"manifest_bytes": os.path.getsize(os.path.join(folder, "manifest.json")),
            "shard_list_bytes": os.path.getsize(os.path.join(folder, "shards.jsonl")),
            "seconds": seconds, "peak_mib": _peak_mib(), "side_input_bytes": side_input_bytes,
            "results_side_input_bytes": _results_pickled(folder, shards, classes)}


def _results_pickled(folder: str, shards: int, classes: int) -> int:
    """Pickled bytes of every written shard without label counts: the side input publish had before."""
    import pickle

    return sum(len(pickle.dumps(result)) for result in _results(folder, shards, classes, False))


_MODES = {"baseline": run_baseline, "v1": run_v1, "stage": stage, "v2": run_v2}


def _child(mode: str, folder: str, shards: int, classes: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.manifest_scale", "--mode", mode, "--folder", folder,
                          "--shards", str(shards), "--classes", str(classes)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1]) if mode != "stage" else {}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=70_000)
    parser.add_argument("--classes", type=int, default=1_000)
    parser.add_argument("--v1_shards", type=int, default=7_000)
    parser.add_argument("--mode", choices=sorted(_MODES))
    parser.add_argument("--folder")
    args = parser.parse_args(argv)
    if args.mode:
        print(json.dumps(_MODES[args.mode](args.folder, args.shards, args.classes) or {}))
        return
    with tempfile.TemporaryDirectory() as folder:
        baseline = _child("baseline", folder, args.shards, args.classes)
        v1 = {"shards": args.v1_shards, **_child("v1", folder, args.v1_shards, args.classes)}
        _child("stage", folder, args.shards, args.classes)
        v2 = _child("v2", folder, args.shards, args.classes)
    print(json.dumps({"shards": args.shards, "classes": args.classes, "baseline": baseline, "v1": v1, "v2": v2},
                     indent=1))


if __name__ == "__main__":
    main()
