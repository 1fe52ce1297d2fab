"""Scaling: how the jobs grow with workers, items, listings, manifests and reports.

    python -m benchmarks.scaling CASE [--quick] [ARG ...]

Cases:

- ``workers``: How the build and verify jobs scale with DirectRunner workers, beside the baselines.
- ``plan_scale``: Planning at scale: ``PlanShards`` on N synthetic items, one JSON line of figures.
- ``billion``: Nothing big at a billion items: what grows with dead letters, copies and verify's keys.
- ``listing_scale``: Listing at scale: ``DiscoverImages`` on a large input manifest or folder tree, one JSON line of figures.
- ``plan_cost``: What a plan costs against the build it plans, on the same photos, in the same run.
- ``manifest_scale``: The manifest at 100M-image scale: ``manifest.json`` size and the publish step's peak memory.
- ``report_parts``: Verify's report step with many problems: peak RSS of merging staged parts against one list.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import glob
import hashlib
import json
import math
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

from benchmarks import common
from benchmarks.common import (CACHE, Dataset, MEAN_BYTES, Measurement, checkout_env, dataset, machine,
                               run_measured)
from transforms.shardset.planning import BUCKET_BITS, MIB, order_key


# -- case workers -----------------------------------------------------------------------------------------

_WORKERS_DOC = """How the build and verify jobs scale with DirectRunner workers, beside the baselines.

    python -m benchmarks.scaling workers --workers 1,2,4,8,16            # ~4,000 and ~12,000 photos
    python -m benchmarks.scaling workers --quick --workers 1,2           # ~300 and ~900: checks it works
    python -m benchmarks.scaling workers --report benchmarks/.cache/scaling.json   # print a saved run

Datasets are the photo JPEGs of ``benchmarks/common.py`` (generated once into
``benchmarks/.cache/``), two sizes, the small one a prefix of the large one.
Every case runs as a fresh process at every worker count ``N`` (1: the
DirectRunner's default, one in-process worker; N > 1: ``--direct_running_mode
multi_processing --direct_num_workers N``) and both sizes, round after round:

- build job: ``beam_jobs/build_shards.py`` with ``--num_shards``;
- Beam ``Create | Map(read, Example) | WriteToTFRecord``
  (``benchmarks/throughput.py baseline beam_build``), the same Example schema;
- ``multiprocessing.Pool`` loop: N processes, each reading its share of the
  images, encoding each Example with ``transforms/example/codec.py``, framing it
  with ``transforms/tfrecord/framing.py`` and writing its own file
  (``benchmarks/throughput.py baseline pool_build``);
- verify job: ``beam_jobs/verify_shards.py`` on the build job's output;
- Beam ``ReadFromTFRecord | Map(parse)`` on the same shards, on Beam's default runner
  (``benchmarks/throughput.py baseline beam_read``).

Columns:

- **wall s**: whole-process wall time at each size, start-up included
  (``benchmarks/common.py``), median of the rounds;
- **marginal s/GB**: (large - small) wall seconds over (large - small) input GB,
  the median of the rounds' paired differences; input bytes are the image
  files (build) or the ``.tfrecord`` shards (verify);
- **CPU s/GB**: the same marginal figure for CPU seconds (user + system) of all
  processes of the run, and apart for the coordinator (the launching process:
  the runner, or the Pool's parent) and the workers (its child processes:
  Beam's SDK worker processes, the Pool's processes). Each case runs under
  ``benchmarks/common.py``, which runs the job's module in its own process
  and, at the end, takes ``getrusage(RUSAGE_CHILDREN)``: the workers. The
  coordinator is the process tree's total from ``wait4`` less that. A worker
  still alive at the end (none expected) is read with psutil and counted, and
  shown in the JSON as ``unreaped``;
- **CPU s small** and **+ per added worker**: the whole small run's CPU seconds
  (all processes, start-up included), and what each worker beyond the first
  row's worker count adds to it: (CPU(n) - CPU(first)) / (n - first);
- **fused stages**: the number of stages the FnApiRunner executes for the
  job's pipeline, read in the run itself: ``child_usage.py --count_stages``
  records the length of the stage list ``FnApiRunner.run_stages`` receives
  after Beam's own fusion phases (``create_stages``), which is the figure the
  runner also reports as its ``__num_fused_stages`` counter. The names of the
  stages are in the JSON;
- **read / input byte**: bytes read from the input files (the images for a
  build, the ``.tfrecord`` shards for verify) over their total size, and
  **opens / file**, from a separate, smaller run of each case under
  ``strace -f --seccomp-bpf -y -e trace=openat,read,pread64,readv,preadv,
  preadv2,sendfile,copy_file_range``: ``-y`` makes strace print the path
  behind each file descriptor, so every read is attributed to its file in
  every process and thread without tracking descriptors; reads through
  ``mmap`` would not be seen (none of these cases maps its inputs). A ratio of
  1.0 means every input byte was read once. These runs use ``--probe_images``
  photos, at the smallest and largest worker counts (``--probe_workers``), and
  are not timed. Without strace (or ptrace) the columns are empty and the
  reason is printed.

Prints a Markdown table and writes every figure (each run, the medians, the
marginal figures, the stage names, the bytes read per file kind) to
``--json`` (default ``benchmarks/.cache/scaling.json``).
"""

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)


_SIZES = ("small", "large")
_DEFAULT_IMAGES = (4_000, 12_000)
_QUICK_IMAGES = (300, 900)
_STRACE_CALLS = "openat,read,pread64,readv,preadv,preadv2,sendfile,copy_file_range"


def beam_flags(workers: int) -> list[str]:
    """The DirectRunner flags of a run with ``workers`` workers (1: Beam's in-process default).

    One worker is said explicitly: the jobs give a large local input one worker per core
    unless the flags say otherwise.
    """
    if workers == 1:
        return ["--direct_num_workers", "1"]
    return ["--direct_running_mode", "multi_processing", "--direct_num_workers", str(workers)]


# -- strace ------------------------------------------------------------------------------------

_LINE = re.compile(r"^(\d+)\s+(.*)$")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+)(?:<(.*)>)?")
_FD = re.compile(r"\d+<([^>]*)>")


@dataclass
class FileReads:
    """What the traced processes did with one file."""

    bytes: int = 0
    opens: int = 0


def read_bytes_by_file(lines: Iterable[str]) -> dict[str, FileReads]:
    """Bytes read from, and successful opens of, each file in ``strace -f -y`` output.

    Args:
        lines: Lines of ``strace -f -y`` (``-o`` file: each line starts with the
            thread id) tracing some of ``openat``, ``read``, ``pread64``,
            ``readv``, ``preadv``, ``preadv2``, ``sendfile`` and
            ``copy_file_range``. A call split by another thread's call
            (``<unfinished ...>`` ... ``<... read resumed>``) is joined up.

    Returns:
        Path (as strace printed it behind the descriptor) to its bytes read and
        opens; sockets and pipes appear under their ``socket:[...]`` names.
    """
    files: dict[str, FileReads] = {}
    pending: dict[str, str] = {}
    for raw in lines:
        line = _LINE.match(raw.rstrip("\n"))
        if not line:
            continue
        tid, text = line.groups()
        if text.endswith("<unfinished ...>"):
            pending[tid] = text[:-len("<unfinished ...>")]
            continue
        resumed = _RESUMED.match(text)
        if resumed:
            text = pending.pop(tid, "") + resumed.group(2)
        call = _CALL.match(text)
        if not call or int(call.group(3)) < 0:
            continue
        name, args, result, returned_path = call.groups()
        if name == "openat":
            if returned_path is not None:
                files.setdefault(returned_path, FileReads()).opens += 1
            continue
        arguments = args.split(", ")
        source = arguments[1] if name == "sendfile" and len(arguments) > 1 else arguments[0]
        fd = _FD.match(source)
        if fd:
            files.setdefault(fd.group(1), FileReads()).bytes += int(result)
    return files


def _has_strace() -> tuple[bool, str]:
    if shutil.which("strace") is None:
        return False, "strace is not installed"
    try:
        done = subprocess.run(["strace", "-f", "-qq", "-e", "trace=read", "-o", os.devnull, "true"],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, f"strace does not run: {err}"
    if done.returncode != 0:
        return False, f"strace cannot trace here: {done.stderr.decode(errors='replace').strip()}"
    return True, ""


# -- marginal figures --------------------------------------------------------------------------


def marginal(small: list[float], large: list[float], small_bytes: int, large_bytes: int) -> float | None:
    """Median over rounds of (large - small), per GB (10**9 bytes) between the two sizes.

    Args:
        small: One figure per round at the small size.
        large: The same rounds' figures at the large size (paired by position).
        small_bytes: Input bytes of the small size.
        large_bytes: Input bytes of the large size.

    Returns:
        The marginal figure per GB, or None when the sizes do not differ or a
        round is missing.
    """
    extra_gb = (large_bytes - small_bytes) / 1e9
    if extra_gb <= 0 or not small or len(small) != len(large):
        return None
    return statistics.median(b - a for a, b in zip(small, large)) / extra_gb


# -- cases -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One job or baseline.

    Attributes:
        name: Its row label.
        group: ``build`` or ``verify``.
        command: (dataset, shards folder, output folder, workers) -> the module
            and its arguments, as ``python -m`` takes them.
        beam: Whether it runs a Beam pipeline (its fused stages are counted).
        writes: Whether it writes an output folder.
    """

    name: str
    group: str
    command: Callable[[Dataset, str, str, int], list[str]]
    beam: bool = True
    writes: bool = True


def _cases(num_shards: int) -> list[Case]:
    shards = ["--num_shards", str(num_shards)]
    return [
        Case("build job", "build", lambda ds, _, out, n: [
            "beam_jobs.build_shards", "--input", ds.root, "--output_dir", out] + shards + beam_flags(n)),
        Case("Beam Create | Map | WriteToTFRecord", "build", lambda ds, _, out, n: [
            "benchmarks.throughput", "baseline", "beam_build", "--input", ds.root, "--output_dir", out]
            + shards + beam_flags(n)),
        Case("multiprocessing.Pool loop", "build", lambda ds, _, out, n: [
            "benchmarks.throughput", "baseline", "pool_build", "--input", ds.root, "--output_dir", out,
            "--processes", str(n)], beam=False),
        Case("verify job", "verify", lambda _, ref, __, n: [
            "beam_jobs.verify_shards", "--output_dir", ref] + beam_flags(n), writes=False),
        Case("Beam ReadFromTFRecord | Map(parse)", "verify", lambda _, ref, __, n: [
            "benchmarks.throughput", "baseline", "beam_read", "--pattern", os.path.join(ref, "*.tfrecord")]
            + beam_flags(n), writes=False),
    ]


@dataclass
class Run:
    """One measured run of a case."""

    seconds: float
    cpu: float
    coordinator_cpu: float
    workers_cpu: float
    unreaped: int
    stages: list[int]
    rss_tree: int


@dataclass
class Cell:
    """A case at one worker count and size: its runs, and its input."""

    input_bytes: int = 0
    runs: list[Run] = field(default_factory=list)


def _shard_files(folder: str) -> list[str]:
    return sorted(glob.glob(os.path.join(folder, "*.tfrecord")))


def _input_files(case: Case, ds: Dataset, ref: str) -> list[str]:
    if case.group == "verify":
        return [os.path.realpath(f) for f in _shard_files(ref)]
    root = os.path.realpath(ds.root)
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [os.path.join(folder, n) for n in names if not n.startswith(".")]
    return found


def _command(case: Case, usage: str, args: list[str]) -> list[str]:
    return ([sys.executable, "-m", "benchmarks.common", "child_usage", usage]
            + (["--count_stages"] if case.beam else []) + args)


def _result_line(output: str) -> dict:
    for line in reversed(output.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {}


def _check(case: Case, measured: Measurement, out: str, expected: int) -> str | None:
    """Why a finished run does not count (failed, or wrote other than ``expected`` records), or None."""
    if measured.returncode != 0:
        tail = measured.output.strip().splitlines()[-1:] or [""]
        return f"exit {measured.returncode}: {tail[0][:300]}"
    if case.name == "build job":
        with open(os.path.join(out, "manifest.json")) as fh:
            records = json.load(fh)["records"]
    elif case.name == "verify job":
        return None  # exit 0: every check passed, the manifest's record count included
    else:
        records = _result_line(measured.output).get("records")
    return None if records == expected else f"{records} records, expected {expected}"


def _measure(case: Case, args: list[str], out: str | None, expected: int, log: str,
             prefix: list[str] | None = None) -> tuple[Measurement, dict]:
    """Runs a case (once more after a failure, as Beam's data plane fails now and then under load)."""
    usage_path = log + ".usage.json"
    for attempt in (1, 2):
        if out and case.writes:
            shutil.rmtree(out, ignore_errors=True)
        measured = run_measured((prefix or []) + _command(case, usage_path, args), _ROOT, log, env=checkout_env())
        problem = _check(case, measured, out or "", expected)
        if problem is None:
            with open(usage_path) as fh:
                return measured, json.load(fh)
        shutil.copyfile(log, log + ".failed")
        if attempt == 2:
            raise SystemExit(f"{case.name} failed twice ({problem}); log {log}")
        print(f"  {case.name} failed ({problem}); once more", flush=True)
    raise AssertionError("unreachable")


def _run_of(measured: Measurement, usage: dict) -> Run:
    workers = usage["children_cpu"] + usage["unreaped_cpu"]
    coordinator = measured.cpu_seconds - usage["children_cpu"]
    return Run(seconds=measured.seconds, cpu=coordinator + workers, coordinator_cpu=coordinator,
               workers_cpu=workers, unreaped=usage["unreaped"],
               stages=[p["stages"] for p in usage.get("pipelines", [])], rss_tree=measured.rss_tree)


def _probe(case: Case, ds: Dataset, ref: str, out: str, workers: int, logs: str) -> dict:
    """Bytes read per input byte and opens per input file, from one run under strace."""
    trace = os.path.join(logs, "probe.strace")
    log = os.path.join(logs, f"probe-{_slug(case.name)}-w{workers}.log")
    strace = ["strace", "-f", "--seccomp-bpf", "-y", "-s", "0", "-qq", "-e", "signal=none",
              "-e", f"trace={_STRACE_CALLS}", "-o", trace]
    measured, usage = _measure(case, case.command(ds, ref, out, workers), out, ds.images, log, strace)
    inputs = _input_files(case, ds, ref)
    with open(trace, errors="replace") as fh:
        files = read_bytes_by_file(fh)
    os.remove(trace)
    total = sum(os.path.getsize(f) for f in inputs)
    read = sum(files[f].bytes for f in inputs if f in files)
    opens = sum(files[f].opens for f in inputs if f in files)
    never = sum(1 for f in inputs if f not in files or files[f].bytes == 0)
    folder = os.path.realpath(ref if case.group == "verify" else ds.root) + os.sep
    inside = set(inputs)
    other = {os.path.basename(p): r.bytes for p, r in files.items()
             if p.startswith(folder) and p not in inside and r.bytes}
    return {"images": ds.images, "workers": workers, "input_files": len(inputs), "input_bytes": total,
            "bytes_read": read, "read_per_input_byte": round(read / total, 4) if total else None,
            "opens_per_file": round(opens / len(inputs), 3) if inputs else None,
            "files_never_read": never, "other_bytes_read_in_folder": other,
            "stages": [p["stages"] for p in usage.get("pipelines", [])],
            "traced_seconds": round(measured.seconds, 1)}


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()


# -- report ------------------------------------------------------------------------------------


def _rows(cells: dict, cases: list[Case], workers: list[int], probes: dict) -> list[dict]:
    rows = []
    for case in cases:
        base = None
        for n in workers:
            small, large = cells[(case.name, n, "small")], cells[(case.name, n, "large")]

            def each(attr: str, cell: Cell) -> list[float]:
                return [getattr(r, attr) for r in cell.runs]

            def per_gb(attr: str) -> float | None:
                value = marginal(each(attr, small), each(attr, large), small.input_bytes, large.input_bytes)
                return None if value is None else round(value, 2)

            row = {"case": case.name, "group": case.group, "workers": n,
                   "seconds": {s: round(statistics.median(each("seconds", c)), 2)
                               for s, c in (("small", small), ("large", large))},
                   "seconds_each": {s: [round(x, 2) for x in each("seconds", c)]
                                    for s, c in (("small", small), ("large", large))},
                   "input_bytes": {"small": small.input_bytes, "large": large.input_bytes},
                   "s_per_gb": per_gb("seconds"), "cpu_s_per_gb": per_gb("cpu"),
                   "coordinator_cpu_s_per_gb": per_gb("coordinator_cpu"),
                   "workers_cpu_s_per_gb": per_gb("workers_cpu"),
                   "cpu_each": {s: [{"all": round(r.cpu, 2), "coordinator": round(r.coordinator_cpu, 2),
                                     "workers": round(r.workers_cpu, 2), "unreaped": r.unreaped}
                                    for r in c.runs] for s, c in (("small", small), ("large", large))},
                   "rss_tree_mib_large": round(statistics.median(r.rss_tree for r in large.runs) / 2**20),
                   "fused_stages": sorted({tuple(r.stages) for c in (small, large) for r in c.runs})}
            row["cpu_small"] = round(statistics.median(each("cpu", small)), 2)
            if base is None:
                base, base_cpu, base_n = row["s_per_gb"], row["cpu_small"], n
            # What each worker beyond the first row's adds to the whole small run's CPU.
            row["cpu_s_per_added_worker"] = (round((row["cpu_small"] - base_cpu) / (n - base_n), 2)
                                             if n > base_n else None)
            row["speedup_vs_first"] = (round(base / row["s_per_gb"], 2)
                                       if base and row["s_per_gb"] and row["s_per_gb"] > 0 else None)
            probe = probes.get((case.name, n))
            if probe:
                row["probe"] = probe
            rows.append(row)
    return rows


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return ""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.0"


def table(rows: list[dict]) -> str:
    """The Markdown table of ``_rows``."""
    first = rows[0]["workers"] if rows else 1
    lines = [f"| case | workers | wall s small / large | marginal s/GB | speed-up vs {first} | "
             "CPU s/GB all | coordinator | workers | CPU s small | + per added worker | fused stages | "
             "read / input byte | opens / file |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        stages = ", ".join("+".join(str(s) for s in run) or "-" for run in row["fused_stages"])
        probe = row.get("probe", {})
        lines.append(
            f"| {row['case'].replace('|', chr(92) + '|')} | {row['workers']} | {row['seconds']['small']:.1f} / "
            f"{row['seconds']['large']:.1f} | {_fmt(row['s_per_gb'])} | "
            f"{_fmt(row['speedup_vs_first'], 2)} | {_fmt(row['cpu_s_per_gb'])} | "
            f"{_fmt(row['coordinator_cpu_s_per_gb'])} | {_fmt(row['workers_cpu_s_per_gb'])} | "
            f"{_fmt(row.get('cpu_small'))} | {_fmt(row.get('cpu_s_per_added_worker'), 2)} | {stages} | {_fmt(probe.get('read_per_input_byte'), 3)} | "
            f"{_fmt(probe.get('opens_per_file'), 2)} |")
    return "\n".join(lines)


def _counts(text: str, flag: str, parser: argparse.ArgumentParser) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        parser.error(f"{flag}: comma-separated whole numbers, got {text!r}")
    if not values or min(values) < 1:
        parser.error(f"{flag}: give at least one number, each 1 or more")
    return values


def _dataset_of(images: int) -> Dataset:
    """The photo dataset of about ``images`` images (``photos.dataset`` takes MB)."""
    return dataset(round(images * MEAN_BYTES / 1e6, 1), workers=os.cpu_count() or 1)


def workers_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_WORKERS_DOC.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4,8,16",
                        help="Worker counts, comma-separated (1: in-process; N: N worker processes).")
    parser.add_argument("--images", default=None,
                        help="Photos of the small and the large dataset (default 4000,12000; "
                             "300,900 with --quick).")
    parser.add_argument("--quick", action="store_true", help="A small pair of datasets: checks it works.")
    parser.add_argument("--repeat", type=int, default=1, help="Rounds; figures are medians of the rounds.")
    parser.add_argument("--num_shards", type=int, default=16, help="Shards of the Beam builds.")
    parser.add_argument("--probe_images", type=int, default=None,
                        help="Photos of the strace runs (default 1000; the small size with --quick).")
    parser.add_argument("--probe_workers", default=None,
                        help="Worker counts of the strace runs (default the smallest and largest of "
                             "--workers; 'none' for no strace run).")
    parser.add_argument("--cases", default=None,
                        help="Only these cases, comma-separated row labels (verify's need 'build job').")
    parser.add_argument("--json", default=os.path.join(CACHE, "scaling.json"), help="Results file.")
    parser.add_argument("--report", metavar="RESULTS_JSON", default=None,
                        help="Only print the table of an earlier run's results file.")
    args = parser.parse_args(argv)
    if args.report:
        with open(args.report) as fh:
            print(table(json.load(fh)["rows"]))
        return 0
    workers = _counts(args.workers, "--workers", parser)
    images = (_counts(args.images, "--images", parser) if args.images
              else list(_QUICK_IMAGES if args.quick else _DEFAULT_IMAGES))
    if len(images) != 2 or images[0] >= images[1]:
        parser.error("--images: two counts, the small one first")
    if args.probe_workers == "none":
        probe_workers: list[int] = []
    elif args.probe_workers:
        probe_workers = _counts(args.probe_workers, "--probe_workers", parser)
    else:
        probe_workers = sorted({min(workers), max(workers)})
    probe_images = args.probe_images or (images[0] if args.quick else 1_000)
    command = "python -m benchmarks.scaling workers " + " ".join(sys.argv[1:] if argv is None else argv)
    host = machine()  # before the runs: the load at the start

    datasets = dict(zip(_SIZES, (_dataset_of(n) for n in images)))
    for size, ds in datasets.items():
        print(f"{size}: {ds.images} photos, {ds.bytes / 1e6:.1f} MB ({ds.root})", flush=True)
    out = os.path.join(CACHE, "out", "scaling")
    logs = os.path.join(CACHE, "logs", "scaling")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(logs, exist_ok=True)
    refs = {size: os.path.join(out, f"ref-{size}") for size in _SIZES}  # the build job's shards
    scratch = os.path.join(out, "scratch")
    cases = _cases(args.num_shards)
    if args.cases:
        wanted = [name.strip() for name in args.cases.split(",")]
        if unknown := set(wanted) - {c.name for c in cases}:
            parser.error(f"--cases: no case {sorted(unknown)[0]!r}; the cases: {', '.join(c.name for c in cases)}")
        cases = [c for c in cases if c.name in wanted]
    cells = {(c.name, n, s): Cell() for c in cases for n in workers for s in _SIZES}

    for round_ in range(args.repeat):
        print(f"round {round_ + 1} of {args.repeat}", flush=True)
        for group in ("build", "verify"):  # verify reads the shards the build job wrote
            for n in workers:
                for size, ds in datasets.items():
                    for case in (c for c in cases if c.group == group):
                        target = (refs[size] if case.name == "build job" and not os.path.exists(refs[size])
                                  else scratch)
                        log = os.path.join(logs, f"{_slug(case.name)}-w{n}-{size}.log")
                        measured, usage = _measure(case, case.command(ds, refs[size], target, n), target,
                                                   ds.images, log)
                        if target == scratch:
                            shutil.rmtree(scratch, ignore_errors=True)
                        cell = cells[(case.name, n, size)]
                        cell.input_bytes = (sum(os.path.getsize(f) for f in _shard_files(refs[size]))
                                            if group == "verify" else ds.bytes)
                        run = _run_of(measured, usage)
                        cell.runs.append(run)
                        print(f"  {case.name:38s} {n:3d} workers {size:5s} {run.seconds:7.1f} s  "
                              f"CPU {run.cpu:7.1f} s (coordinator {run.coordinator_cpu:.1f}, "
                              f"workers {run.workers_cpu:.1f})  stages {run.stages}", flush=True)

    probes: dict = {}
    stage_names: dict = {}
    with_strace, why_not = _has_strace()
    if probe_workers and not with_strace:
        print(f"no strace runs: {why_not}", flush=True)
    elif probe_workers:
        probe_ds = _dataset_of(probe_images)
        probe_ref = os.path.join(out, "probe-ref")
        print(f"strace runs: {probe_ds.images} photos, {probe_ds.bytes / 1e6:.1f} MB", flush=True)
        for group in ("build", "verify"):
            for n in probe_workers:
                for case in (c for c in cases if c.group == group):
                    target = (probe_ref if case.name == "build job" and not os.path.exists(probe_ref)
                              else scratch)
                    probes[(case.name, n)] = _probe(case, probe_ds, probe_ref, target, n, logs)
                    if target == scratch:
                        shutil.rmtree(scratch, ignore_errors=True)
                    found = probes[(case.name, n)]
                    print(f"  {case.name:38s} {n:3d} workers: read {found['read_per_input_byte']} x input, "
                          f"{found['opens_per_file']} opens per file, stages {found['stages']}", flush=True)
    for case in cases:  # one run's stage names per case (the same at every worker count)
        if case.beam:
            log = os.path.join(logs, f"{_slug(case.name)}-w{workers[0]}-small.log.usage.json")
            with open(log) as fh:
                stage_names[case.name] = [p["stage_names"] for p in json.load(fh).get("pipelines", [])]

    rows = _rows(cells, cases, workers, probes)
    print()
    print(table(rows))
    results = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command, "machine": host, "rounds": args.repeat, "num_shards": args.num_shards,
        "workers": workers,
        "datasets": {size: {"root": os.path.relpath(ds.root, _ROOT), "images": ds.images, "bytes": ds.bytes}
                     for size, ds in datasets.items()},
        "strace": with_strace or why_not, "rows": rows, "stage_names": stage_names,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(results, fh, indent=1)
    print(f"\nwrote {args.json}")
    return 0


# -- case plan_scale --------------------------------------------------------------------------------------

_PLAN_SCALE_DOC = """Planning at scale: ``PlanShards`` on N synthetic items, one JSON line of figures.

    python -m benchmarks.scaling plan_scale --items 10000000 [--shards S] [--bucket_bits B]

Items are generated inside the pipeline in chunks (the driver holds only the
list of chunk bounds): ``(split, order key, framed size, index)`` with framed
sizes drawn from a lognormal around 110 KB, an ImageNet JPEG plus its
features, clipped to [2 KB, 2 MB]. They go through the real ``PlanShards`` on
the DirectRunner; the figures printed are

- ``items``, ``shards``, ``seconds`` (wall clock of the pipeline run),
  ``peak_rss_mib`` (this process and its children);
- ``max_items_per_group``: the most records any planning group held (the
  ``plan_shards/records_per_group`` metric), and ``groups``, how many there were;
- ``max_minus_min_bytes`` between the fullest and the emptiest shard, and
  ``max_record_bytes``, the largest record: the plan promises
  ``max_minus_min_bytes < 2 * max_record_bytes``.

Extra arguments go to Beam (e.g. ``--direct_num_workers 2
--direct_running_mode multi_processing``).
"""

_MEAN_RECORD = 110_000 + 300  # an ImageNet JPEG plus the other features and framing
_SIGMA = 0.55
_CHUNK = 10_000
TARGET_BYTES = 150 * MIB


def synthetic_items(chunk: tuple[int, int]) -> Iterator[tuple[str, int, int, int]]:
    """(split, order key, framed size, index) for the items of one chunk of indexes."""
    from transforms.shardset.planning import order_key

    start, stop = chunk
    rng = random.Random(start)
    mu = math.log(_MEAN_RECORD) - _SIGMA ** 2 / 2
    for i in range(start, stop):
        size = int(min(max(rng.lognormvariate(mu, _SIGMA), 2_000), 2_000_000))
        yield "train", order_key(0, i.to_bytes(8, "little")), size, i


def chunks_of(items: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` index ranges the pipeline generates items in."""
    return [(start, min(start + _CHUNK, items)) for start in range(0, items, _CHUNK)]


def _split_of(item) -> str:
    return item[0]


def _order_of(item) -> tuple[int, int]:
    return item[1], item[3]


def _size_of(item) -> int:
    return item[2]


def plan_items(p: beam.Pipeline, items: int, num_shards: int | None,
               bucket_bits: int = BUCKET_BITS) -> dict[str, beam.PCollection]:
    """Wires the generation of ``items`` synthetic items and their plan into ``p``."""
    from transforms.plan_shards import PlanShards
    import apache_beam as beam

    return (p
            | "Chunks" >> beam.Create(chunks_of(items))
            | "Spread" >> beam.Reshuffle()
            | "Items" >> beam.FlatMap(synthetic_items)
            | "Plan" >> PlanShards(split_of=_split_of, order_of=_order_of, size_of=_size_of,
                                   target_bytes=TARGET_BYTES, num_shards=num_shards,
                                   bucket_bits=bucket_bits))


def _summary(shard_bytes: list[tuple[int, int]], totals: list, path: str) -> None:
    (split,) = totals
    sizes = dict(shard_bytes)
    per_shard = [sizes.get(i, 0) for i in range(split.num_shards)]
    with open(path, "w", encoding="utf-8") as out:
        json.dump({"items": split.records, "shards": split.num_shards,
                   "planned_bytes": sum(per_shard), "total_bytes": split.total_bytes,
                   "max_minus_min_bytes": max(per_shard) - min(per_shard),
                   "max_record_bytes": split.max_record}, out)


def _peak_rss_mib() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) / 1024, 1)  # Linux reports KiB


def plan_scale_run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the benchmark; prints and returns its figures."""
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions
    from transforms.beam_compat import local_runner
    from transforms.plan_shards import ASSIGNED
    from transforms.plan_shards import METRICS_NAMESPACE
    from transforms.plan_shards import TOTALS
    import apache_beam as beam

    parser = argparse.ArgumentParser(description=_PLAN_SCALE_DOC.splitlines()[0])
    parser.add_argument("--items", type=int, required=True)
    parser.add_argument("--shards", type=int, default=None, help="fixed shard count (default: by size)")
    parser.add_argument("--bucket_bits", type=int, default=BUCKET_BITS,
                        help="bits of the order key that make a group (default: the jobs')")
    args, beam_args = parser.parse_known_args(argv)
    if args.items < 1:
        parser.error("--items must be at least 1")
    options = PipelineOptions(list(beam_args))
    with tempfile.TemporaryDirectory(prefix="plan_scale_") as tmp:
        summary_path = os.path.join(tmp, "summary.json")
        p = beam.Pipeline(runner=local_runner(options), options=options)
        planned = plan_items(p, args.items, args.shards, args.bucket_bits)
        _ = (planned[ASSIGNED]
             | "ShardAndSize" >> beam.MapTuple(lambda key, item: (key[1], _size_of(item)))
             | "BytesPerShard" >> beam.CombinePerKey(sum)
             | "AllShards" >> beam.combiners.ToList()
             | "Summarize" >> beam.Map(_summary, beam.pvalue.AsList(planned[TOTALS]), summary_path))
        started = time.monotonic()
        result = p.run()
        result.wait_until_finish()
        seconds = time.monotonic() - started
        with open(summary_path, encoding="utf-8") as summary:
            figures = json.load(summary)
    query = MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name("records_per_group")
    (groups,) = result.metrics().query(query)["distributions"]
    figures.update(seconds=round(seconds, 1), peak_rss_mib=_peak_rss_mib(),
                   max_items_per_group=groups.committed.max, groups=groups.committed.count,
                   bucket_bits=args.bucket_bits)
    if figures["items"] != args.items or figures["planned_bytes"] != figures["total_bytes"]:
        raise RuntimeError(f"planned {figures['items']} items and {figures['planned_bytes']} bytes; "
                           f"expected {args.items} items and {figures['total_bytes']} bytes")
    print(json.dumps(figures, sort_keys=True), flush=True)
    return figures


# -- case billion -----------------------------------------------------------------------------------------

_BILLION_DOC = """Nothing big at a billion items: what grows with dead letters, copies and verify's keys.

Three figures, each a ratio against a baseline measured in the same run:

- ``dead_letters``: peak RSS of a build whose CSV manifest lists ``--dead``
  missing files (each a dead letter) beside a few real images, large against
  small (default 200,000 against 20,000); and ``publish_dead_letters``, the
  publish step's own share in a process of its own: merging the staged sorted
  parts (``parts``) against what publishing did before (``list``: every
  letter in one list, sorted, joined);
- ``copies``: peak RSS of a build of a folder holding one image under
  ``--copies`` names (hard links: one image's bytes, each a ``duplicate_image``
  dead letter but one), large against small (default 100,000 against 10,000);
- ``verify_keys``: the largest duplicate-key group verify forms for
  ``--records`` records (default 100M): the bucket count ``key_bucket_count``
  gives, the real hash's evenness measured on 1M real keys, and the largest
  of the buckets drawn for all the records (a multinomial draw: every key
  lands in one bucket, uniformly, as the hash test confirms).

Each build runs the checkout's code in a fresh process (``measure.run_measured``:
``rss_process`` is the kernel's peak RSS of the one process), which also notes the
peak so far after each fused stage (``build_child``): ``peak_when_listed_mib`` is the
peak once the inputs are listed, before any is read, and ``after_listing_mib`` what
the rest of the build (reading, judging, duplicates, dead letters, publishing) added. ``--compare
CHECKOUT`` runs the builds with another checkout's code too (the figures before
a change).

Run: ``python -m benchmarks.scaling billion [--dead 20000,200000] [--copies 10000,100000]
[--records 100000000] [--compare /path/to/other/checkout] [--workdir DIR]``.
"""

_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _png(width: int) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, 6), (width * 7 % 256, 80, 160)).save(buf, "PNG")
    return buf.getvalue()


def _dead_letter_input(work: str, dead: int, present: int = 50) -> str:
    """A CSV manifest of ``present`` real images and ``dead`` missing files; returns its path."""
    folder = os.path.join(work, f"dead-{dead}")
    os.makedirs(folder, exist_ok=True)
    rows = ["path,label"]
    for i in range(present):
        path = os.path.join(folder, f"ok{i:03d}.png")
        with open(path, "wb") as fh:
            fh.write(_png(8 + i))
        rows.append(f"{path},{'ab'[i % 2]}")
    rows += [f"{folder}/missing/{i:07d}.png,a" for i in range(dead)]
    manifest = os.path.join(folder, "list.csv")
    with open(manifest, "w") as fh:
        fh.write("\n".join(rows) + "\n")
    return manifest


def _copies_input(work: str, copies: int) -> str:
    """A folder of one class holding one image under ``copies`` names (hard links) and a few others."""
    folder = os.path.join(work, f"copies-{copies}", "cat")
    if os.path.isdir(folder):  # made for an earlier checkout's build
        return os.path.dirname(folder)
    os.makedirs(folder)
    data = _png(9)
    for i in range(copies):
        path = os.path.join(folder, f"copy-{i:07d}.png")
        if i % 60_000 == 0:  # a file system allows so many links to a file (ext4: 65,000)
            first = path
            with open(first, "wb") as fh:
                fh.write(data)
        else:
            os.link(first, path)
    for i in range(20):
        with open(os.path.join(folder, f"other{i:02d}.png"), "wb") as fh:
            fh.write(_png(12 + i))
    return os.path.dirname(folder)


def _env(checkout: str) -> dict[str, str]:
    if checkout == _CHECKOUT:
        return checkout_env()
    env = dict(os.environ)
    env["PYTHONPATH"] = checkout
    return env


def build_child(peaks_path: str, argv: list[str]) -> None:
    """In this process: the build job, noting the peak RSS so far after each fused stage.

    The kernel's high-water mark (``ru_maxrss``) read after each stage the
    FnApiRunner runs (``_execute_bundle``, apache-beam 2.77.0) says which stage
    set the peak: ``listed`` is the peak once the inputs are listed, before any
    is read or judged.
    """
    import resource
    import runpy

    from apache_beam.runners.portability.fn_api_runner import fn_runner

    peaks: list[tuple[str, float]] = []
    original = fn_runner.FnApiRunner._execute_bundle

    def execute(self, context, bundle_manager, bundle_input):
        result = original(self, context, bundle_manager, bundle_input)
        peaks.append((bundle_manager.stage.name, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
        return result

    fn_runner.FnApiRunner._execute_bundle = execute
    sys.argv = ["beam_jobs.build_shards", *argv]
    try:
        runpy.run_module("beam_jobs.build_shards", run_name="__main__")
    except SystemExit as done:
        if done.code:
            raise
    finally:
        peaks.append(("(job returned)", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
        with open(peaks_path, "w") as fh:
            json.dump(peaks, fh)


def _build(checkout: str, work: str, name: str, argv: list[str]) -> dict:
    out = os.path.join(work, f"out-{name}")
    peaks_path = os.path.join(work, f"{name}.peaks.json")
    shutil.rmtree(out, ignore_errors=True)
    # By path: the checkout compared may have a benchmarks/scaling.py of its own.
    child = [sys.executable, os.path.join(_CHECKOUT, "benchmarks", "scaling.py"), "billion", "--build_child",
             peaks_path, "--"]
    env = _env(checkout)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], _CHECKOUT])  # this module; the jobs from checkout
    m = run_measured([*child, *argv, "--output_dir", out, "--max_bad_fraction", "1.0", "--direct_num_workers", "1"],
                     cwd=work, log_path=os.path.join(work, f"{name}.log"), env=env)
    if m.returncode != 0:
        raise SystemExit(f"build {name} failed:\n{m.output[-3000:]}")
    with open(os.path.join(out, "manifest.json")) as fh:
        manifest = json.load(fh)
    with open(peaks_path) as fh:
        peaks = json.load(fh)
    listed = next(peak for stage, peak in peaks if "ResolveInputs" in stage)
    shutil.rmtree(out, ignore_errors=True)
    return {"peak_rss_mib": round(m.rss_process / 2**20, 1), "peak_when_listed_mib": round(listed, 1),
            "after_listing_mib": round(m.rss_process / 2**20 - listed, 1), "wall_s": round(m.seconds, 1),
            "cpu_s": round(m.cpu_seconds, 1), "dead_letters": manifest["dead_letters"]}


def _ratio(rows: list[dict]) -> float:
    return round(rows[-1]["peak_rss_mib"] / rows[0]["peak_rss_mib"], 3)


def builds(work: str, checkout: str, dead: list[int], copies: list[int]) -> dict:
    """Peak RSS of the dead-letter builds and the copies builds with ``checkout``'s code."""
    tag = "this" if checkout == _CHECKOUT else "compare"
    found = {"dead_letters": [], "copies": []}
    for count in dead:
        row = _build(checkout, work, f"{tag}-dead-{count}", ["--input", _dead_letter_input(work, count)])
        found["dead_letters"].append({"dead": count, **row})
    for count in copies:
        row = _build(checkout, work, f"{tag}-copies-{count}", ["--input", _copies_input(work, count)])
        found["copies"].append({"copies": count, **row})
    found["dead_letters_ratio"] = _ratio(found["dead_letters"])
    found["copies_ratio"] = _ratio(found["copies"])
    return found


def verify_keys(records: int, sample: int = 1_000_000, seed: int = 0) -> dict:
    """The largest duplicate-key group of verify at ``records`` records."""
    import numpy as np

    from transforms.verify.ranges import KEY_BUCKETS, key_bucket, key_bucket_count

    buckets = key_bucket_count(records)
    # The real hash of real keys (sha256 hex, as image/key/sha256 holds), dealt into the same buckets.
    dealt = collections.Counter(key_bucket(hashlib.sha256(i.to_bytes(8, "little")).hexdigest(), buckets)
                                for i in range(sample))
    counts = np.array([dealt.get(b, 0) for b in range(buckets)], dtype=float)
    expected = sample / buckets
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    drawn = np.random.default_rng(seed).multinomial(records, [1.0 / buckets] * buckets)
    return {"records": records, "buckets": buckets, "largest_group": int(drawn.max()),
            "mean_group": round(records / buckets), "before_buckets": KEY_BUCKETS,
            "before_largest_group_about": round(records / KEY_BUCKETS),
            "hash_sample_keys": sample, "hash_chi2": round(chi2, 1), "hash_chi2_dof": buckets - 1}


def publish_child(count: int, way: str, work: str) -> None:
    """In this process: the publish step's dead-letter work for ``count`` letters; prints its peak RSS.

    ``parts``: as the workers stage them (sorted parts of ``PART_LETTERS``, made
    one at a time) and as publishing merges them (``write_dead_letters``).
    ``list``: as publishing did before, every letter in one list, sorted and
    joined into one bytes object.
    """
    import resource

    from transforms.shardset.dead_letters import PART_LETTERS, DeadLetter, RejectionSummary
    from transforms.storage.dead_letter_files import write_dead_letter_part, write_dead_letters

    def letter(i: int) -> DeadLetter:
        return DeadLetter(f"{work}/missing/{(i * 7919) % count:07d}.png", "unreadable",
                          "FileNotFoundError: [Errno 2] No such file or directory")

    staging = os.path.join(work, "out", ".staging", "r" * 32)
    os.makedirs(staging, exist_ok=True)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if way == "parts":
        parts = [write_dead_letter_part([letter(i) for i in range(start, min(count, start + PART_LETTERS))],
                 os.path.join(work, "out"), "r" * 32) for start in range(0, count, PART_LETTERS)]
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the workers' share, before publishing
        summary = write_dead_letters(os.path.join(work, "out"), staging, parts)
    else:
        letters = [letter(i) for i in range(count)]
        dead = sorted(letters, key=lambda d: (d.path, d.reason, d.error))
        with open(os.path.join(work, "out", "dead_letters.jsonl"), "wb") as fh:
            fh.write("".join(d.to_json() + "\n" for d in dead).encode("utf-8"))
        summary = RejectionSummary.of(dead)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"count": summary.count, "peak_rss_mib": round(peak / 1024, 1),
                      "publish_added_mib": round((peak - base) / 1024, 1)}))


def publish(work: str, counts: list[int]) -> dict:
    """The publish step's dead-letter work in a fresh process per count and way."""
    import subprocess

    rows = []
    for way in ("parts", "list"):
        for count in counts:
            folder = os.path.join(work, f"publish-{way}-{count}")
            done = subprocess.run([sys.executable, "-m", "benchmarks.scaling", "billion", "--publish_child",
                                   f"{count},{way},{folder}"], capture_output=True, text=True,
                                  env=checkout_env(), cwd=work)
            if done.returncode != 0:
                raise SystemExit(done.stderr[-3000:])
            rows.append({"way": way, **json.loads(done.stdout.strip().splitlines()[-1])})
            shutil.rmtree(folder, ignore_errors=True)
    return {"rows": rows, **{f"{way}_ratio": round(
        [r for r in rows if r["way"] == way][-1]["peak_rss_mib"]
        / [r for r in rows if r["way"] == way][0]["peak_rss_mib"], 3) for way in ("parts", "list")}}


def billion_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=_BILLION_DOC.splitlines()[0])
    parser.add_argument("--dead", default="20000,200000")
    parser.add_argument("--copies", default="10000,100000")
    parser.add_argument("--records", type=int, default=100_000_000)
    parser.add_argument("--compare", default=None, help="Another checkout whose builds run too.")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--skip_builds", action="store_true")
    parser.add_argument("--publish_child", default=None, help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--build_child"]:
        return build_child(argv[1], argv[3:])
    args = parser.parse_args(argv)
    if args.publish_child:
        count, way, folder = args.publish_child.split(",", 2)
        return publish_child(int(count), way, folder)
    work = args.workdir or tempfile.mkdtemp(prefix="billion-")
    os.makedirs(work, exist_ok=True)
    result = {"verify_keys": verify_keys(args.records)}
    print(json.dumps(result["verify_keys"]), flush=True)
    result["publish_dead_letters"] = publish(work, [int(n) for n in args.dead.split(",")])
    print(json.dumps(result["publish_dead_letters"]), flush=True)
    if not args.skip_builds:
        dead = [int(n) for n in args.dead.split(",")]
        copies = [int(n) for n in args.copies.split(",")]
        result["this"] = builds(work, _CHECKOUT, dead, copies)
        print(json.dumps(result["this"]), flush=True)
        if args.compare:
            result["compare"] = builds(work, os.path.abspath(args.compare), dead, copies)
            print(json.dumps(result["compare"]), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1))


# -- case listing_scale -----------------------------------------------------------------------------------

_LISTING_SCALE_DOC = """Listing at scale: ``DiscoverImages`` on a large input manifest or folder tree, one JSON line of figures.

    python -m benchmarks.scaling listing_scale --rows 1000000            # a .jsonl manifest of N rows
    python -m benchmarks.scaling listing_scale --files 200000 --folders 1000   # a tree of empty files

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

    python -m benchmarks.scaling listing_scale --files 1000000 --folders 1 --baseline /work/main \\
        --direct_num_workers 2 --direct_running_mode multi_processing

lists one class folder of 1,000,000 files with two worker processes, with the
code of ``--baseline`` (another checkout: the same script, run as a file with
that checkout on ``PYTHONPATH``) and of this one, in turn, ``--rounds`` times,
and prints each run's figures.

    python -m benchmarks.scaling listing_scale --build_images 10000 --folders 10 --baseline /work/main

runs the build job (``beam_jobs.build_shards``, under ``benchmarks/common.py
--count_stages``, measured by ``benchmarks/common.py``) on a tree of that many
small PNGs in that many class folders, with each checkout in turn, and prints
its fused stages, wall seconds and peak RSS (``rss_tree``: the summed RSS of
the process and its workers; ``rss_process``: the largest single process).

Extra arguments go to Beam.
"""

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
    from apache_beam.metrics import Metrics

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
            # The code measured is ``root``'s; the benchmark's own modules come from this checkout
            # when ``root`` has none (``benchmarks`` is a namespace package).
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, here]))
            if args.build_images:
                figures = _build_figures(root, env, workdir, beam_args)
            else:
                done = subprocess.run([sys.executable, os.path.abspath(__file__), "listing_scale", *rest,
                                       "--workdir", workdir],
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
    from benchmarks.common import run_measured

    source = next(os.path.join(workdir, name) for name in sorted(os.listdir(workdir)) if name.startswith("images-"))
    out = tempfile.mkdtemp(prefix="out_", dir=workdir)
    usage = os.path.join(out, "usage.json")
    measured = run_measured([sys.executable, "-m", "benchmarks.common", "child_usage", usage, "--count_stages",
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


def listing_scale_run(argv: Sequence[str] | None = None) -> dict[str, Any] | list[dict[str, Any]]:
    """Runs the benchmark; returns (and prints) the figures."""
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions
    from transforms.beam_compat import local_runner
    from tests.helpers import discover_images_of
    from transforms.images.inputs import LabelRules
    from transforms.images.items import SourceImage
    from transforms.shardset.dead_letters import DeadLetter
    import apache_beam as beam

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=_LISTING_SCALE_DOC.split("\n", 1)[0])
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


# -- case plan_cost ---------------------------------------------------------------------------------------

_PLAN_COST_DOC = """What a plan costs against the build it plans, on the same photos, in the same run.

    python -m benchmarks.scaling plan_cost [--size_mb 440 | --input DIR] [--rounds 3]

Every case is a fresh process, the cases interleaved round by round (the
photos stay in the page cache after the first round):

- the build job, default flags (``beam_jobs.build_shards --input DIR --output_dir OUT``);
- the plan job with the same flags (``beam_jobs.plan_build``), into an output folder that does
  not exist (the plan must leave it so: checked after each run);
- three loops in one process, no Beam, that isolate what the plan's survey costs per input:
  ``heads`` reads each file's first 64 KiB and checks that header (what a plan without
  duplicates would read), ``whole`` reads each file whole and checks its header, ``whole+sha256``
  also hashes it (what the plan does).

Prints a Markdown table (median wall and CPU seconds of all processes, and the ratio to the
build's) and one JSON line with every round.
"""

_LOOPS = ("heads", "whole", "whole+sha256")


def _files(root: str) -> list[str]:
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.join(folder, n) for n in sorted(names) if not n.startswith(".")]
    return found


def loop(root: str, kind: str) -> None:
    """Surveys every file of ``root`` in this process as ``kind`` says; prints ``RESULT {json}``."""
    from transforms.errors import ImageError
    from transforms.images.image_codec import HEAD_BYTES
    from transforms.images.records import EncodeSettings
    from transforms.images.survey import survey_image

    settings = EncodeSettings()
    started, nbytes, rejected = time.perf_counter(), 0, 0
    for path in _files(root):
        with open(path, "rb") as fh:
            data = fh.read(HEAD_BYTES) if kind == "heads" else fh.read()
        nbytes += len(data)
        if kind == "whole+sha256":
            hashlib.sha256(data).digest()
        try:
            survey_image(data, settings)
        except ImageError:
            rejected += 1
    print("RESULT " + json.dumps({"kind": kind, "bytes": nbytes, "rejected": rejected,
                                  "seconds": time.perf_counter() - started}), flush=True)


def plan_cost_run(argv: Sequence[str] | None = None) -> dict:
    """Runs the benchmark; prints the table and a JSON line, and returns the figures."""
    from benchmarks.common import (add_photo_flags, checkout_env, interleaved_rounds, medians, photo_root,
                                    ratio_table)

    if argv and argv[0] == "_loop":  # a child: one survey of the files
        return loop(argv[1], argv[2])
    parser = argparse.ArgumentParser(description=_PLAN_COST_DOC.splitlines()[0])
    add_photo_flags(parser, 440)
    args = parser.parse_args(argv)
    root = photo_root(args)
    size = sum(os.path.getsize(p) for p in _files(root))
    cases = {
        "build job": lambda out: [sys.executable, "-m", "beam_jobs.build_shards", "--input", root,
                                  "--output_dir", out],
        "plan job": lambda out: [sys.executable, "-m", "beam_jobs.plan_build", "--input", root,
                                 "--output_dir", out],
        **{f"loop: {kind}": (lambda kind: lambda out: [sys.executable, "-m", "benchmarks.scaling", "plan_cost", "_loop",
                                                       root, kind])(kind) for kind in _LOOPS},
    }

    def untouched(name: str, out: str) -> None:
        if name == "plan job" and os.path.exists(out):
            raise SystemExit(f"the plan created {out}")

    with tempfile.TemporaryDirectory(prefix="plan_cost_") as tmp:
        found = interleaved_rounds(cases, args.rounds, tmp, checkout_env(), after=untouched)
    median = medians(found)
    build_wall, build_cpu = median["build job"]
    files = len(_files(root))
    print(ratio_table(f"{files} photos, {size / 2**20:.0f} MiB, {args.rounds} rounds", median, "build job", "build"))
    figures = {"input": root, "files": files, "bytes": size, "rounds": found,
               "plan_wall_ratio": round(median["plan job"][0] / build_wall, 3),
               "plan_cpu_ratio": round(median["plan job"][1] / build_cpu, 3),
               "load_after": round(os.getloadavg()[0], 2)}
    print(json.dumps(figures))
    return figures


# -- case manifest_scale ----------------------------------------------------------------------------------

_MANIFEST_SCALE_DOC = """The manifest at 100M-image scale: ``manifest.json`` size and the publish step's peak memory.

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

Run: ``python -m benchmarks.scaling manifest_scale [--shards N] [--classes N] [--v1_shards N]``.
"""

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
    from transforms.storage.run_lock_files import acquire_lock
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
    out = subprocess.run([sys.executable, "-m", "benchmarks.scaling", "manifest_scale", "--mode", mode,
                          "--folder", folder,
                          "--shards", str(shards), "--classes", str(classes)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1]) if mode != "stage" else {}


def manifest_scale_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=_MANIFEST_SCALE_DOC.splitlines()[0])
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


# -- case report_parts ------------------------------------------------------------------------------------

_REPORT_PARTS_DOC = """Verify's report step with many problems: peak RSS of merging staged parts against one list.

Each measurement runs in a fresh process and reports its peak RSS (``ru_maxrss``) and the
seconds of the report step, for ``--small`` and ``--large`` problems (default 20,000 and 200,000):

- ``baseline``: a process that imports the same modules;
- ``list``: the report as the step wrote it before: every problem in one list, sorted
  (``Problem.sort_key``), serialized in one piece;
- ``parts``: the real ``report_files.write_report``, merging parts of ``PART_PROBLEMS`` the
  "workers" staged beforehand (another process, not measured).

Run: ``python -m benchmarks.scaling report_parts [--small N] [--large N]``.
"""

def _problems(count: int):
    from transforms.verify.checks import Problem

    for i in range(count):
        yield Problem(f"gs://bucket/set/train-{i % 9973:05d}-of-09973.tfrecord.gz", (i * 7919) % 10**9,
                      "crc_mismatch", f"record {i}: the data's CRC is 0x{i:08x}, its bytes give 0x{i ^ 0xFFFF:08x}")


def _report_parts_imports() -> None:
    import transforms.storage.report_files  # noqa: F401
    import transforms.verify.checks  # noqa: F401


def report_parts_run_baseline(_folder: str, _count: int) -> dict:
    _report_parts_imports()
    return {"peak_mib": _peak_mib()}


def run_list(folder: str, count: int) -> dict:
    _report_parts_imports()
    from transforms.verify.checks import Problem, report_pieces

    start = time.perf_counter()
    found = sorted(_problems(count), key=Problem.sort_key)  # the side inputs collected in one list
    with open(os.path.join(folder, "report.json"), "wb") as fh:
        fh.write(b"".join(report_pieces(1, count, 1, len(found), found)))
    return {"seconds": time.perf_counter() - start, "peak_mib": _peak_mib()}


def report_parts_stage(folder: str, count: int) -> None:
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
    _report_parts_imports()
    import pickle

    from transforms.storage.report_files import write_report

    with open(os.path.join(folder, "parts.pickle"), "rb") as fh:
        parts, parts_dir = pickle.load(fh)
    start = time.perf_counter()
    write_report(os.path.join(folder, "report.json"), 1, count, 1, parts, parts_dir)
    return {"seconds": time.perf_counter() - start, "peak_mib": _peak_mib(), "parts": len(parts)}


_report_parts_MODES = {"baseline": report_parts_run_baseline, "list": run_list, "stage": report_parts_stage,
                       "parts": run_parts}


def _report_parts_child(mode: str, folder: str, count: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.scaling", "report_parts", "--mode", mode,
                          "--folder", folder,
                          "--count", str(count)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1]) if mode != "stage" else {}


def report_parts_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=_REPORT_PARTS_DOC.splitlines()[0])
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=200_000)
    parser.add_argument("--mode", choices=sorted(_report_parts_MODES))
    parser.add_argument("--folder")
    parser.add_argument("--count", type=int)
    args = parser.parse_args(argv)
    if args.mode:
        print(json.dumps(_report_parts_MODES[args.mode](args.folder, args.count) or {}))
        return
    out: dict = {}
    for count in (args.small, args.large):
        with tempfile.TemporaryDirectory() as folder:
            row = {"baseline": _report_parts_child("baseline", folder, count),
                   "list": _report_parts_child("list", folder, count)}
            _report_parts_child("stage", folder, count)
            row["parts"] = _report_parts_child("parts", folder, count)
        out[str(count)] = row
    for mode in ("list", "parts"):
        above = [out[str(c)][mode]["peak_mib"] - out[str(c)]["baseline"]["peak_mib"] for c in (args.small, args.large)]
        out[f"{mode}_above_imports_mib"] = above
        out[f"{mode}_peak_ratio"] = out[str(args.large)][mode]["peak_mib"] / out[str(args.small)][mode]["peak_mib"]
    print(json.dumps(out, indent=1))


CASES = {
    "workers": common.Case(workers_main, _WORKERS_DOC, ("--quick",)),
    "plan_scale": common.Case(plan_scale_run, _PLAN_SCALE_DOC, ("--items", "2000", "--bucket_bits", "4")),
    "billion": common.Case(billion_main, _BILLION_DOC,
                           ("--dead", "200,2000", "--copies", "100,1000", "--records", "100000")),
    "listing_scale": common.Case(listing_scale_run, _LISTING_SCALE_DOC, ("--rows", "2000")),
    "plan_cost": common.Case(plan_cost_run, _PLAN_COST_DOC, ("--size_mb", "4", "--rounds", "1")),
    "manifest_scale": common.Case(manifest_scale_main, _MANIFEST_SCALE_DOC,
                                  ("--shards", "700", "--classes", "10", "--v1_shards", "70")),
    "report_parts": common.Case(report_parts_main, _REPORT_PARTS_DOC, ("--small", "200", "--large", "2000")),
}


if __name__ == "__main__":
    sys.exit(common.run_case(CASES, sys.argv[1:]))
