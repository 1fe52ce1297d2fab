"""How the build and verify jobs scale with DirectRunner workers, beside the baselines.

    python -m benchmarks.scaling --workers 1,2,4,8,16            # ~4,000 and ~12,000 photos
    python -m benchmarks.scaling --quick --workers 1,2           # ~300 and ~900: checks it works
    python -m benchmarks.scaling --report benchmarks/.cache/scaling.json   # print a saved run

Datasets are the photo JPEGs of ``benchmarks/photos.py`` (generated once into
``benchmarks/.cache/``), two sizes, the small one a prefix of the large one.
Every case runs as a fresh process at every worker count ``N`` (1: the
DirectRunner's default, one in-process worker; N > 1: ``--direct_running_mode
multi_processing --direct_num_workers N``) and both sizes, round after round:

- build job: ``beam_jobs/build_shards.py`` with ``--num_shards``;
- Beam ``Create | Map(read, Example) | WriteToTFRecord``
  (``benchmarks/cases.py beam_build``), the same Example schema;
- ``multiprocessing.Pool`` loop: N processes, each reading its share of the
  images, encoding each Example with ``transforms/example/codec.py``, framing it
  with ``transforms/tfrecord/framing.py`` and writing its own file
  (``benchmarks/cases.py pool_build``);
- verify job: ``beam_jobs/verify_shards.py`` on the build job's output;
- Beam ``ReadFromTFRecord | Map(parse)`` on the same shards
  (``benchmarks/cases.py beam_read``).

Columns:

- **wall s**: whole-process wall time at each size, start-up included
  (``benchmarks/measure.py``), median of the rounds;
- **marginal s/GB**: (large - small) wall seconds over (large - small) input GB,
  the median of the rounds' paired differences; input bytes are the image
  files (build) or the ``.tfrecord`` shards (verify);
- **CPU s/GB**: the same marginal figure for CPU seconds (user + system) of all
  processes of the run, and apart for the coordinator (the launching process:
  the runner, or the Pool's parent) and the workers (its child processes:
  Beam's SDK worker processes, the Pool's processes). Each case runs under
  ``benchmarks/child_usage.py``, which runs the job's module in its own process
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

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks.measure import Measurement, checkout_env, machine, run_measured  # noqa: E402
from benchmarks.photos import CACHE, MEAN_BYTES, Dataset, dataset  # noqa: E402

__all__ = ["main", "marginal", "read_bytes_by_file", "beam_flags"]

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
            "benchmarks.cases", "beam_build", "--input", ds.root, "--output_dir", out]
            + shards + beam_flags(n)),
        Case("multiprocessing.Pool loop", "build", lambda ds, _, out, n: [
            "benchmarks.cases", "pool_build", "--input", ds.root, "--output_dir", out,
            "--processes", str(n)], beam=False),
        Case("verify job", "verify", lambda _, ref, __, n: [
            "beam_jobs.verify_shards", "--output_dir", ref] + beam_flags(n), writes=False),
        Case("Beam ReadFromTFRecord | Map(parse)", "verify", lambda _, ref, __, n: [
            "benchmarks.cases", "beam_read", "--pattern", os.path.join(ref, "*.tfrecord")]
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
    return ([sys.executable, "-m", "benchmarks.child_usage", usage]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    command = "python -m benchmarks.scaling " + " ".join(sys.argv[1:] if argv is None else argv)
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


if __name__ == "__main__":
    sys.exit(main())
