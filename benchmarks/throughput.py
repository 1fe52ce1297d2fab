"""Throughput: what the build, verify and read paths cost per GB, beside the baselines a user writes.

    python -m benchmarks.throughput CASE [--quick] [ARG ...]

Cases:

- ``cpu_per_gb``: Benchmarks of the build and verify jobs against the baselines a user would write.
- ``baseline``: The baselines the benchmarks compare the project's jobs with, one per subcommand.
- ``per_gb_table``: The build's marginal CPU per GB beside the baselines, in one table: each case at two sizes.
- ``fixed_cost``: Fixed cost: a 20-photo build in one process against a 3-transform Beam pipeline on the same photos.
- ``worker_count``: One worker process or two: what a local build and verify cost in CPU and wall seconds.
- ``shard_hashes``: What hashing each shard costs a build: marginal CPU seconds per added GB, before and after.
- ``read_tfrecords``: Benchmark: reading one ~50 MB TFRecord file split by byte range vs read whole.
- ``verify_scale``: Verify per GB: the verify job against Beam's ReadFromTFRecord + parse, at two sizes.
- ``array_record``: ArrayRecord shards against TFRecord ones: build CPU per added GB, and Grain's random access.
- ``consumer_decode``: Decodes every record of a shard set as TensorFlow does, then as torchvision does, and compares.
- ``exif_upright``: What turning JPEGs upright for their EXIF orientation costs (``--image_mode tf``).
- ``near_duplicate_cost``: What the near-duplicate check adds to a build, in CPU seconds per added GB of JPEG photos.
- ``duplicate_check``: The exact-duplicate check's CPU per image, in one process, against another checkout's.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import hashlib
import io
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from benchmarks import common
from benchmarks.common import (CACHE, Dataset, Measurement, checkout_env, dataset, interleaved_rounds,
                               machine, medians, run_measured)


# -- case cpu_per_gb --------------------------------------------------------------------------------------

_CPU_PER_GB_DOC = """Benchmarks of the build and verify jobs against the baselines a user would write.

    python -m benchmarks.throughput cpu_per_gb [--size_mb 520] [--quick] [--repeat 3]

Generates (once, cached in ``benchmarks/.cache/``) a dataset of photo JPEGs in
class folders (``benchmarks/common.py``), then runs every case as its own
subprocess, on two datasets, the full size and its first half, round after
round (each round runs every case once at both sizes, so that a noisy moment of
the machine hits all cases alike), and reports medians of the rounds:

- whole process: seconds and CPU-seconds of a fresh process at each size, start-up
  (Beam import, pipeline construction) included;
- marginal: what the second half costs, ``(full - half) / (bytes of full - bytes of
  half)`` in seconds and CPU-seconds per GB, the median of the rounds' paired
  differences. At the sizes users run (100 GB and up) this is what counts.

Cases:

- start-up: ``import apache_beam``, ``import tensorflow`` and the build job on
  a few images: what every run pays before its first image;
- build: the build job on the DirectRunner (one process ``in_memory``, the
  default; two workers ``multi_threading``; two workers ``multi_processing``)
  with its default validation and with ``--validate header``, and in one process
  with each other ``--validate`` level and with ``--validate decode --image_threads 1``
  (decode runs an image thread per core), vs the plain Beam pipeline a user
  writes, ``beam.Create(paths) | beam.Map(read + tf.train.Example) |
  beam.io.WriteToTFRecord`` on the default DirectRunner (same three modes;
  protobuf's own Example classes, TensorFlow's when it is installed), a
  ``multiprocessing.Pool`` loop (one process per core, each writing its own
  shard), a single-process ``tf.io.TFRecordWriter`` loop, and the floor (read
  each file, frame it, append it to one file);
- verify: the verify job vs Beam's ``ReadFromTFRecord`` + Example parsing (same
  three modes) and ``tf.data.TFRecordDataset`` + batched ``tf.io.parse_example``;
- memory: the build job's peak RSS on the full dataset vs its first half;
- plan: ``PlanShards`` of 1,281,167 synthetic items (ImageNet's train split)
  into 1024 shards on the DirectRunner.

The TensorFlow cases are skipped, with the reason printed, when TensorFlow is
not installed. Prints the tables and writes ``benchmarks/results.json``. Figures
that compare are ratios of medians measured in the same run on the same data.
"""

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)


_MIB = 1 << 20
_IN_MEMORY = ["--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
_TWO_THREADS = ["--direct_num_workers", "2", "--direct_running_mode", "multi_threading"]
_TWO_PROCESSES = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]
_MODES = {"1 proc": _IN_MEMORY, "2 threads": _TWO_THREADS, "2 procs": _TWO_PROCESSES}
_SIZES = ("half", "full")
_DEFAULT = "default"  # the build job run with no --validate flag
_BEAM_BUILD = "Beam Create + Map(tf.train.Example) + WriteToTFRecord"  # the plain user pipeline (no | in a table)
_ONE_THREAD = "build job, 1 proc, --validate decode, --image_threads 1"


@dataclass
class Case:
    """One command to measure at one dataset size, and how to read its throughput.

    Attributes:
        base: The case's name without its size; cases of the same base at the
            two sizes give the marginal figures.
        size: ``half``, ``full`` or ``""`` (a case measured at one size).
    """

    base: str
    group: str  # startup, build, verify, plan
    command: Callable[[], list[str]]
    output_dir: str | None = None  # emptied before each run
    input_bytes: Callable[[], int] = lambda: 0  # bytes the case reads (for MB/s)
    records: int | None = None  # records every run must report
    size: str = ""
    runs: list[Measurement] = field(default_factory=list)
    result: dict = field(default_factory=dict)  # the RESULT line, or facts of the output
    failures: list[str] = field(default_factory=list)  # last lines of each failed attempt

    @property
    def name(self) -> str:
        return f"{self.base} [{self.size}]" if self.size else self.base

    def median(self, attribute: str) -> float:
        return statistics.median(getattr(run, attribute) for run in self.runs)


def _python() -> list[str]:
    return [sys.executable]


def _has_tensorflow() -> tuple[bool, str]:
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        return False, "TensorFlow is not installed (pip install -e '.[bench]' installs it on x86-64)"
    return True, ""


def validate_levels() -> tuple[str, list[str]]:
    """The build job's default ``--validate`` level and every other level, from its flags."""
    from beam_jobs.cli.jobs import BUILD_FLAGS
    from transforms.images.image_codec import VALIDATE_LEVELS

    default = next(flag for flag in BUILD_FLAGS.flags if flag.name == "validate").default
    return default, [level for level in VALIDATE_LEVELS if level != default]


def _shard_files(folder: str) -> list[str]:
    return sorted(glob.glob(os.path.join(folder, "*.tfrecord")))


def _build_cases(ds: Dataset, size: str, out: str, num_shards: int, with_tf: bool,
                 levels: list[str]) -> list[Case]:
    cases = []

    def build_job(target: str, flags: list[str]) -> Callable[[], list[str]]:
        return lambda: _python() + ["-m", "beam_jobs.build_shards", "--input", ds.root,
                                    "--output_dir", target, "--num_shards", str(num_shards)] + flags

    for mode, flags in _MODES.items():
        # Every level in one process; the default and `header` (the targets' two) in every mode.
        for level in [_DEFAULT] + (levels if mode == "1 proc" else [lv for lv in levels if lv == "header"]):
            target = os.path.join(out, f"build-{size}-{mode.replace(' ', '')}-{level}")
            chosen = [] if level == _DEFAULT else ["--validate", level]
            label = "default validation" if level == _DEFAULT else f"--validate {level}"
            cases.append(Case(f"build job, {mode}, {label}", "build", build_job(target, chosen + flags),
                              target, lambda: ds.bytes, ds.images, size))
    target = os.path.join(out, f"build-{size}-1proc-1thread")
    cases.append(Case(_ONE_THREAD, "build",  # decode runs an image thread per core: the baseline
                      build_job(target, ["--validate", "decode", "--image_threads", "1"] + _IN_MEMORY),
                      target, lambda: ds.bytes, ds.images, size))
    for mode, flags in _MODES.items():
        target = os.path.join(out, f"beam-{size}-{mode.replace(' ', '')}")
        cases.append(Case(
            f"{_BEAM_BUILD}, {mode}", "build",
            lambda t=target, f=flags: _python() + [
                "-m", "benchmarks.throughput", "baseline", "beam_build", "--input", ds.root, "--output_dir", t,
                "--num_shards", str(num_shards)] + f,
            target, lambda: ds.bytes, ds.images, size))
    processes = os.cpu_count() or 1
    target = os.path.join(out, f"pool-{size}")
    cases.append(Case(
        f"multiprocessing.Pool loop, {processes} procs", "build",
        lambda: _python() + ["-m", "benchmarks.throughput", "baseline", "pool_build", "--input", ds.root,
                             "--output_dir", target, "--processes", str(processes)],
        target, lambda: ds.bytes, ds.images, size))
    if with_tf:
        target = os.path.join(out, f"tf-loop-{size}")
        cases.append(Case(
            "tf.io.TFRecordWriter loop, 1 proc", "build",
            lambda: _python() + ["-m", "benchmarks.throughput", "baseline", "tf_build", "--input", ds.root,
                                 "--output_dir", target, "--num_shards", str(num_shards)],
            target, lambda: ds.bytes, ds.images, size))
    target = os.path.join(out, f"floor-{size}")
    cases.append(Case(
        "floor: read + frame, 1 proc", "build",
        lambda: _python() + ["-m", "benchmarks.throughput", "baseline", "floor", "--input", ds.root,
                             "--output_dir", target],
        target, lambda: ds.bytes, ds.images, size))
    return cases


def _verify_cases(shards: str, records: int, size: str, with_tf: bool) -> list[Case]:
    shard_bytes = lambda: sum(os.path.getsize(f) for f in _shard_files(shards))  # noqa: E731
    pattern = os.path.join(shards, "*.tfrecord")
    cases = []
    for mode, flags in _MODES.items():
        cases.append(Case(
            f"verify job, {mode}", "verify",
            lambda f=flags: _python() + ["-m", "beam_jobs.verify_shards", "--output_dir", shards] + f,
            None, shard_bytes, records, size))
    for mode, flags in _MODES.items():
        cases.append(Case(
            f"Beam ReadFromTFRecord + parse, {mode}", "verify",
            lambda f=flags: _python() + ["-m", "benchmarks.throughput", "baseline", "beam_read", "--pattern",
                                         pattern] + f,
            None, shard_bytes, records, size))
    if with_tf:
        cases.append(Case(
            "tf.data + parse_example", "verify",
            lambda: _python() + ["-m", "benchmarks.throughput", "baseline", "tf_read", "--pattern", pattern],
            None, shard_bytes, records, size))
    return cases


def _startup_cases(tiny: Dataset, out: str, with_tf: bool) -> list[Case]:
    """What every run pays before its first image: imports, and a whole build of a few images."""
    cases = [Case("start-up: import apache_beam", "startup",
                  lambda: _python() + ["-c", "import apache_beam"])]
    if with_tf:
        cases.append(Case("start-up: import tensorflow", "startup",
                          lambda: _python() + ["-c", "import tensorflow"]))
    for mode, flags in _MODES.items():
        target = os.path.join(out, f"tiny-{mode.replace(' ', '')}")
        cases.append(Case(
            f"start-up: build job, {mode}, {tiny.images} images", "startup",
            lambda t=target, f=flags: _python() + [
                "-m", "beam_jobs.build_shards", "--input", tiny.root, "--output_dir", t] + f,
            target, lambda: tiny.bytes, tiny.images))
    return cases


def _plan_case(items: int) -> Case:
    return Case(f"plan {items:,} items into 1024 shards, 1 proc", "plan",
                lambda: _python() + ["-m", "benchmarks.throughput", "baseline", "plan", "--items", str(items),
                                     "--num_shards", "1024"] + _IN_MEMORY,
                None, lambda: 0, items)


def _result_line(output: str) -> dict:
    for line in reversed(output.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {}


def _sha256(path: str) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _output_facts(folder: str) -> dict:
    """Shard count, bytes, balance; for the build job also its records and every shard's sha256."""
    files = _shard_files(folder)
    sizes = [os.path.getsize(f) for f in files]
    facts = {"shards": len(sizes), "shard_bytes": sum(sizes)}
    if len(sizes) > 1:
        facts["balance"] = max(sizes) / min(sizes) if min(sizes) else float("inf")
    manifest = os.path.join(folder, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as fh:
            facts["records"] = json.load(fh)["records"]
        facts["shard_sha256"] = [_sha256(f) for f in files]
    return facts


def _run(case: Case, logs: str) -> None:
    """Measures one run of ``case``; a failed attempt is recorded and tried once more.

    Beam's gRPC data plane between multi-threaded or multi-process workers fails
    now and then under load (e.g. ``Invalid PaneInfoEncoding``); a second
    failure in a row stops the benchmark.
    """
    log = os.path.join(logs, case.name.replace(" ", "_").replace("/", "_").replace(",", "") + ".log")
    for attempt in (1, 2):
        if case.output_dir:
            shutil.rmtree(case.output_dir, ignore_errors=True)
        measured = run_measured(case.command(), _ROOT, log)
        if measured.returncode == 0:
            break
        tail = "\n".join(measured.output.splitlines()[-15:])
        case.failures.append(tail.splitlines()[-1] if tail else f"exit {measured.returncode}")
        shutil.copyfile(log, log + ".failed")  # the next attempt writes the log anew
        if attempt == 2:
            raise SystemExit(f"{case.name} failed twice (exit {measured.returncode}); log {log}:\n{tail}")
        print(f"  {case.name} failed (exit {measured.returncode}: {case.failures[-1]}); once more",
              flush=True)
    result = _result_line(measured.output)
    if case.output_dir:
        result = {**_output_facts(case.output_dir), **result}
    if case.records is not None and result.get("records", case.records) != case.records:
        raise SystemExit(f"{case.name}: {result.get('records')} records, expected {case.records}")
    case.result = result
    case.runs.append(measured)
    print(f"  {case.name:56s} {measured.seconds:7.1f} s  {measured.cpu_seconds:7.1f} s CPU  "
          f"{measured.rss_tree / _MIB:6.0f} MiB tree  {measured.rss_process / _MIB:6.0f} MiB proc",
          flush=True)


def _row(case: Case) -> dict:
    seconds = case.median("seconds")
    row = {
        "name": case.name, "base": case.base, "size": case.size, "group": case.group,
        "runs": len(case.runs),
        "seconds": round(seconds, 2),
        "seconds_each": [round(r.seconds, 2) for r in case.runs],
        "cpu_seconds": round(case.median("cpu_seconds"), 2),
        "cpu_seconds_each": [round(r.cpu_seconds, 2) for r in case.runs],
        "rss_tree_mib": round(case.median("rss_tree") / _MIB, 1),
        "rss_process_mib": round(case.median("rss_process") / _MIB, 1),
        "rss_tree_mib_each": [round(r.rss_tree / _MIB, 1) for r in case.runs],
    }
    if case.input_bytes():
        row["input_bytes"] = case.input_bytes()
        row["mb_per_s"] = round(case.input_bytes() / 1e6 / seconds, 1)
    if case.records:
        row["images_per_s"] = round(case.records / seconds, 1)
    if "balance" in case.result:
        row["shard_balance"] = round(case.result["balance"], 4)
    if "shards" in case.result:
        row["shards"] = case.result["shards"]
    if case.failures:
        row["failed_attempts"] = case.failures
    return row


def marginal_rows(rows: list[dict]) -> list[dict]:
    """The marginal cost of every case measured at both sizes.

    For each round, the full run's seconds minus the half run's seconds (the
    rounds pair them: both ran within minutes of each other), over the bytes
    between them; the median of the rounds. Whole-process figures are of the
    full size.

    Args:
        rows: ``_row`` dicts (with ``base``, ``size``, ``input_bytes`` and the
            per-round ``seconds_each`` / ``cpu_seconds_each``).

    Returns:
        One dict per base: ``seconds`` and ``cpu_seconds`` (whole process, full
        size), ``s_per_gb`` and ``cpu_s_per_gb`` (marginal), ``mb_per_s``
        (marginal throughput).
    """
    by_base: dict[str, dict[str, dict]] = {}
    for row in rows:
        if row.get("size") in _SIZES:
            by_base.setdefault(row["base"], {})[row["size"]] = row
    out = []
    for base, pair in by_base.items():
        if set(pair) != set(_SIZES):
            continue
        half, full = pair["half"], pair["full"]
        extra_gb = (full["input_bytes"] - half["input_bytes"]) / 1e9
        if extra_gb <= 0:
            continue
        seconds = statistics.median(f - h for f, h in zip(full["seconds_each"], half["seconds_each"]))
        cpu = statistics.median(f - h for f, h in zip(full["cpu_seconds_each"], half["cpu_seconds_each"]))
        out.append({"base": base, "group": full["group"], "seconds": full["seconds"],
                    "cpu_seconds": full["cpu_seconds"], "extra_mb": round(extra_gb * 1e3, 1),
                    "s_per_gb": round(seconds / extra_gb, 2), "cpu_s_per_gb": round(cpu / extra_gb, 2),
                    "mb_per_s": round(extra_gb * 1e3 / seconds, 1) if seconds > 0 else None})
    return out


def _targets(rows: dict[str, dict], marginal: dict[str, dict], with_tf: bool, plan_items: int,
             default: str) -> list[dict]:
    """The targets of one run: speed ratios of median whole-process or marginal seconds."""
    targets = []

    def add(what: str, value: float, bound: float, higher_is_better: bool, unit: str = "x") -> None:
        met = value >= bound if higher_is_better else value <= bound
        targets.append({"target": what, "value": round(value, 3), "bound": bound,
                        "at_least": higher_is_better, "unit": unit, "met": met})

    def best(prefix: str) -> str:
        """The fastest mode (median whole-process seconds at full size) of a baseline."""
        return min((b for b in marginal if b.startswith(prefix)), key=lambda b: marginal[b]["seconds"])

    def fastest_mode(label: str) -> str:
        """The running mode in which the build job with ``label`` had the lowest marginal s/GB."""
        measured = [m for m in _MODES if f"build job, {m}, {label}" in marginal]
        return min(measured, key=lambda m: marginal[f"build job, {m}, {label}"]["s_per_gb"])

    def ratio(ours: str, baseline: str, key: str) -> float:
        return marginal[baseline][key] / marginal[ours][key]

    build = f"build job, 1 proc, {'default validation'}"
    header = "build job, 1 proc, --validate header"
    beam_build, beam_read = best(_BEAM_BUILD), best("Beam ReadFromTFRecord")
    add(f"default build ({default}), marginal, vs {beam_build}", ratio(build, beam_build, "s_per_gb"),
        1.5, True)
    add(f"default build ({default}), whole process, vs {beam_build}",
        ratio(build, beam_build, "seconds"), 1.0, True)
    if with_tf:
        loop = "tf.io.TFRecordWriter loop, 1 proc"
        add(f"default build ({default}), marginal, vs tf.io loop", ratio(build, loop, "s_per_gb"), 1.0, True)
        add("build --validate header, marginal, vs tf.io loop", ratio(header, loop, "s_per_gb"), 1.5, True)
        # The same two with the build job in its fastest running mode (two processes use both cores).
        for label, bound in (("default validation", 1.0), ("--validate header", 1.5)):
            fastest = fastest_mode(label)
            if fastest != "1 proc":
                what = f"default build ({default})" if label == "default validation" else "build --validate header"
                add(f"{what}, {fastest}, marginal, vs tf.io loop",
                    ratio(f"build job, {fastest}, {label}", loop, "s_per_gb"), bound, True)
    decode = "build job, 1 proc, " + ("default validation" if default == "decode" else "--validate decode")
    add("build --validate decode, marginal: an image thread per core vs --image_threads 1",
        ratio(decode, _ONE_THREAD, "s_per_gb"), 1.3, True)
    verify = "verify job, 1 proc"
    add(f"verify, marginal, vs {beam_read}", ratio(verify, beam_read, "s_per_gb"), 1.0, True)
    add(f"verify, whole process, vs {beam_read}", ratio(verify, beam_read, "seconds"), 1.0, True)
    for mode in _MODES:
        name = f"build job, {mode}, default validation"
        full, half = rows[f"{name} [full]"]["rss_tree_mib"], rows[f"{name} [half]"]["rss_tree_mib"]
        add(f"build peak RSS, full / half dataset ({mode}, process tree)", full / half, 1.2, False)
    plan = rows[_plan_case(plan_items).name]
    add(f"plan {plan_items:,} items: seconds", plan["seconds"], 120, False, "s")
    add(f"plan {plan_items:,} items: peak RSS", plan["rss_tree_mib"] / 1024, 4, False, "GiB")
    return targets


def _table(rows: list[dict], marginal: list[dict], targets: list[dict]) -> str:
    lines = ["| case | s (median) | CPU s | MB/s | images/s | peak RSS tree / largest proc (MiB) "
             "| shard balance |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(
            f"| {row['name']} | {row['seconds']:.1f} | {row['cpu_seconds']:.1f} | "
            f"{row.get('mb_per_s', '')} | "
            f"{row.get('images_per_s', '')} | {row['rss_tree_mib']:.0f} / {row['rss_process_mib']:.0f} | "
            f"{row.get('shard_balance', '')} |")
    lines += ["", "| case | whole process s (full) | CPU s (full) | marginal s/GB | marginal CPU s/GB "
                  "| marginal MB/s |", "|---|---:|---:|---:|---:|---:|"]
    for m in marginal:
        lines.append(f"| {m['base']} | {m['seconds']:.1f} | {m['cpu_seconds']:.1f} | {m['s_per_gb']:.2f} | "
                     f"{m['cpu_s_per_gb']:.2f} | {m['mb_per_s'] if m['mb_per_s'] is not None else ''} |")
    lines += ["", "| target | value | bound | met |", "|---|---:|---:|---|"]
    for t in targets:
        sign = ">=" if t["at_least"] else "<="
        lines.append(f"| {t['target']} | {t['value']:.2f}{t['unit']} | {sign} {t['bound']}{t['unit']} | "
                     f"{'yes' if t['met'] else 'NO'} |")
    return "\n".join(lines)


def cpu_per_gb_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_CPU_PER_GB_DOC.splitlines()[0])
    parser.add_argument("--size_mb", type=float, default=None,
                        help="Full dataset size in MB; the half dataset is its first half "
                             "(default 520; 150 with --quick).")
    parser.add_argument("--quick", action="store_true",
                        help="A small dataset, one round, a plan of 1/10 the items.")
    parser.add_argument("--repeat", type=int, default=None, help="Rounds (default 3; 1 with --quick).")
    parser.add_argument("--num_shards", type=int, default=8, help="Shards every build writes.")
    parser.add_argument("--plan_items", type=int, default=None,
                        help="Items of the plan case (default 1,281,167; 1/10 with --quick).")
    parser.add_argument("--modes", default=",".join(_MODES),
                        help="Running modes of the Beam cases, comma-separated "
                             f"(default all: {', '.join(_MODES)}); the targets need '1 proc'.")
    parser.add_argument("--output", default=os.path.join(_HERE, "results.json"))
    parser.add_argument("--report", metavar="RESULTS_JSON", default=None,
                        help="Only print the tables of an earlier run's results file.")
    args = parser.parse_args(argv)
    if args.report:
        with open(args.report) as fh:
            saved = json.load(fh)
        print(_table(saved["rows"], saved["marginal"], saved["targets"]))
        return 0
    size_mb = args.size_mb or (150 if args.quick else 520)
    repeat = args.repeat or (1 if args.quick else 3)
    plan_items = args.plan_items or (128_117 if args.quick else 1_281_167)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in _MODES]
    if unknown or "1 proc" not in modes:
        parser.error(f"--modes: give some of {', '.join(_MODES)}, '1 proc' among them")
    for mode in list(_MODES):
        if mode not in modes:
            del _MODES[mode]
    command = "python -m benchmarks.throughput cpu_per_gb " + " ".join(sys.argv[1:] if argv is None else argv)

    with_tf, why_not = _has_tensorflow()
    if not with_tf:
        print(f"skipped the TensorFlow cases: {why_not}")
    default, levels = validate_levels()
    print(f"dataset: {size_mb:g} MB and its first half, photo JPEGs (generated once into {CACHE})",
          flush=True)
    datasets = {"full": dataset(size_mb), "half": dataset(size_mb / 2)}
    for size, ds in datasets.items():
        print(f"  {size}: {ds.images} images, {ds.bytes / 1e6:.1f} MB, mean "
              f"{ds.bytes / ds.images / 1e3:.1f} KB, {ds.pixels / ds.images / 1e3:.0f} kpixels", flush=True)
    out = os.path.join(CACHE, "out")
    logs = os.path.join(CACHE, "logs")
    os.makedirs(logs, exist_ok=True)

    startup = _startup_cases(dataset(1), out, with_tf)
    sized = []
    for size in _SIZES:
        ds = datasets[size]
        builds = _build_cases(ds, size, out, args.num_shards, with_tf, levels)
        reference = builds[0].output_dir  # the build job's default run: what the readers read
        sized.append(builds + _verify_cases(reference, ds.images, size, with_tf))
    plan = _plan_case(plan_items)
    cases = startup + sized[0] + sized[1] + [plan]
    for round_ in range(repeat):
        print(f"round {round_ + 1} of {repeat}", flush=True)
        for case in cases:
            _run(case, logs)

    identical = all(
        len({tuple(c.result["shard_sha256"]) for c in group
             if c.base.startswith("build job") and c.group == "build"}) == 1
        for group in sized)
    rows = [_row(c) for c in cases]
    marginal = marginal_rows(rows)
    targets = _targets({row["name"]: row for row in rows}, {m["base"]: m for m in marginal}, with_tf,
                       plan_items, default)
    table = _table(rows, marginal, targets)
    print()
    print(table)
    print(f"\nbuild job outputs byte-identical across modes and validation levels: {identical}")
    results = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command, "machine": machine(),
        "datasets": {size: {"root": os.path.relpath(ds.root, _ROOT), "images": ds.images,
                            "bytes": ds.bytes, "mean_bytes": round(ds.bytes / ds.images),
                            "mean_pixels": round(ds.pixels / ds.images)}
                     for size, ds in datasets.items()},
        "rounds": repeat, "num_shards": args.num_shards, "plan_items": plan_items,
        "default_validate": default,
        "tensorflow": with_tf or why_not, "build_outputs_identical": identical,
        "rows": rows, "marginal": marginal, "targets": targets,
    }
    with open(args.output, "w") as fh:
        json.dump(results, fh, indent=1)
    print(f"wrote {args.output}")
    return 0


# -- case baseline ----------------------------------------------------------------------------------------

_BASELINE_DOC = """The baselines the benchmarks compare the project's jobs with, one per subcommand.

Each subcommand is run by ``benchmarks/throughput.py cpu_per_gb`` as its own process (so its peak
memory is its own) and ends by printing one line ``RESULT {json}`` with what it
did. Every build baseline writes the same Example schema as the build job
(``transforms.example.schema.IMAGE_FEATURES``) from the same files.

    python -m benchmarks.throughput baseline beam_build --input DIR --output_dir OUT --num_shards 8 [Beam flags]
    python -m benchmarks.throughput baseline pool_build --input DIR --output_dir OUT --processes 4
    python -m benchmarks.throughput baseline tf_build --input DIR --output_dir OUT --num_shards 8
    python -m benchmarks.throughput baseline floor --input DIR --output_dir OUT
    python -m benchmarks.throughput baseline beam_read --pattern 'OUT/*.tfrecord' [Beam flags]
    python -m benchmarks.throughput baseline tf_read --pattern 'OUT/*.tfrecord'
    python -m benchmarks.throughput baseline plan --items 1281167 --num_shards 1024 [Beam flags]
"""

def _result(**fields) -> None:
    print("RESULT " + json.dumps(fields, sort_keys=True), flush=True)


def _image_files(root: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(relative path, class) of every visible file under ``root``, sorted; and the classes."""
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith("."):
                rel = os.path.relpath(os.path.join(folder, name), root)
                files.append((rel, rel.split(os.sep, 1)[0]))
    return files, sorted({label for _, label in files})


def _features(data: bytes, relpath: str, label: str, index: int) -> dict:
    """The image schema's features of one file, size and channels from the header (Pillow)."""
    from PIL import Image

    from transforms.images.image_codec import channels_of

    with Image.open(io.BytesIO(data)) as img:
        width, height = img.size
        fmt, channels = img.format.lower(), channels_of(img)
    return {"image/encoded": data, "image/format": fmt, "image/height": height,
            "image/width": width, "image/channels": channels, "image/class/label": index,
            "image/class/text": label, "image/filename": relpath,
            "image/key/sha256": hashlib.sha256(data).hexdigest()}


# -- The plain Beam pipeline a user writes ----------------------------------------------------


def _example_module(classes: str = "auto"):
    """``tf.train`` when TensorFlow is importable (``auto``) or asked for (``tensorflow``), else
    (``project``) the project's compiled Example messages."""
    if classes != "project":
        try:
            import tensorflow as tf
        except ImportError:
            if classes == "tensorflow":
                raise
        else:
            return tf.train
    from transforms.example import messages

    return messages


def _plain_example(path: str, root: str, index: dict[str, int], classes: str = "auto") -> bytes:
    """One file -> a serialized ``tf.train.Example`` built with protobuf's generated classes."""
    from apache_beam.metrics import Metrics

    train = _example_module(classes)
    relpath = os.path.relpath(path, root)
    label = relpath.split(os.sep, 1)[0]
    with open(path, "rb") as fh:
        data = fh.read()
    feature = {}
    for name, value in _features(data, relpath, label, index[label]).items():
        if isinstance(value, int):
            feature[name] = train.Feature(int64_list=train.Int64List(value=[value]))
        else:
            raw = value.encode("utf-8") if isinstance(value, str) else value
            feature[name] = train.Feature(bytes_list=train.BytesList(value=[raw]))
    Metrics.counter("bench", "records").inc()
    return train.Example(features=train.Features(feature=feature)).SerializeToString()


def _counter(result, name: str) -> int:
    from apache_beam.metrics.metric import MetricsFilter

    counters = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(c.committed or c.attempted or 0 for c in counters)


def _pipeline(beam_args: Sequence[str]):
    """The project's in-process runner (``local_runner``), for the cases that are not baselines."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.beam_compat import local_runner

    options = PipelineOptions(list(beam_args))
    return beam.Pipeline(runner=local_runner(options), options=options)


def beam_build(args, beam_args: Sequence[str]) -> None:
    """``Create(paths) | Map(read + tf.train.Example) | WriteToTFRecord`` on the default DirectRunner.

    The pipeline a Beam user writes: no project transform, no project codec, Beam's
    own runner selection (``beam.Pipeline(options=...)``).
    """
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    files, classes = _image_files(args.input)
    index = {name: i for i, name in enumerate(classes)}
    os.makedirs(args.output_dir, exist_ok=True)
    p = beam.Pipeline(options=PipelineOptions(list(beam_args)))
    _ = (p
         | "Paths" >> beam.Create([os.path.join(args.input, rel) for rel, _ in files])
         | "ReadExample" >> beam.Map(_plain_example, args.input, index, args.example_classes)  # serialized Example
         | "Write" >> beam.io.WriteToTFRecord(os.path.join(args.output_dir, "train"),
                                              file_name_suffix=".tfrecord",
                                              num_shards=args.num_shards))
    result = p.run()
    result.wait_until_finish()
    _result(records=_counter(result, "records"), example_classes=_example_module(args.example_classes).__name__)


def _read_encode(item: tuple[str, str, int], root: str) -> bytes:
    """(relative path, class, class index) -> serialized Example, read whole from ``root``."""
    from tests.helpers import encode_example

    relpath, label, index = item
    with open(os.path.join(root, relpath), "rb") as fh:
        data = fh.read()
    return encode_example(_features(data, relpath, label, index))


# -- A plain multi-process loop --------------------------------------------------------------


def _write_part(part: tuple[str, str, int, list[tuple[str, str, int]]]) -> int:
    """Reads, encodes and frames one process's share of the files into its own file."""
    from transforms.tfrecord.framing import frame_record

    root, path, _, items = part
    with open(path, "wb") as out:
        for item in items:
            out.write(frame_record(_read_encode(item, root)))
    return len(items)


def pool_build(args, _beam_args: Sequence[str]) -> None:
    """``multiprocessing.Pool`` of N processes, each writing every N-th file to its own shard."""
    import multiprocessing

    files, classes = _image_files(args.input)
    index = {name: i for i, name in enumerate(classes)}
    items = [(rel, label, index[label]) for rel, label in files]
    os.makedirs(args.output_dir, exist_ok=True)
    n = args.processes
    parts = [(args.input, os.path.join(args.output_dir, f"train-{i:05d}-of-{n:05d}.tfrecord"), i,
              items[i::n]) for i in range(n)]
    pool = multiprocessing.Pool(n)
    written = sum(pool.map(_write_part, parts, chunksize=1))
    pool.close()
    pool.join()  # the processes end and are waited for: their CPU time reaches this process
    _result(records=written)


# -- TensorFlow's writer, one process ------------------------------------------------------


def tf_build(args, _beam_args: Sequence[str]) -> None:
    import tensorflow as tf

    files, classes = _image_files(args.input)
    index = {name: i for i, name in enumerate(classes)}
    os.makedirs(args.output_dir, exist_ok=True)
    writers = [tf.io.TFRecordWriter(os.path.join(
        args.output_dir, f"train-{i:05d}-of-{args.num_shards:05d}.tfrecord"))
        for i in range(args.num_shards)]

    def feature(value) -> tf.train.Feature:
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        if isinstance(value, str):
            value = value.encode("utf-8")
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    for i, (relpath, label) in enumerate(files):
        with open(os.path.join(args.input, relpath), "rb") as fh:
            data = fh.read()
        features = _features(data, relpath, label, index[label])
        example = tf.train.Example(features=tf.train.Features(
            feature={name: feature(value) for name, value in features.items()}))
        writers[i % args.num_shards].write(example.SerializeToString())
    for writer in writers:
        writer.close()
    _result(records=len(files))


# -- The floor: read and frame, nothing else -------------------------------------------------


def floor(args, _beam_args: Sequence[str]) -> None:
    from transforms.tfrecord.framing import frame_record

    files, _ = _image_files(args.input)
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "all.tfrecord"), "wb") as out:
        for relpath, _ in files:
            with open(os.path.join(args.input, relpath), "rb") as fh:
                out.write(frame_record(fh.read()))
    _result(records=len(files))


# -- Reading back --------------------------------------------------------------------------


def _parse(record: bytes) -> None:
    from apache_beam.metrics import Metrics

    from transforms.example.codec import decode_example

    decode_example(record)
    Metrics.counter("bench", "records").inc()


def beam_read(args, beam_args: Sequence[str]) -> None:
    """``ReadFromTFRecord | Map(parse)`` on the default DirectRunner: the reader a Beam user writes, on
    Beam's own runner selection and worker start (not the project's ``local_runner``)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    p = beam.Pipeline(options=PipelineOptions(list(beam_args)))
    _ = (p
         | "Read" >> beam.io.ReadFromTFRecord(args.pattern)
         | "Parse" >> beam.Map(_parse))
    result = p.run()
    result.wait_until_finish()
    _result(records=_counter(result, "records"))


def tf_read(args, _beam_args: Sequence[str]) -> None:
    import tensorflow as tf

    from transforms.example.schema import IMAGE_FEATURES

    spec = {name: tf.io.FixedLenFeature([], tf.string if kind == "bytes" else tf.int64)
            for name, kind in IMAGE_FEATURES.items()}
    files = sorted(glob.glob(args.pattern))
    ds = (tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
          .batch(256)
          .map(lambda batch: tf.io.parse_example(batch, spec), num_parallel_calls=tf.data.AUTOTUNE)
          .prefetch(tf.data.AUTOTUNE))
    records = 0
    for batch in ds:
        records += int(batch["image/class/label"].shape[0])
    _result(records=records)


# -- Planning at ImageNet's scale ------------------------------------------------------------


def plan(args, beam_args: Sequence[str]) -> None:
    import apache_beam as beam

    from benchmarks.scaling import _order_of, _size_of, _split_of, chunks_of, synthetic_items
    from transforms.plan_shards import ASSIGNED, PlanShards

    p = _pipeline(beam_args)
    planned = (p
               | "Chunks" >> beam.Create(chunks_of(args.items))
               | "Spread" >> beam.Reshuffle()
               | "Items" >> beam.FlatMap(synthetic_items)
               | "Plan" >> PlanShards(split_of=_split_of, order_of=_order_of, size_of=_size_of,
                                      target_bytes=150 << 20, num_shards=args.num_shards))
    _ = (planned[ASSIGNED]
         | "Shards" >> beam.Map(lambda keyed: keyed[0][1])
         | "PerShard" >> beam.combiners.Count.PerElement()
         | "AllShards" >> beam.combiners.ToList()
         | "Report" >> beam.Map(_report_plan, args.items, args.num_shards))
    p.run().wait_until_finish()


def _report_plan(counts: list[tuple[int, int]], items: int, num_shards: int) -> None:
    total = sum(n for _, n in counts)
    if total != items or len(counts) != num_shards:
        raise RuntimeError(f"planned {total} items into {len(counts)} shards; expected "
                           f"{items} into {num_shards}")
    per_shard = [n for _, n in counts]
    _result(records=total, shards=len(counts), min_records=min(per_shard),
            max_records=max(per_shard))


_CASES = {"beam_build": beam_build, "pool_build": pool_build,
          "tf_build": tf_build, "floor": floor,
          "beam_read": beam_read, "tf_read": tf_read, "plan": plan}


def baseline_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=_BASELINE_DOC.splitlines()[0])
    parser.add_argument("case", choices=sorted(_CASES))
    parser.add_argument("--input")
    parser.add_argument("--output_dir")
    parser.add_argument("--pattern")
    parser.add_argument("--num_shards", type=int, default=8)
    parser.add_argument("--items", type=int, default=1_281_167)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--example_classes", choices=("auto", "tensorflow", "project"), default="auto",
                        help="beam_build's Example classes: TensorFlow's if importable (auto), or the "
                             "project's protobuf ones (no TensorFlow import, ~5 CPU s)")
    args, beam_args = parser.parse_known_args(argv)
    _CASES[args.case](args, beam_args)


# -- case fixed_cost --------------------------------------------------------------------------------------

_FIXED_COST_DOC = """Fixed cost: a 20-photo build in one process against a 3-transform Beam pipeline on the same photos.

    python -m benchmarks.throughput fixed_cost [--images 20] [--rounds 5]

Both run as fresh processes (``python -m ...``), interleaved, one DirectRunner
process each (no worker processes: the build job stays in one process below
1 GiB of input), so the figures are start-up, graph building and per-stage
cost, not image work:

- the build job: ``beam_jobs.build_shards --input PHOTOS --output_dir OUT``
  (folder survey, listing, checks, run files, planning, shards, publish);
- Beam's ``Create(paths) | Map(read, Example) | WriteToTFRecord``
  (``benchmarks/throughput.py baseline beam_build``), one shard, with the
  project's Example classes (``--example_classes project``: importing
  TensorFlow alone would cost more than either whole run);
- ``python -c "import apache_beam"``: the floor every Beam job pays.

The checkout's modules are compiled to bytecode first (untimed), as
``pip install`` leaves them and as Python writes them on a first run, so
that an environment that keeps Python from writing them
(``PYTHONDONTWRITEBYTECODE``) does not add compiling the project's source,
which installed Beam never pays, to every round.

Prints a Markdown table (median wall and CPU seconds, all processes, and the
build's ratio to the Beam pipeline) and one JSON line with every round.
"""

def _small_photos(count: int) -> str:
    """A folder of the first ``count`` benchmark photos (hard links into the cache)."""
    root = os.path.join(common.CACHE, f"photos-first-{count}")
    if not os.path.isdir(root):
        full = common.dataset(count * common.MEAN_BYTES / 1e6 * 1.5)
        staging = root + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        taken = 0
        for folder, dirs, names in sorted(os.walk(full.root)):
            dirs.sort()
            for name in sorted(n for n in names if not n.startswith(".")):
                if taken == count:
                    break
                rel = os.path.relpath(os.path.join(folder, name), full.root)
                os.makedirs(os.path.join(staging, os.path.dirname(rel)), exist_ok=True)
                os.link(os.path.join(folder, name), os.path.join(staging, rel))
                taken += 1
        os.rename(staging, root)
    return root


def fixed_cost_run(argv: Sequence[str] | None = None) -> dict:
    """Runs the benchmark; prints the table and a JSON line, and returns the figures."""
    parser = argparse.ArgumentParser(description=_FIXED_COST_DOC.splitlines()[0])
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    root = _small_photos(args.images)
    common.compile_checkout()
    cases = {
        "build job": lambda out: [sys.executable, "-m", "beam_jobs.build_shards", "--input", root,
                                  "--output_dir", out],
        "Beam Create | Map | WriteToTFRecord": lambda out: [
            sys.executable, "-m", "benchmarks.throughput", "baseline", "beam_build", "--input", root,
            "--output_dir", out, "--num_shards", "1", "--example_classes", "project"],
        "import apache_beam": lambda out: [sys.executable, "-c", "import apache_beam"],
    }
    with tempfile.TemporaryDirectory(prefix="fixed_cost_") as tmp:
        found = interleaved_rounds(cases, args.rounds, tmp, checkout_env())
    median = medians(found)
    beam_wall, beam_cpu = median["Beam Create | Map | WriteToTFRecord"]
    print(f"| {args.images} photos, {args.rounds} rounds | wall s | CPU s | CPU / Beam pipeline's |")
    print("|---|---:|---:|---:|")
    for name, (wall, cpu) in median.items():
        print(f"| {name.replace('|', chr(92) + '|')} | {wall:.2f} | {cpu:.2f} | {cpu / beam_cpu:.2f} |")
    figures = {"images": args.images, "rounds": found,
               "build_cpu_ratio": round(median["build job"][1] / beam_cpu, 3),
               "build_wall_ratio": round(median["build job"][0] / beam_wall, 3)}
    print(json.dumps(figures))
    return figures


# -- case per_gb_table ------------------------------------------------------------------------------------

_PER_GB_TABLE_DOC = """The build's marginal CPU per GB beside the baselines, in one table: each case at two sizes.

    python -m benchmarks.throughput per_gb_table [--small_mb 150] [--large_mb 1320] [--rounds 3] [--before CHECKOUT]

Each case a fresh process (one process: ``--direct_num_workers 1``, in memory),
the cases interleaved round by round on two photo sets of ``benchmarks/common.py``
(the smaller a prefix of the larger):

- ``build job``: this checkout's build, default flags;
- ``build job, --before``: the same command run from another checkout (e.g. a
  ``git worktree`` of an older commit), so before and after share the run;
- ``Beam Create | Map | WriteToTFRecord``: the plain pipeline a Beam user writes
  (``baseline beam_build``, the default DirectRunner, protobuf's Example);
- ``Pool loop``: ``baseline pool_build`` with one process (read, Example, framing);
- ``read + frame``: ``baseline floor`` (read each file, CRC32C-frame it, append).

Marginal CPU per GB = (CPU at large - CPU at small) / GB between them, median of
the rounds' paired differences (start-up cancels out). Prints a Markdown table
with the build's ratio to each case and one JSON line.
"""


def per_gb_table_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_PER_GB_TABLE_DOC.splitlines()[0])
    parser.add_argument("--small_mb", type=float, default=150)
    parser.add_argument("--large_mb", type=float, default=1320)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", default=None, help="Another checkout whose build runs beside this one's.")
    args = parser.parse_args(argv)
    sets = {"small": dataset(args.small_mb), "large": dataset(args.large_mb)}
    one = ["--direct_num_workers", "1", "--direct_running_mode", "in_memory"]

    def build(folder: str, checkout: str | None):
        # -P: the current folder (this checkout) does not come before PYTHONPATH's checkout
        env = ["env", f"PYTHONPATH={checkout}"] if checkout else []
        return lambda out: [*env, sys.executable, "-P", "-m", "beam_jobs.build_shards", "--input", folder,
                            "--output_dir", out, *one]

    def baseline(name: str, folder: str, *extra: str):
        return lambda out: [sys.executable, "-m", "benchmarks.throughput", "baseline", name, "--input", folder,
                            "--output_dir", out, *extra]

    cases: dict[str, Callable[[str], list[str]]] = {}
    for size, ds in sets.items():
        cases[f"build job@{size}"] = build(ds.root, None)
        if args.before:
            cases[f"build job, --before@{size}"] = build(ds.root, os.path.abspath(args.before))
        cases[f"Beam Create | Map | WriteToTFRecord@{size}"] = baseline("beam_build", ds.root, "--num_shards", "1")
        cases[f"Pool loop, 1 process@{size}"] = baseline("pool_build", ds.root, "--processes", "1")
        cases[f"read + frame@{size}"] = baseline("floor", ds.root)
    with tempfile.TemporaryDirectory(prefix="per_gb_") as tmp:
        found = interleaved_rounds(cases, args.rounds, tmp, checkout_env())
    gb = (sets["large"].bytes - sets["small"].bytes) / 1e9
    names = list(dict.fromkeys(name.split("@")[0] for name in cases))
    per_gb = {name: statistics.median((large[1] - small[1]) / gb for small, large in
                                      zip(found[f"{name}@small"], found[f"{name}@large"])) for name in names}
    ours = per_gb["build job"]
    print(f"| case, {args.rounds} rounds, {args.small_mb:g} and {args.large_mb:g} MB | marginal CPU s/GB | "
          "the build's ratio to it |")
    print("|---|---:|---:|")
    for name in names:
        print(f"| {name.replace('|', chr(92) + '|')} | {per_gb[name]:.2f} | {ours / per_gb[name]:.2f}x |")
    print(json.dumps({"machine": machine(), "cpu_s_per_gb": {k: round(v, 3) for k, v in per_gb.items()},
                      "rounds": found}))
    return 0


# -- case stage_costs -------------------------------------------------------------------------------------

_STAGE_COSTS_DOC = """Where a build's marginal CPU goes: the CPU of each fused stage the runner executes.

    python -m benchmarks.throughput stage_costs [--small_mb 150] [--large_mb 1320] [--rounds 3]

Runs the build job (one process, in memory) on two photo sets of ``benchmarks/common.py``,
the sizes interleaved round by round, each a fresh process that adds up its own CPU
(user + system) around each bundle the runner executes (``FnApiRunner._execute_bundle``).
Prints, per fused stage (named by its first step), the median marginal CPU s per added GB
and its share, the whole process's beside them, and one JSON line.
"""


def _stage_label(name: str) -> str:
    """A fused stage's name (``((a)+(b))+(c)``) shortened to its first step that is not a PCollection read."""
    steps = [step.strip("() ") for step in name.split("+")]
    for step in steps:
        if step and not step.startswith("ref_PCollection"):
            step = re.sub(r"[-_]*\d*$", "", step.replace("ref_AppliedPTransform_", ""))
            return "/".join(step.split("/")[:2])
    return steps[0]


def _stage_child(input_dir: str, output_dir: str, report: str) -> None:
    """Runs the build job in this process, timing each bundle's CPU by stage; writes them to ``report``."""
    import resource
    import runpy

    from apache_beam.runners.portability.fn_api_runner import fn_runner

    spent: dict[str, float] = {}
    execute = fn_runner.FnApiRunner._execute_bundle

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def timed(self, context, bundle, bundle_input):
        start = cpu()
        try:
            return execute(self, context, bundle, bundle_input)
        finally:
            label = _stage_label(bundle.stage.name)
            spent[label] = spent.get(label, 0.0) + cpu() - start

    fn_runner.FnApiRunner._execute_bundle = timed
    sys.argv = ["build_shards", "--input", input_dir, "--output_dir", output_dir, "--direct_num_workers", "1",
                "--direct_running_mode", "in_memory"]
    try:
        runpy.run_module("beam_jobs.build_shards", run_name="__main__")
    except SystemExit as ended:
        if ended.code:
            raise
    with open(report, "w") as fh:
        json.dump({"process": cpu(), "stages": spent}, fh)


def stage_costs_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_STAGE_COSTS_DOC.splitlines()[0])
    parser.add_argument("--small_mb", type=float, default=150)
    parser.add_argument("--large_mb", type=float, default=1320)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folders", nargs=2, metavar=("SMALL", "LARGE"),
                        help="Two folders of class folders to build instead of the photo sets.")
    parser.add_argument("--child", nargs=3, metavar=("INPUT", "OUTPUT_DIR", "REPORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _stage_child(*args.child)
        return 0
    if args.folders:
        sets = {size: Dataset(root, 0, folder_bytes(root), 0) for size, root in zip(("small", "large"), args.folders)}
    else:
        sets = {"small": dataset(args.small_mb), "large": dataset(args.large_mb)}
    found: dict[str, list[dict]] = {"small": [], "large": []}
    with tempfile.TemporaryDirectory(prefix="stage_costs_") as tmp:
        for _ in range(args.rounds):
            for size, ds in sets.items():
                out, report = os.path.join(tmp, "out"), os.path.join(tmp, "report.json")
                shutil.rmtree(out, ignore_errors=True)
                subprocess.run([sys.executable, "-m", "benchmarks.throughput", "stage_costs", "--child", ds.root, out,
                                report], check=True, env=checkout_env(), stdout=subprocess.DEVNULL)
                with open(report) as fh:
                    found[size].append(json.load(fh))
    gb = (sets["large"].bytes - sets["small"].bytes) / 1e9
    names = sorted({name for run in found["small"] + found["large"] for name in run["stages"]})
    per_gb = {name: statistics.median((large["stages"].get(name, 0.0) - small["stages"].get(name, 0.0)) / gb
                                      for small, large in zip(found["small"], found["large"])) for name in names}
    whole = statistics.median((large["process"] - small["process"]) / gb
                              for small, large in zip(found["small"], found["large"]))
    print(f"| fused stage (its first step), {args.rounds} rounds | marginal CPU s/GB | share |")
    print("|---|---:|---:|")
    for name in sorted(per_gb, key=per_gb.get, reverse=True):
        if abs(per_gb[name]) >= 0.01:
            print(f"| {name} | {per_gb[name]:.2f} | {per_gb[name] / whole:.0%} |")
    print(f"| the whole process | {whole:.2f} | 100% |")
    print(json.dumps({"machine": machine(), "cpu_s_per_gb": {k: round(v, 3) for k, v in per_gb.items()},
                      "process_cpu_s_per_gb": round(whole, 3), "runs": found}))
    return 0


# -- case worker_count ------------------------------------------------------------------------------------

_WORKER_COUNT_DOC = """One worker process or two: what a local build and verify cost in CPU and wall seconds.

    tfrecord-shards sample --output D300 --size_mb 300
    python -m benchmarks.throughput worker_count --data D300 [--rounds 2]

Runs, each a fresh process, the cases interleaved round after round, on the
DirectRunner: the build job on ``--data`` with one worker (``--direct_running_mode
in_memory``, the default under 1 GiB) and with two worker processes
(``--direct_running_mode multi_processing --direct_num_workers 2``), then the
verify job on the one-worker build's output, the same two ways. For each: the
median wall seconds and CPU seconds (user + system) of the whole process tree
(``wait4``: the job's process and its worker processes), and their ratios to
one worker. ``os.cpu_count()`` and the load at the start are printed: the rule
the jobs follow (``transforms/beam_compat.py``) is set from these figures on
the machine's core count.
"""

_ONE = ["--direct_running_mode", "in_memory"]
_TWO = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


def worker_count_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_WORKER_COUNT_DOC.splitlines()[0])
    parser.add_argument("--data", required=True, help="Folder of images (tfrecord-shards sample output).")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", help="Write every run's figures here.")
    args = parser.parse_args(argv)
    env, tmp = checkout_env(), tempfile.mkdtemp(prefix="worker-count-")
    built = os.path.join(tmp, "built")
    python = [sys.executable, "-m"]
    cases = {
        "build, 1 worker": python + ["beam_jobs.build_shards", "--input", args.data, "--output_dir", "{out}", *_ONE],
        "build, 2 worker processes": python + ["beam_jobs.build_shards", "--input", args.data, "--output_dir",
                                               "{out}", *_TWO],
        "verify, 1 worker": python + ["beam_jobs.verify_shards", "--output_dir", built, *_ONE],
        "verify, 2 worker processes": python + ["beam_jobs.verify_shards", "--output_dir", built, *_TWO],
    }
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    about = machine()
    try:
        first = run_measured([a.replace("{out}", built) for a in cases["build, 1 worker"]], _ROOT,
                             os.path.join(tmp, "log"), env=env)  # the set verify reads (untimed)
        if first.returncode != 0:
            raise SystemExit(f"build failed: {first.output[-2000:]}")
        for _ in range(args.rounds):
            for name, command in cases.items():
                out = os.path.join(tmp, "out")
                shutil.rmtree(out, ignore_errors=True)
                measured = run_measured([a.replace("{out}", out) for a in command], _ROOT,
                                        os.path.join(tmp, "log"), env=env)
                if measured.returncode != 0:
                    raise SystemExit(f"{name} failed: {measured.output[-2000:]}")
                found[name].append((measured.seconds, measured.cpu_seconds))
                print(f"{name}: {measured.seconds:.1f} s wall, {measured.cpu_seconds:.1f} CPU s", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    median = {name: (statistics.median(s for s, _ in runs), statistics.median(c for _, c in runs))
              for name, runs in found.items()}
    print(f"{about['cores']} cores, load at start {about['load_average_at_start']}")
    print("| run | wall s | CPU s | wall / 1 worker's | CPU / 1 worker's |")
    print("|---|---:|---:|---:|---:|")
    for name, (wall, cpu) in median.items():
        wall0, cpu0 = median[name.split(",")[0] + ", 1 worker"]
        print(f"| {name} | {wall:.1f} | {cpu:.1f} | {wall / wall0:.2f} | {cpu / cpu0:.2f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"machine": about, "runs": found}, fh, indent=1)
    return 0


# -- case shard_hashes ------------------------------------------------------------------------------------

_SHARD_HASHES_DOC = """What hashing each shard costs a build: marginal CPU seconds per added GB, before and after.

    tfrecord-shards sample --output D150 --size_mb 150; tfrecord-shards sample --output D450 --size_mb 450
    python -m benchmarks.throughput shard_hashes --small D150 --large D450 [--before OLD_CHECKOUT] [--rounds 2]

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


def shard_hashes_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_SHARD_HASHES_DOC.splitlines()[0])
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


# -- case read_tfrecords ----------------------------------------------------------------------------------

_READ_TFRECORDS_DOC = """Benchmark: reading one ~50 MB TFRecord file split by byte range vs read whole.

Writes a file of image Examples (real JPEGs of about ``--record_kb``, plus a
``.idx``) under ``benchmarks/.cache`` and reads it on the local runner with
``--workers`` workers, in four ways:

- Beam's ``ReadFromTFRecord``, which reads a file as one unit (the baseline);
- ``ReadFromTFRecords`` forced to one range (``min_bundle_size`` = file size);
- ``ReadFromTFRecords`` split by the runner, record starts from the ``.idx``;
- the same without the index (record starts found by scanning).

Each is timed twice: counting records only, and doing the verify job's
per-record work (Example parse, schema, full image decode). Times are whole
pipeline runs including start-up; ratios are against the baseline in the
same run.

    python -m benchmarks.throughput read_tfrecords [--size_mb 50] [--record_kb 100] [--workers 2]
"""

_CACHE = os.path.join(os.path.dirname(__file__), ".cache")


def _jpeg(rng: random.Random, target_kb: float) -> tuple[bytes, int, int]:
    from PIL import Image
    from PIL import ImageFilter

    side = int((target_kb * 1024 / 0.26) ** 0.5)  # blurred noise at q90: ~0.26 bytes per pixel
    img = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
    img = img.filter(ImageFilter.GaussianBlur(1.5))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue(), side, side


def _make_file(size_mb: int, record_kb: float) -> tuple[str, int]:
    from tests.tfrecord_fixtures import image_example
    from transforms.tfrecord.framing import frame_record
    from tests.helpers import format_index

    path = os.path.join(_CACHE, f"bench-{size_mb}mb-{record_kb:g}kb.tfrecord")
    if not os.path.exists(path + ".idx"):
        os.makedirs(_CACHE, exist_ok=True)
        rng = random.Random(0)
        sizes, written = [], 0
        with open(path, "wb") as fh:
            while written < size_mb << 20:
                encoded, height, width = _jpeg(rng, record_kb)
                label = len(sizes) % 10
                framed = frame_record(image_example(label, f"class{label}", encoded, "jpeg",
                                                    height, width))
                fh.write(framed)
                sizes.append(len(framed))
                written += len(framed)
        with open(path + ".idx", "wb") as fh:
            fh.write(format_index(sizes))
    no_index = path[:-len(".tfrecord")] + "-noidx.tfrecord"
    if not os.path.exists(no_index):
        os.link(path, no_index)
    with open(path + ".idx", "rb") as fh:
        return path, len(fh.read().splitlines())


def _count(item) -> None:
    from apache_beam.metrics import Metrics

    Metrics.counter("benchmark", "records").inc()


def _verify(record: bytes) -> None:
    from apache_beam.metrics import Metrics
    from transforms.verify.checks import check_record

    check, _ = check_record("bench", 0, record, schema=True, decode_images=True)
    assert not check.problems, check.problems
    Metrics.counter("benchmark", "records").inc()


def _read_tfrecords_run(options: PipelineOptions, read, work) -> tuple[float, int]:
    from apache_beam.metrics.metric import MetricsFilter
    from transforms.beam_compat import local_runner
    import apache_beam as beam

    started = time.perf_counter()
    p = beam.Pipeline(runner=local_runner(options), options=options)
    _ = read(p) | "Work" >> beam.Map(work)
    result = p.run()
    result.wait_until_finish()
    seconds = time.perf_counter() - started
    counters = result.metrics().query(MetricsFilter().with_name("records"))["counters"]
    return seconds, sum(c.committed or c.attempted or 0 for c in counters)


def read_tfrecords_main(argv: Sequence[str] | None = None) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions
    from transforms.tfrecord_source import ReadFromTFRecords
    import apache_beam as beam

    parser = argparse.ArgumentParser(description=_READ_TFRECORDS_DOC.splitlines()[0])
    parser.add_argument("--size_mb", type=int, default=50)
    parser.add_argument("--record_kb", type=float, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mode", default="multi_processing",
                        choices=("in_memory", "multi_threading", "multi_processing"))
    parser.add_argument("--repeat", type=int, default=2, help="Runs per case; the fastest counts.")
    args = parser.parse_args(argv)
    path, count = _make_file(args.size_mb, args.record_kb)
    no_index = path[:-len(".tfrecord")] + "-noidx.tfrecord"
    options = PipelineOptions([f"--direct_num_workers={args.workers}",
                               f"--direct_running_mode={args.mode}"])
    reads = [
        ("Beam ReadFromTFRecord (whole file)", lambda p: p | beam.io.ReadFromTFRecord(path)),
        ("ReadFromTFRecords, one range", lambda p: p | ReadFromTFRecords(
            path, min_bundle_size=os.path.getsize(path))),
        ("ReadFromTFRecords, split, .idx", lambda p: p | ReadFromTFRecords(path)),
        ("ReadFromTFRecords, split, scanning", lambda p: p | ReadFromTFRecords(no_index)),
    ]
    print(f"{path}: {os.path.getsize(path) / 2**20:.0f} MiB, {count} records; "
          f"{args.workers} workers ({args.mode}); best of {args.repeat}")
    for label, work in (("count records", _count), ("parse + decode images", _verify)):
        print(f"{label}:")
        baseline = None
        for name, read in reads:
            seconds, records = min(_read_tfrecords_run(options, read, work) for _ in range(args.repeat))
            assert records == count, (name, records, count)
            baseline = baseline or seconds
            print(f"  {name:36s} {seconds:6.2f} s  {records / seconds:7.0f} records/s  "
                  f"{baseline / seconds:5.2f}x")


# -- case verify_scale ------------------------------------------------------------------------------------

_VERIFY_SCALE_DOC = """Verify per GB: the verify job against Beam's ReadFromTFRecord + parse, at two sizes.

    python -m benchmarks.throughput verify_scale [--sizes 260 520] [--repeat 3] [--mode 1proc]

Builds (once, into ``benchmarks/.cache/``) a shard set of 8 shards from the
photos of each size (``benchmarks/common.py``, ``--validate header``), then
runs, round after round, the verify job and ``benchmarks/throughput.py baseline beam_read``
on each set, each a fresh process (``benchmarks/common.py``). Reports the
median wall and CPU seconds of each, and the marginal seconds per GB: the
difference between the two sizes over the difference in bytes, which leaves
out start-up.
"""

_verify_scale_MODES = {"1proc": ["--direct_num_workers", "1", "--direct_running_mode", "in_memory"],
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


def verify_scale_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_VERIFY_SCALE_DOC.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs=2, default=[260, 520])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mode", choices=sorted(_verify_scale_MODES), default="1proc")
    parser.add_argument("--verify_module", default="beam_jobs.verify_shards",
                        help="The verify job's module (to measure a variant of it).")
    args = parser.parse_args(argv)
    flags = _verify_scale_MODES[args.mode]
    folders = {size: _shard_set(size) for size in args.sizes}
    logs = os.path.join(CACHE, "logs")
    os.makedirs(logs, exist_ok=True)
    cases = {}
    for size, folder in folders.items():
        cases[("verify", size)] = [sys.executable, "-m", args.verify_module, "--output_dir", folder]
        cases[("beam_read", size)] = [sys.executable, "-m", "benchmarks.throughput", "baseline", "beam_read",
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


# -- case array_record ------------------------------------------------------------------------------------

_ARRAY_RECORD_DOC = """ArrayRecord shards against TFRecord ones: build CPU per added GB, and Grain's random access.

    python -m benchmarks.throughput array_record [--input PHOTOS] [--size_mb 60] [--rounds 2] [--reads 10000]

1. Build: the same folder (``--input``, else noise JPEGs of about 90 KB generated once into
   ``benchmarks/.cache/noise-<size>mb``) and its first quarter are built with ``--format
   tfrecord`` and ``--format array_record`` (``--num_shards 8``), each run a fresh process,
   rounds interleaved. Prints median CPU and wall seconds per build and per added GB (full
   less quarter), and the ArrayRecord build's ratio to the TFRecord one's.
2. Random access: 10,000 random record indices (seed 0) read through Grain's
   ``ArrayRecordDataSource`` from the full ArrayRecord build's shards, and from files holding
   the same records written by ArrayRecord's own ``ArrayRecordWriter`` with the same options
   (``group_size:1,uncompressed``), one file per shard; each a fresh source, median of
   ``--rounds``. Prints records per second of each, their ratio, and whether the two sets of
   files are byte-identical.

Ends with one JSON line of every figure.
"""

_array_record_CACHE = os.path.join(_ROOT, "benchmarks", ".cache")


def noise_photos(size_mb: float) -> str:
    """A folder of 4 class folders of noise JPEGs (about 90 KB each) totalling ``size_mb`` MB; made once."""
    import numpy as np
    from PIL import Image

    root = os.path.join(_array_record_CACHE, f"noise-{size_mb:g}mb")
    if os.path.isdir(root):
        return root
    rng = np.random.default_rng(0)
    partial, total, index = root + ".partial", 0, 0
    while total < size_mb * 1e6:
        pixels = rng.integers(0, 256, (180, 200, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
        path = os.path.join(partial, f"class{index % 4}", f"{index:05d}.jpg")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(buffer.getvalue())
        total += buffer.tell()
        index += 1
    os.rename(partial, root)
    return root


def _quarter(root: str, tmp: str) -> str:
    """A folder of links to the first quarter of each class folder's files."""
    quarter = os.path.join(tmp, "quarter")
    for name in sorted(os.listdir(root)):
        files = sorted(os.listdir(os.path.join(root, name)))
        os.makedirs(os.path.join(quarter, name))
        for file in files[: len(files) // 4]:
            os.symlink(os.path.join(root, name, file), os.path.join(quarter, name, file))
    return quarter


def _size(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files)


def _build(src: str, file_format: str):
    return lambda out: [sys.executable, "-m", "beam_jobs.build_shards", "--input", src, "--output_dir", out,
                        "--num_shards", "8", "--format", file_format]


def _read_rate(files: list[str], indexes: list[int]) -> float:
    """Records per second reading ``indexes`` one by one through Grain's ArrayRecordDataSource."""
    import grain

    source = grain.sources.ArrayRecordDataSource(files)
    started = time.perf_counter()
    for index in indexes:
        source[index]
    return len(indexes) / (time.perf_counter() - started)


def array_record_run(root: str, rounds: int, reads: int) -> dict:
    from array_record.python.array_record_module import ArrayRecordWriter

    from transforms.arrayrecord.shard_file import WRITER_OPTIONS, read_records

    env = checkout_env()
    result: dict = {"machine": machine(), "input": root}
    with tempfile.TemporaryDirectory(prefix="bench-array-record-") as tmp:
        inputs = {"full": root, "quarter": _quarter(root, tmp)}
        result["input_bytes"] = {name: _size(path) for name, path in inputs.items()}
        kept = os.path.join(tmp, "kept")

        def keep(name: str, out: str) -> None:
            if name == "full array_record" and not os.path.isdir(kept):
                os.rename(out, kept)

        cases = {f"{size} {fmt}": _build(path, fmt) for size, path in inputs.items()
                 for fmt in ("tfrecord", "array_record")}
        found = interleaved_rounds(cases, rounds, tmp, env, after=keep)
        med = {name: (statistics.median(s for s, _ in runs), statistics.median(c for _, c in runs))
               for name, runs in found.items()}
        added_gb = (result["input_bytes"]["full"] - result["input_bytes"]["quarter"]) / 1e9
        per_gb = {fmt: tuple((med[f"full {fmt}"][i] - med[f"quarter {fmt}"][i]) / added_gb for i in (0, 1))
                  for fmt in ("tfrecord", "array_record")}
        result["build"] = {"runs": found, "median_wall_cpu": med, "per_added_gb_wall_cpu": per_gb,
                           "array_record_vs_tfrecord_cpu_per_added_gb": per_gb["array_record"][1] / per_gb["tfrecord"][1]}

        ours = sorted(os.path.join(kept, name) for name in os.listdir(kept) if name.endswith(".array_record"))
        theirs = []
        for path in ours:
            copy = os.path.join(tmp, "own-writer", os.path.basename(path))
            os.makedirs(os.path.dirname(copy), exist_ok=True)
            writer = ArrayRecordWriter(copy, WRITER_OPTIONS)
            for _, record in read_records(path):
                writer.write(record)
            writer.close()
            theirs.append(copy)
        total = sum(1 for path in ours for _ in read_records(path))
        indexes = random.Random(0).choices(range(total), k=reads)
        rates = {"ours": [], "own_writer": []}
        for _ in range(rounds):
            rates["ours"].append(_read_rate(ours, indexes))
            rates["own_writer"].append(_read_rate(theirs, indexes))
        best = {name: max(values) for name, values in rates.items()}
        same = all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(ours, theirs))
        middle = {name: statistics.median(values) for name, values in rates.items()}
        result["random_access"] = {"records": total, "reads": reads, "records_per_s": rates, "best": best,
                                   "median": middle, "ours_vs_own_writer": middle["ours"] / middle["own_writer"],
                                   "same_bytes": same}
    return result


def array_record_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=_ARRAY_RECORD_DOC.splitlines()[0])
    parser.add_argument("--input", default=None, help="A folder of class folders (default: generated noise JPEGs).")
    parser.add_argument("--size_mb", type=float, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reads", type=int, default=10000)
    args = parser.parse_args(argv)
    result = array_record_run(args.input or noise_photos(args.size_mb), args.rounds, args.reads)
    build = result["build"]
    print("| build | quarter CPU s | full CPU s | CPU s per added GB | wall s per added GB |")
    print("|---|---:|---:|---:|---:|")
    for fmt in ("tfrecord", "array_record"):
        wall, cpu = build["per_added_gb_wall_cpu"][fmt]
        print(f"| {fmt} | {build['median_wall_cpu'][f'quarter {fmt}'][1]:.2f} | "
              f"{build['median_wall_cpu'][f'full {fmt}'][1]:.2f} | {cpu:.1f} | {wall:.1f} |")
    print(f"ArrayRecord / TFRecord CPU per added GB: {build['array_record_vs_tfrecord_cpu_per_added_gb']:.2f}")
    access = result["random_access"]
    print(f"Grain random access, {access['reads']} reads of {access['records']} records (median): ours "
          f"{access['median']['ours']:.0f}/s, ArrayRecord's own writer {access['median']['own_writer']:.0f}/s "
          f"({access['ours_vs_own_writer']:.2f}x); files byte-identical: {access['same_bytes']}")
    print(json.dumps(result))


# -- case consumer_decode ---------------------------------------------------------------------------------

_CONSUMER_DECODE_DOC = """Decodes every record of a shard set as TensorFlow does, then as torchvision does, and compares.

A record is right when its consumer reads it as the README says. TensorFlow
is the reference consumer (the tests run it); torchvision is another, and its
wheels need not install where the tests run. So the check is in two steps,
each where its consumer is installed:

    # where TensorFlow is: what tf.io.decode_image(channels=3) gives each record
    python -m benchmarks.throughput consumer_decode --shards OUT/train-*.tfrecord --reference ref.json
    # where torchvision is (CPU, and the GPU's JPEG decoder when CUDA is there)
    python -m benchmarks.throughput consumer_decode --shards OUT/train-*.tfrecord --check ref.json

The check decodes ``image/encoded`` with ``torchvision.io.decode_image(mode=RGB)``
(and JPEGs again with ``decode_jpeg(device="cuda")``) and counts, per format,
the records whose decoded shape is the recorded ``image/height`` x
``image/width`` x 3, whose pixels equal TensorFlow's (sha256 of the uint8
array; a 16-bit PNG, which torchvision decodes to uint16, compared by its
high byte, as TF's ``decode_image`` keeps it), and, where they do not (JPEG decoders may round differently), the
largest difference between the two decodes' 16 x 16 block means (a wrongly
turned or coloured image differs by tens; a rounding difference by about 1).
It prints one JSON object and exits 1 if any record failed to decode, had
another shape, or differs from TensorFlow's by more than ``--tolerance``.
"""

def _records(patterns: list[str]):
    """Yields ``(image/filename, format, height, width, encoded bytes)`` of every record, in file order."""
    from transforms.example.codec import decode_example
    from transforms.tfrecord.framing import iter_records

    for path in sorted(p for pattern in patterns for p in glob.glob(pattern)):
        with open(path, "rb") as fh:
            for offset, data in iter_records(fh, path):
                features = decode_example(data)
                value = lambda name: features[name][1][0]  # noqa: E731
                yield (value("image/filename").decode("utf-8", "replace"), value("image/format").decode(),
                       value("image/height"), value("image/width"), value("image/encoded"))


def reference(patterns: list[str]) -> dict:
    """TensorFlow's decoded shape and pixel sha256 of every record."""
    import tensorflow as tf

    out = {}
    for name, fmt, height, width, encoded in _records(patterns):
        pixels = tf.io.decode_image(encoded, channels=3, expand_animations=False).numpy()
        out[name] = {"format": fmt, "shape": list(pixels.shape), "recorded": [height, width, 3],
                     "sha256": hashlib.sha256(pixels.tobytes()).hexdigest(), "blocks": _blocks(pixels)}
    return out


def check(patterns: list[str], ref: dict, tolerance: float) -> dict:
    """torchvision's decodes against the reference, counted per format."""
    import torch
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg

    cuda = torch.cuda.is_available()
    formats: dict[str, dict] = {}
    failures = []
    for name, fmt, height, width, encoded in _records(patterns):
        row = formats.setdefault(fmt, {"records": 0, "shape_ok": 0, "pixels_equal_tf": 0, "max_abs_diff": 0,
                                       "16_bit": 0,
                                       "gpu_shape_ok": 0, "gpu_pixels_equal_tf": 0, "gpu_max_abs_diff": 0})
        row["records"] += 1
        data = torch.frombuffer(bytearray(encoded), dtype=torch.uint8)
        decodes = [("", lambda: decode_image(data, mode=ImageReadMode.RGB))]
        if cuda and fmt == "jpeg":
            decodes.append(("gpu_", lambda: decode_jpeg(data, mode=ImageReadMode.RGB, device="cuda").cpu()))
        for prefix, decode in decodes:
            try:
                chw = decode()
            except (RuntimeError, ValueError) as exc:
                failures.append(f"{prefix}{name} ({fmt}): {str(exc).splitlines()[0]}")
                continue
            if chw.dtype == torch.uint16:  # 16-bit PNGs: torchvision keeps 16 bits, TF keeps the high byte
                row["16_bit"] += 1
                chw = (chw.to(torch.int32) >> 8).to(torch.uint8)
            pixels = chw.permute(1, 2, 0).contiguous().numpy()
            if list(pixels.shape) != [height, width, 3]:
                failures.append(f"{prefix}{name} ({fmt}): shape {list(pixels.shape)}, recorded {height}x{width}")
                continue
            row[prefix + "shape_ok"] += 1
            expected = ref.get(name)
            if expected and hashlib.sha256(pixels.tobytes()).hexdigest() == expected["sha256"]:
                row[prefix + "pixels_equal_tf"] += 1
            elif expected:
                diff = max(abs(a - b) for a, b in zip(_blocks(pixels), expected["blocks"]))
                row[prefix + "max_abs_diff"] = max(row[prefix + "max_abs_diff"], round(diff, 2))
                if diff > tolerance:
                    failures.append(f"{prefix}{name} ({fmt}): block means differ from TensorFlow's by {diff:.1f}")
    import torchvision

    return {"torch": torch.__version__, "torchvision": torchvision.__version__, "cuda": cuda,
            "formats": formats, "failures": failures}


def _blocks(pixels) -> list[float]:
    """The means of a 16 x 16 grid of blocks of an ``[h, w, 3]`` uint8 array, per channel (768 floats)."""
    import numpy as np

    rows = np.linspace(0, pixels.shape[0], 17).astype(int)
    cols = np.linspace(0, pixels.shape[1], 17).astype(int)
    out = []
    for r0, r1 in zip(rows, rows[1:]):
        for c0, c1 in zip(cols, cols[1:]):
            block = pixels[r0:max(r1, r0 + 1), c0:max(c1, c0 + 1)].reshape(-1, 3)
            out.extend(float(v) for v in block.mean(axis=0).round(3))
    return out


def consumer_decode_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=_CONSUMER_DECODE_DOC.splitlines()[0])
    parser.add_argument("--shards", nargs="+", required=True, help="Shard files or glob patterns.")
    parser.add_argument("--reference", help="Write TensorFlow's decodes to this JSON file.")
    parser.add_argument("--check", help="Compare torchvision's decodes with this reference JSON file.")
    parser.add_argument("--tolerance", type=float, default=4.0,
                        help="The largest difference of block means from TensorFlow's decode that passes.")
    args = parser.parse_args(argv)
    if bool(args.reference) == bool(args.check):
        parser.error("give one of --reference and --check")
    if args.reference:
        ref = reference(args.shards)
        with open(args.reference, "w") as fh:
            json.dump(ref, fh, indent=1, sort_keys=True)
        print(json.dumps({"records": len(ref), "reference": args.reference}))
        return
    with open(args.check) as fh:
        ref = json.load(fh)
    result = check(args.shards, ref, args.tolerance)
    print(json.dumps(result, indent=1, sort_keys=True))
    sys.exit(1 if result["failures"] else 0)


# -- case exif_upright ------------------------------------------------------------------------------------

_EXIF_UPRIGHT_DOC = """What turning JPEGs upright for their EXIF orientation costs (``--image_mode tf``).

On scikit-image's photos, saved as phone-like JPEG (quality 90, 4:2:0) with
an EXIF orientation, cropped to whole 16x16 MCUs (as phone photos are:
4032x3024) and left at their own size (the flip then moves the block grid):

- quality: mean and largest absolute difference between Pillow's decode of
  the stored JPEG and ``ImageOps.exif_transpose`` of the source, and the
  stored size over the source's;
- time: ``encode_image`` of an image with orientation 6 (decoded, turned,
  encoded) over the same image with orientation 1 (kept: inspected only), in
  the same run; and reading the orientation (``exif_orientation``) over the
  whole ``read_image_info`` of a kept image.

    python -m benchmarks.throughput exif_upright      # prints a table and one JSON line
"""

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "motorcycle_left")


def _photo(name: str) -> Image.Image:
    from PIL import Image

    import skimage.data

    if name == "motorcycle_left":
        return Image.fromarray(skimage.data.stereo_motorcycle()[0])
    return Image.fromarray(getattr(skimage.data, name)())


def _exif_upright_jpeg(img: Image.Image, orientation: int) -> bytes:
    from PIL import Image
    from transforms.images.orientation import ORIENTATION_TAG

    exif = Image.Exif()
    exif[ORIENTATION_TAG] = orientation
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90, subsampling=2, exif=exif.tobytes())
    return out.getvalue()


def _best_of(fn, repeats: int = 7) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure() -> dict:
    from PIL import Image
    from PIL import ImageOps
    from transforms.images.image_codec import read_image_info
    from transforms.images.orientation import exif_orientation
    from transforms.images.records import EncodeSettings
    from transforms.images.records import encode_image
    import numpy as np

    rows = []
    settings = EncodeSettings()
    for name in PHOTOS:
        full = _photo(name)
        whole = full.crop((0, 0, full.width // 16 * 16, full.height // 16 * 16))
        for grid, img in (("whole MCUs", whole), ("own size", full)):
            for orientation in (3, 6, 8):
                source = _exif_upright_jpeg(img, orientation)
                stored, info = encode_image(source, settings)
                want = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(source))), dtype=np.int16)
                got = np.asarray(Image.open(io.BytesIO(stored)), dtype=np.int16)
                diff = np.abs(got - want)
                rows.append({"photo": name, "size": f"{img.width}x{img.height}", "grid": grid,
                             "orientation": orientation, "mean_diff": round(float(diff.mean()), 3),
                             "max_diff": int(diff.max()), "size_ratio": round(len(stored) / len(source), 3)})
        kept, turned = _exif_upright_jpeg(full, 1), _exif_upright_jpeg(full, 6)
        t_kept = _best_of(lambda: encode_image(kept, settings))
        t_turned = _best_of(lambda: encode_image(turned, settings))
        t_inspect = _best_of(lambda: read_image_info(kept, "structure"))
        t_orientation = _best_of(lambda: exif_orientation(Image.open(io.BytesIO(turned))), 50) - \
            _best_of(lambda: Image.open(io.BytesIO(turned)), 50)
        rows.append({"photo": name, "size": f"{full.width}x{full.height}", "kept_ms": round(t_kept * 1e3, 2),
                     "turned_ms": round(t_turned * 1e3, 2), "turned_over_kept": round(t_turned / t_kept, 1),
                     "orientation_us": round(max(t_orientation, 0) * 1e6, 1),
                     "orientation_over_inspect": round(max(t_orientation, 0) / t_inspect, 4)})
    return {"rows": rows}


def exif_upright_main(argv: Sequence[str] | None = None) -> None:
    argparse.ArgumentParser(description=_EXIF_UPRIGHT_DOC.splitlines()[0]).parse_args(argv)
    result = measure()
    for row in result["rows"]:
        print("  ".join(f"{key}={value}" for key, value in row.items()))
    print(json.dumps(result))


# -- case near_duplicate_cost -----------------------------------------------------------------------------

_NEAR_DUPLICATE_COST_DOC = """What the near-duplicate check adds to a build, in CPU seconds per added GB of JPEG photos.

Builds two photo sets of ``benchmarks/common.py`` (``--small_mb`` and
``--large_mb``, the smaller a prefix of the larger) into two splits
(``--split_fractions train=0.9,validation=0.1``: with one split nothing is
hashed), each build one process (``--direct_num_workers 1``), the cases
interleaved round by round:

- ``off``: ``--near_duplicates off``;
- ``report, full decode``: the default check with Pillow's ``draft`` turned
  off in the build's process, so each JPEG is decoded whole (the cost of a
  hash without a reduced decode);
- ``report, 1/8 decode``: ``perceptual.DRAFT_SIDE`` set to 1, so each JPEG is
  decoded at libjpeg's smallest scale (DC only);
- ``report`` (the default): decoded at the smallest scale leaving both sides
  >= ``DRAFT_SIDE`` (64) pixels.

The marginal cost per GB is (CPU at ``large`` - CPU at ``small``) / (GB
between them), median of the rounds: the fixed cost of a process (imports,
pipeline) cancels out. Beside it, ``perceptual_hash`` alone over the small
set's photos with each decode, one thread, best of the rounds (CPU seconds
per GB and microseconds per photo): the figure least moved by a loaded
machine.

    python -m benchmarks.throughput near_duplicate_cost [--small_mb 150] [--large_mb 450] [--rounds 3]

It prints a table and one JSON line.
"""

# Case -> the patch its build process runs before the build (see --child).
_PATCHES = {"off": "off", "report, full decode": "full", "report, 1/8 decode": "eighth", "report": "default"}


def _child(patch: str, argv: list[str]) -> int:
    """Runs the build in this process, the decode patched as ``patch`` says."""
    if patch == "full":
        from PIL import JpegImagePlugin

        JpegImagePlugin.JpegImageFile.draft = lambda self, mode, size: None  # each JPEG decoded whole
    elif patch == "eighth":
        from transforms.images import perceptual

        perceptual.DRAFT_SIDE = 1  # libjpeg's 1/8 scale for any image
    from beam_jobs import build_shards

    return build_shards.run(argv)


def _command(folder: str, patch: str):
    mode = "off" if patch == "off" else "report"
    return lambda out: [sys.executable, "-m", "benchmarks.throughput", "near_duplicate_cost", "--child", patch, "--",
                        "--input", folder, "--output_dir", out, "--split_fractions", "train=0.9,validation=0.1",
                        "--near_duplicates", mode, "--direct_num_workers", "1",
                        "--direct_running_mode", "in_memory"]


def _patched(patch: str):
    """The patch as a context for this process: draft off (``full``) or DC only (``eighth``)."""
    import contextlib

    from PIL import JpegImagePlugin

    from transforms.images import perceptual

    @contextlib.contextmanager
    def applied():
        draft, side = JpegImagePlugin.JpegImageFile.draft, perceptual.DRAFT_SIDE
        if patch == "full":
            JpegImagePlugin.JpegImageFile.draft = lambda self, mode, size: None
        elif patch == "eighth":
            perceptual.DRAFT_SIDE = 1
        try:
            yield
        finally:
            JpegImagePlugin.JpegImageFile.draft, perceptual.DRAFT_SIDE = draft, side
    return applied()


def hash_cost(folder: str, rounds: int) -> dict:
    """CPU seconds per GB of ``perceptual_hash`` alone over the photos of ``folder``, each decode, one
    thread, best of ``rounds`` (the cases alternating): the check's per-image work without a build."""
    import time

    from transforms.images.perceptual import perceptual_hash

    datas = []
    for d, _, names in os.walk(folder):
        for n in sorted(names):
            if not n.endswith(".jpg"):
                continue
            with open(os.path.join(d, n), "rb") as fh:
                datas.append(fh.read())
    gb = sum(map(len, datas)) / 1e9
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, patch in _PATCHES.items():
            if patch == "off":
                continue
            with _patched(patch):
                start = time.process_time()
                for data in datas:
                    perceptual_hash(data)
                spent = time.process_time() - start
            best[name] = min(best.get(name, spent), spent)
    return {name: {"cpu_s_per_gb": spent / gb, "us_per_image": spent / len(datas) * 1e6}
            for name, spent in best.items()}


def _size_gb(folder: str) -> float:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(folder) for n in names) / 1e9


def near_duplicate_cost_main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[2:] if argv is None else argv)
    if len(argv) > 1 and argv[0] == "--child":
        raise SystemExit(_child(argv[1], argv[3:]))
    parser = argparse.ArgumentParser(description=_NEAR_DUPLICATE_COST_DOC.splitlines()[0])
    parser.add_argument("--small_mb", type=float, default=150)
    parser.add_argument("--large_mb", type=float, default=450)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    folders = {"small": common.dataset(args.small_mb).root, "large": common.dataset(args.large_mb).root}
    gb = {size: _size_gb(folder) for size, folder in folders.items()}
    cases = {f"{name} @ {size}": _command(folder, patch)
             for size, folder in folders.items() for name, patch in _PATCHES.items()}
    hashing = hash_cost(folders["small"], args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        found = interleaved_rounds(cases, args.rounds, tmp, checkout_env())
    median = medians(found)
    added_gb = gb["large"] - gb["small"]
    rows = {}
    for name in _PATCHES:
        (wall_s, cpu_s), (wall_l, cpu_l) = median[f"{name} @ small"], median[f"{name} @ large"]
        rows[name] = {"cpu_small": cpu_s, "cpu_large": cpu_l, "wall_small": wall_s, "wall_large": wall_l,
                      "cpu_s_per_added_gb": (cpu_l - cpu_s) / added_gb}
    base = rows["off"]["cpu_s_per_added_gb"]
    print(f"| case | CPU s @ {gb['small'] * 1e3:.0f} MB | CPU s @ {gb['large'] * 1e3:.0f} MB | "
          "CPU s per added GB | added to off's |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['cpu_small']:.1f} | {row['cpu_large']:.1f} | {row['cpu_s_per_added_gb']:.2f} | "
              f"{row['cpu_s_per_added_gb'] - base:+.2f} |")
    for name, row in hashing.items():
        print(f"perceptual_hash alone, {name}: {row['us_per_image']:.0f} us per photo, "
              f"{row['cpu_s_per_gb']:.2f} CPU s/GB")
    print(json.dumps({"machine": machine(), "gb": gb, "rounds": args.rounds, "cases": rows,
                      "hash_alone": hashing, "runs": found}))


# -- case duplicate_check ------------------------------------------------------------------------

_DUPLICATE_CHECK_DOC = """The exact-duplicate check's CPU per image, in one process, against another checkout's.

    python -m benchmarks.throughput duplicate_check [--images 30000] [--rounds 3] [--before CHECKOUT]

Each run is a fresh process (``python -P``, the checkout on ``PYTHONPATH``) that makes
``--images`` synthetic ImageMetas, 2% of them a second copy of the one before, and runs
them through ``RejectDuplicateImages`` on the in-memory DirectRunner, then through a
pipeline that only creates and counts them; the difference of their CPU seconds (user +
system) is the check's. Prints microseconds per image, the median of ``--rounds``
interleaved rounds, for this checkout and ``--before``.
"""

# The measured process: argv[1] images; prints the check's and the plain pipeline's CPU seconds.
_DUPLICATE_RUN = """
import hashlib, inspect, resource, sys
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from transforms.images.image_codec import ImageInfo
from transforms.images.items import ImageMeta, SourceImage
from transforms.reject_duplicates import RejectDuplicateImages

n = int(sys.argv[1])
info = ImageInfo("jpeg", 640, 480, 3)
metas = [ImageMeta(SourceImage(f"/data/c{i % 100}/img_{i:07d}.jpg", f"c{i % 100}/img_{i:07d}.jpg", "train",
                               f"c{i % 100}"), i % 100, hashlib.sha256(str(i if i % 50 else i - 1).encode()).hexdigest(),
                   info, 100_000 + i, (i * 11400714819323198485) % (1 << 63)) for i in range(n)]
options = PipelineOptions(["--direct_num_workers", "1", "--direct_running_mode", "in_memory"])


def cpu():
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def run(check):
    start = cpu()
    with beam.Pipeline(options=options) as p:
        made = p | beam.Create(metas, reshuffle=False)
        if check:
            given = {"expected": p | "N" >> beam.Create([n])} if "expected" in inspect.signature(
                RejectDuplicateImages.__init__).parameters else {}
            made = made | RejectDuplicateImages(**given)
            _ = made["dead_letters"] | "CountDead" >> beam.combiners.Count.Globally()
            made = made["main"]
        _ = made | "Count" >> beam.combiners.Count.Globally()
    return cpu() - start


run(False)  # modules loaded, caches warm
print(run(True), run(False))
"""


def duplicate_check_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_DUPLICATE_CHECK_DOC.splitlines()[0])
    parser.add_argument("--images", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", default=None, help="Another checkout, measured in the same rounds.")
    args = parser.parse_args(argv)
    checkouts = {"this checkout": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    if args.before:
        checkouts["--before"] = os.path.abspath(args.before)
    found: dict[str, list[float]] = {name: [] for name in checkouts}
    for _ in range(args.rounds):
        for name, checkout in checkouts.items():
            done = subprocess.run([sys.executable, "-P", "-c", _DUPLICATE_RUN, str(args.images)],
                                  env={**os.environ, "PYTHONPATH": checkout}, capture_output=True, text=True,
                                  check=True)
            check, plain = map(float, done.stdout.split()[-2:])
            found[name].append((check - plain) / args.images * 1e6)
    for name, per_image in found.items():
        print(f"{name}: {statistics.median(per_image):.1f} us per image "
              f"(rounds: {', '.join(f'{value:.1f}' for value in per_image)})")
    return 0


CASES = {
    "cpu_per_gb": common.Case(cpu_per_gb_main, _CPU_PER_GB_DOC, ("--quick",)),
    "baseline": common.Case(baseline_main, _BASELINE_DOC, ()),
    "fixed_cost": common.Case(fixed_cost_run, _FIXED_COST_DOC, ("--images", "5", "--rounds", "1")),
    "per_gb_table": common.Case(per_gb_table_main, _PER_GB_TABLE_DOC,
                                ("--small_mb", "2", "--large_mb", "4", "--rounds", "1")),
    "stage_costs": common.Case(stage_costs_main, _STAGE_COSTS_DOC,
                               ("--small_mb", "2", "--large_mb", "4", "--rounds", "1")),
    "worker_count": common.Case(worker_count_main, _WORKER_COUNT_DOC, ("--rounds", "1")),
    "shard_hashes": common.Case(shard_hashes_main, _SHARD_HASHES_DOC, ("--rounds", "1")),
    "read_tfrecords": common.Case(read_tfrecords_main, _READ_TFRECORDS_DOC,
                                  ("--size_mb", "5", "--repeat", "1")),
    "verify_scale": common.Case(verify_scale_main, _VERIFY_SCALE_DOC, ("--sizes", "4", "8", "--repeat", "1")),
    "array_record": common.Case(array_record_main, _ARRAY_RECORD_DOC,
                                ("--size_mb", "4", "--rounds", "1", "--reads", "100")),
    "consumer_decode": common.Case(consumer_decode_main, _CONSUMER_DECODE_DOC, ()),
    "exif_upright": common.Case(exif_upright_main, _EXIF_UPRIGHT_DOC, ()),
    "near_duplicate_cost": common.Case(near_duplicate_cost_main, _NEAR_DUPLICATE_COST_DOC,
                                       ("--small_mb", "2", "--large_mb", "4", "--rounds", "1")),
    "duplicate_check": common.Case(duplicate_check_main, _DUPLICATE_CHECK_DOC, ("--images", "300", "--rounds", "1")),
}


if __name__ == "__main__":
    sys.exit(common.run_case(CASES, sys.argv[1:]))
