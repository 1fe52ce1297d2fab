"""Verify's report step with many problems: peak RSS of merging staged parts against one list.

Each measurement runs in a fresh process and reports its peak RSS (``ru_maxrss``) and the
seconds of the report step, for ``--small`` and ``--large`` problems (default 20,000 and 200,000):

- ``baseline``: a process that imports the same modules;
- ``list``: the report as the step wrote it before: every problem in one list, sorted
  (``Report.build``), serialized in one piece (``Report.dumps``);
- ``parts``: the real ``report_files.write_report``, merging parts of ``PART_PROBLEMS`` the
  "workers" staged beforehand (another process, not measured).

Run: ``python -m benchmarks.report_parts [--small N] [--large N]``.
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


def _problems(count: int):
    from transforms.verify.checks import Problem

    for i in range(count):
        yield Problem(f"gs://bucket/set/train-{i % 9973:05d}-of-09973.tfrecord.gz", (i * 7919) % 10**9,
                      "crc_mismatch", f"record {i}: the data's CRC is 0x{i:08x}, its bytes give 0x{i ^ 0xFFFF:08x}")


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _imports() -> None:
    import transforms.storage.report_files  # noqa: F401
    import transforms.verify.checks  # noqa: F401


def run_baseline(_folder: str, _count: int) -> dict:
    _imports()
    return {"peak_mib": _peak_mib()}


def run_list(folder: str, count: int) -> dict:
    _imports()
    from transforms.verify.checks import Report

    start = time.perf_counter()
    found = list(_problems(count))  # the side inputs collected in one list
    with open(os.path.join(folder, "report.json"), "wb") as fh:
        fh.write(Report.build(1, count, 1, found).dumps())
    return {"seconds": time.perf_counter() - start, "peak_mib": _peak_mib()}


def stage(folder: str, count: int) -> None:
    """Worker side: the problems in staged parts (not measured)."""
    import itertools
    import pickle

    from transforms.storage.report_files import PART_PROBLEMS, parts_folder, write_problem_part

    parts_dir = parts_folder(os.path.join(folder, "report.json"))
    problems = _problems(count)
    parts = []
    while True:
        piece = list(itertools.islice(problems, PART_PROBLEMS))
        if not piece:
            break
        parts.append(write_problem_part(piece, parts_dir))
    with open(os.path.join(folder, "parts.pickle"), "wb") as fh:
        pickle.dump((parts, parts_dir), fh)


def run_parts(folder: str, count: int) -> dict:
    _imports()
    import pickle

    from transforms.storage.report_files import write_report

    with open(os.path.join(folder, "parts.pickle"), "rb") as fh:
        parts, parts_dir = pickle.load(fh)
    start = time.perf_counter()
    write_report(os.path.join(folder, "report.json"), 1, count, 1, parts, parts_dir)
    return {"seconds": time.perf_counter() - start, "peak_mib": _peak_mib(), "parts": len(parts)}


_MODES = {"baseline": run_baseline, "list": run_list, "stage": stage, "parts": run_parts}


def _child(mode: str, folder: str, count: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.report_parts", "--mode", mode, "--folder", folder,
                          "--count", str(count)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1]) if mode != "stage" else {}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=200_000)
    parser.add_argument("--mode", choices=sorted(_MODES))
    parser.add_argument("--folder")
    parser.add_argument("--count", type=int)
    args = parser.parse_args(argv)
    if args.mode:
        print(json.dumps(_MODES[args.mode](args.folder, args.count) or {}))
        return
    out: dict = {}
    for count in (args.small, args.large):
        with tempfile.TemporaryDirectory() as folder:
            row = {"baseline": _child("baseline", folder, count), "list": _child("list", folder, count)}
            _child("stage", folder, count)
            row["parts"] = _child("parts", folder, count)
        out[str(count)] = row
    for mode in ("list", "parts"):
        above = [out[str(c)][mode]["peak_mib"] - out[str(c)]["baseline"]["peak_mib"] for c in (args.small, args.large)]
        out[f"{mode}_above_imports_mib"] = above
        out[f"{mode}_peak_ratio"] = out[str(args.large)][mode]["peak_mib"] / out[str(args.small)][mode]["peak_mib"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
