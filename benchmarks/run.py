"""Benchmarks of the build and verify jobs against the baselines a user would write.

    python benchmarks/run.py [--size_mb 1000] [--quick] [--repeat 3]

Generates (once, cached in ``benchmarks/.cache/``) a dataset of photo JPEGs in
class folders (``benchmarks/photos.py``), then runs every case as its own
subprocess, round after round (each round runs every case once, so that a
noisy moment of the machine hits all cases alike), and reports the median of
the rounds:

- start-up: ``import apache_beam``, ``import tensorflow`` and the build job on
  a few images: what every run pays before its first image;
- build: the build job on the DirectRunner (one process ``in_memory``; two
  workers ``multi_threading``; two workers ``multi_processing``), with
  ``--validate decode`` (the default) and ``--validate header``, vs Beam's
  ``WriteToTFRecord`` fed by an equivalent encode step (same three modes), a
  single-process ``tf.io.TFRecordWriter`` loop, and the floor (read each file,
  frame it, append it to one file);
- verify: the verify job vs Beam's ``ReadFromTFRecord`` + Example parsing (same
  three modes) and ``tf.data.TFRecordDataset`` + batched ``tf.io.parse_example``;
- memory: the build job's peak RSS on the full dataset vs its first quarter;
- plan: ``PlanShards`` of 1,281,167 synthetic items (ImageNet's train split)
  into 1024 shards on the DirectRunner.

Times are whole runs of a fresh process, start-up included. The TensorFlow
cases are skipped, with the reason printed, when TensorFlow is not installed.

Prints a table and writes ``benchmarks/results.json``. Figures that compare
are ratios of medians measured in the same run on the same data.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import shutil
import statistics
import sys
from dataclasses import dataclass, field
from typing import Callable

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks.measure import Measurement, run_measured  # noqa: E402
from benchmarks.photos import CACHE, Dataset, dataset, quarter_of  # noqa: E402

__all__ = ["main"]

_MIB = 1 << 20
_IN_MEMORY = ["--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
_TWO_THREADS = ["--direct_num_workers", "2", "--direct_running_mode", "multi_threading"]
_TWO_PROCESSES = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]
_MODES = {"1 proc": _IN_MEMORY, "2 threads": _TWO_THREADS, "2 procs": _TWO_PROCESSES}


@dataclass
class Case:
    """One command to measure, and how to read its throughput."""

    name: str
    group: str  # build, verify, memory, plan
    command: Callable[[], list[str]]
    output_dir: str | None = None  # emptied before each run
    input_bytes: Callable[[], int] = lambda: 0  # bytes the case reads (for MB/s)
    records: int | None = None  # records every run must report
    runs: list[Measurement] = field(default_factory=list)
    result: dict = field(default_factory=dict)  # the RESULT line, or facts of the output
    failures: list[str] = field(default_factory=list)  # last lines of each failed attempt

    def median(self, attribute: str) -> float:
        return statistics.median(getattr(run, attribute) for run in self.runs)


def _python() -> list[str]:
    return [sys.executable]


def _has_tensorflow() -> tuple[bool, str]:
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        return False, "TensorFlow is not installed (pip install -e '.[bench]' installs it on x86-64)"
    return True, ""


def _shard_files(folder: str) -> list[str]:
    return sorted(glob.glob(os.path.join(folder, "*.tfrecord")))


def _build_cases(ds: Dataset, quarter: Dataset, out: str, num_shards: int,
                 with_tf: bool) -> list[Case]:
    cases = []

    def build_job(root: str, target: str, flags: list[str]) -> Callable[[], list[str]]:
        return lambda: _python() + ["-m", "beam_jobs.build_shards", "--input", root,
                                    "--output_dir", target, "--num_shards", str(num_shards)] + flags

    for mode, flags in _MODES.items():
        for validate in ("decode", "header"):
            target = os.path.join(out, f"build-{mode.replace(' ', '')}-{validate}")
            cases.append(Case(
                f"build job, {mode}, --validate {validate}", "build",
                build_job(ds.root, target, ["--validate", validate] + flags),
                target, lambda: ds.bytes, ds.images))
    for mode, flags in _MODES.items():
        target = os.path.join(out, f"beam-{mode.replace(' ', '')}")
        cases.append(Case(
            f"Beam WriteToTFRecord, {mode}", "build",
            lambda t=target, f=flags: _python() + [
                "-m", "benchmarks.cases", "beam_build", "--input", ds.root, "--output_dir", t,
                "--num_shards", str(num_shards)] + f,
            target, lambda: ds.bytes, ds.images))
    if with_tf:
        target = os.path.join(out, "tf-loop")
        cases.append(Case(
            "tf.io.TFRecordWriter loop, 1 proc", "build",
            lambda: _python() + ["-m", "benchmarks.cases", "tf_build", "--input", ds.root,
                                 "--output_dir", target, "--num_shards", str(num_shards)],
            target, lambda: ds.bytes, ds.images))
    target = os.path.join(out, "floor")
    cases.append(Case(
        "floor: read + frame, 1 proc", "build",
        lambda: _python() + ["-m", "benchmarks.cases", "floor", "--input", ds.root,
                             "--output_dir", target],
        target, lambda: ds.bytes, ds.images))
    for mode, flags in _MODES.items():
        target = os.path.join(out, f"quarter-{mode.replace(' ', '')}")
        cases.append(Case(
            f"build job, {mode}, quarter dataset", "memory", build_job(quarter.root, target, flags),
            target, lambda: quarter.bytes, quarter.images))
    return cases


def _verify_cases(shards: str, records: int, with_tf: bool) -> list[Case]:
    size = lambda: sum(os.path.getsize(f) for f in _shard_files(shards))  # noqa: E731
    pattern = os.path.join(shards, "*.tfrecord")
    cases = []
    for mode, flags in _MODES.items():
        cases.append(Case(
            f"verify job, {mode}", "verify",
            lambda f=flags: _python() + ["-m", "beam_jobs.verify_shards", "--output_dir", shards] + f,
            None, size, records))
    for mode, flags in _MODES.items():
        cases.append(Case(
            f"Beam ReadFromTFRecord + parse, {mode}", "verify",
            lambda f=flags: _python() + ["-m", "benchmarks.cases", "beam_read", "--pattern",
                                         pattern] + f,
            None, size, records))
    if with_tf:
        cases.append(Case(
            "tf.data + parse_example", "verify",
            lambda: _python() + ["-m", "benchmarks.cases", "tf_read", "--pattern", pattern],
            None, size, records))
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


def _output_facts(folder: str) -> dict:
    sizes = [os.path.getsize(f) for f in _shard_files(folder)]
    facts = {"shards": len(sizes), "shard_bytes": sum(sizes)}
    if len(sizes) > 1:
        facts["balance"] = max(sizes) / min(sizes) if min(sizes) else float("inf")
    manifest = os.path.join(folder, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as fh:
            data = json.load(fh)
        facts["records"] = sum(s["records"] for s in data["splits"].values())
        facts["shard_sha256"] = [e["sha256"] for s in sorted(data["splits"])
                                 for e in data["splits"][s]["shards"]]
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
    print(f"  {case.name:48s} {measured.seconds:7.1f} s  {measured.cpu_seconds:7.1f} s CPU  "
          f"{measured.rss_tree / _MIB:6.0f} MiB tree  {measured.rss_process / _MIB:6.0f} MiB proc",
          flush=True)


def _row(case: Case) -> dict:
    seconds = case.median("seconds")
    row = {
        "name": case.name, "group": case.group, "runs": len(case.runs),
        "seconds": round(seconds, 2),
        "seconds_each": [round(r.seconds, 2) for r in case.runs],
        "cpu_seconds": round(case.median("cpu_seconds"), 2),
        "rss_tree_mib": round(case.median("rss_tree") / _MIB, 1),
        "rss_process_mib": round(case.median("rss_process") / _MIB, 1),
        "rss_tree_mib_each": [round(r.rss_tree / _MIB, 1) for r in case.runs],
    }
    if case.input_bytes():
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


def _targets(rows: dict[str, dict], with_tf: bool, plan_items: int) -> list[dict]:
    """The targets, from the rows (by name) of one run; speed ratios are of median wall times."""
    targets = []

    def add(what: str, value: float, bound: float, higher_is_better: bool, unit: str = "x") -> None:
        met = value >= bound if higher_is_better else value <= bound
        targets.append({"target": what, "value": round(value, 3), "bound": bound,
                        "at_least": higher_is_better, "unit": unit, "met": met})

    def faster(ours: str, baseline: str) -> float:
        return rows[baseline]["seconds"] / rows[ours]["seconds"]

    for mode in _MODES:
        for validate in ("decode", "header"):
            ours = f"build job, {mode}, --validate {validate}"
            add(f"build ({mode}, --validate {validate}) vs Beam WriteToTFRecord ({mode})",
                faster(ours, f"Beam WriteToTFRecord, {mode}"), 2.0, True)
            if with_tf:
                add(f"build ({mode}, --validate {validate}) vs tf.io loop",
                    faster(ours, "tf.io.TFRecordWriter loop, 1 proc"), 1.0, True)
    for mode in _MODES:
        ours = f"verify job, {mode}"
        add(f"verify ({mode}) vs Beam ReadFromTFRecord + parse ({mode})",
            faster(ours, f"Beam ReadFromTFRecord + parse, {mode}"), 2.5, True)
        if with_tf:
            add(f"verify ({mode}) vs tf.data + parse_example", faster(ours, "tf.data + parse_example"),
                1.0, True)
    for mode in _MODES:
        full = rows[f"build job, {mode}, --validate decode"]["rss_tree_mib"]
        quarter = rows[f"build job, {mode}, quarter dataset"]["rss_tree_mib"]
        add(f"build peak RSS, full / quarter dataset ({mode}, process tree)", full / quarter, 1.2,
            False)
    plan = rows[_plan_case(plan_items).name]
    add(f"plan {plan_items:,} items: seconds", plan["seconds"], 120, False, "s")
    add(f"plan {plan_items:,} items: peak RSS", plan["rss_tree_mib"] / 1024, 4, False, "GiB")
    return targets


def _table(rows: list[dict], targets: list[dict]) -> str:
    lines = ["| case | s (median) | CPU s | MB/s | images/s | peak RSS tree / largest proc (MiB) "
             "| shard balance |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(
            f"| {row['name']} | {row['seconds']:.1f} | {row['cpu_seconds']:.1f} | "
            f"{row.get('mb_per_s', '')} | "
            f"{row.get('images_per_s', '')} | {row['rss_tree_mib']:.0f} / {row['rss_process_mib']:.0f} | "
            f"{row.get('shard_balance', '')} |")
    lines += ["", "| target | value | bound | met |", "|---|---:|---:|---|"]
    for t in targets:
        sign = ">=" if t["at_least"] else "<="
        lines.append(f"| {t['target']} | {t['value']:.2f}{t['unit']} | {sign} {t['bound']}{t['unit']} | "
                     f"{'yes' if t['met'] else 'NO'} |")
    return "\n".join(lines)


def _machine() -> dict:
    import psutil

    cpu = platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        cpu = names[0] if names else cpu
    return {"cores": os.cpu_count(), "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "cpu": cpu, "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size_mb", type=float, default=None,
                        help="Dataset size in MB (default 1000; 150 with --quick).")
    parser.add_argument("--quick", action="store_true",
                        help="A small dataset, one round, a plan of 1/10 the items.")
    parser.add_argument("--repeat", type=int, default=None, help="Rounds (default 3; 1 with --quick).")
    parser.add_argument("--num_shards", type=int, default=8, help="Shards every build writes.")
    parser.add_argument("--plan_items", type=int, default=None,
                        help="Items of the plan case (default 1,281,167; 1/10 with --quick).")
    parser.add_argument("--output", default=os.path.join(_HERE, "results.json"))
    parser.add_argument("--report", metavar="RESULTS_JSON", default=None,
                        help="Only print the tables of an earlier run's results file.")
    args = parser.parse_args(argv)
    if args.report:
        with open(args.report) as fh:
            saved = json.load(fh)
        print(_table(saved["rows"], saved["targets"]))
        return 0
    size_mb = args.size_mb or (150 if args.quick else 1000)
    repeat = args.repeat or (1 if args.quick else 3)
    plan_items = args.plan_items or (128_117 if args.quick else 1_281_167)
    command = "python benchmarks/run.py " + " ".join(sys.argv[1:] if argv is None else argv)

    with_tf, why_not = _has_tensorflow()
    if not with_tf:
        print(f"skipped the TensorFlow cases: {why_not}")
    print(f"dataset: {size_mb:g} MB of photo JPEGs (generated once into {CACHE})", flush=True)
    ds = dataset(size_mb)
    quarter = quarter_of(ds)
    print(f"  {ds.images} images, {ds.bytes / 1e6:.1f} MB, mean {ds.bytes / ds.images / 1e3:.1f} KB, "
          f"{ds.pixels / ds.images / 1e3:.0f} kpixels; quarter: {quarter.images} images, "
          f"{quarter.bytes / 1e6:.1f} MB", flush=True)
    out = os.path.join(CACHE, "out")
    logs = os.path.join(CACHE, "logs")
    os.makedirs(logs, exist_ok=True)

    builds = _build_cases(ds, quarter, out, args.num_shards, with_tf)
    reference = builds[0].output_dir  # the build job's default run: what the readers read
    verifies = _verify_cases(reference, ds.images, with_tf)
    plan = _plan_case(plan_items)
    startup = _startup_cases(dataset(1), out, with_tf)
    cases = startup + builds + verifies + [plan]
    for round_ in range(repeat):
        print(f"round {round_ + 1} of {repeat}", flush=True)
        for case in cases:
            _run(case, logs)

    ours = [c for c in builds if c.name.startswith("build job") and c.group == "build"]
    identical = len({tuple(c.result["shard_sha256"]) for c in ours}) == 1
    rows = [_row(c) for c in cases]
    targets = _targets({row["name"]: row for row in rows}, with_tf, plan_items)
    table = _table(rows, targets)
    print()
    print(table)
    print(f"\nbuild job outputs byte-identical across modes and validation levels: {identical}")
    results = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command, "machine": _machine(),
        "dataset": {"root": os.path.relpath(ds.root, _ROOT), "images": ds.images, "bytes": ds.bytes,
                    "mean_bytes": round(ds.bytes / ds.images), "mean_pixels": round(ds.pixels / ds.images),
                    "quarter_images": quarter.images, "quarter_bytes": quarter.bytes},
        "rounds": repeat, "num_shards": args.num_shards, "plan_items": plan_items,
        "tensorflow": with_tf or why_not, "build_outputs_identical": identical,
        "rows": rows, "targets": targets,
    }
    with open(args.output, "w") as fh:
        json.dump(results, fh, indent=1)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
