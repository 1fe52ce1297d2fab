"""Benchmarks of the build and verify jobs against the baselines a user would write.

    python benchmarks/run.py [--size_mb 520] [--quick] [--repeat 3]

Generates (once, cached in ``benchmarks/.cache/``) a dataset of photo JPEGs in
class folders (``benchmarks/photos.py``), then runs every case as its own
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

from __future__ import annotations

import argparse
import datetime
import glob
import hashlib
import json
import os
import shutil
import statistics
import sys
from dataclasses import dataclass, field
from typing import Callable

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks.measure import Measurement, machine, run_measured  # noqa: E402
from benchmarks.photos import CACHE, Dataset, dataset  # noqa: E402

__all__ = ["main", "marginal_rows"]

_MIB = 1 << 20
_IN_MEMORY = ["--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
_TWO_THREADS = ["--direct_num_workers", "2", "--direct_running_mode", "multi_threading"]
_TWO_PROCESSES = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]
_MODES = {"1 proc": _IN_MEMORY, "2 threads": _TWO_THREADS, "2 procs": _TWO_PROCESSES}
_SIZES = ("half", "full")
_DEFAULT = "default"  # the build job run with no --validate flag
_BEAM_BUILD = "Beam Create | Map(tf.train.Example) | WriteToTFRecord"  # the plain user pipeline
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
    from transforms.images.codec import VALIDATE_LEVELS

    default = BUILD_FLAGS["validate"].default
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
                "-m", "benchmarks.cases", "beam_build", "--input", ds.root, "--output_dir", t,
                "--num_shards", str(num_shards)] + f,
            target, lambda: ds.bytes, ds.images, size))
    processes = os.cpu_count() or 1
    target = os.path.join(out, f"pool-{size}")
    cases.append(Case(
        f"multiprocessing.Pool loop, {processes} procs", "build",
        lambda: _python() + ["-m", "benchmarks.cases", "pool_build", "--input", ds.root,
                             "--output_dir", target, "--processes", str(processes)],
        target, lambda: ds.bytes, ds.images, size))
    if with_tf:
        target = os.path.join(out, f"tf-loop-{size}")
        cases.append(Case(
            "tf.io.TFRecordWriter loop, 1 proc", "build",
            lambda: _python() + ["-m", "benchmarks.cases", "tf_build", "--input", ds.root,
                                 "--output_dir", target, "--num_shards", str(num_shards)],
            target, lambda: ds.bytes, ds.images, size))
    target = os.path.join(out, f"floor-{size}")
    cases.append(Case(
        "floor: read + frame, 1 proc", "build",
        lambda: _python() + ["-m", "benchmarks.cases", "floor", "--input", ds.root,
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
            lambda f=flags: _python() + ["-m", "benchmarks.cases", "beam_read", "--pattern",
                                         pattern] + f,
            None, shard_bytes, records, size))
    if with_tf:
        cases.append(Case(
            "tf.data + parse_example", "verify",
            lambda: _python() + ["-m", "benchmarks.cases", "tf_read", "--pattern", pattern],
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
                lambda: _python() + ["-m", "benchmarks.cases", "plan", "--items", str(items),
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    command = "python benchmarks/run.py " + " ".join(sys.argv[1:] if argv is None else argv)

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


if __name__ == "__main__":
    sys.exit(main())
