"""Nothing big at a billion items: what grows with dead letters, copies and verify's keys.

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

Run: ``python -m benchmarks.billion [--dead 20000,200000] [--copies 10000,100000]
[--records 100000000] [--compare /path/to/other/checkout] [--workdir DIR]``.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import shutil
import sys
import tempfile

from benchmarks.measure import checkout_env, run_measured

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
    child = [sys.executable, "-m", "benchmarks.billion", "--build_child", peaks_path, "--"]
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
            done = subprocess.run([sys.executable, "-m", "benchmarks.billion", "--publish_child",
                                   f"{count},{way},{folder}"], capture_output=True, text=True,
                                  env=checkout_env(), cwd=work)
            if done.returncode != 0:
                raise SystemExit(done.stderr[-3000:])
            rows.append({"way": way, **json.loads(done.stdout.strip().splitlines()[-1])})
            shutil.rmtree(folder, ignore_errors=True)
    return {"rows": rows, **{f"{way}_ratio": round(
        [r for r in rows if r["way"] == way][-1]["peak_rss_mib"]
        / [r for r in rows if r["way"] == way][0]["peak_rss_mib"], 3) for way in ("parts", "list")}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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


if __name__ == "__main__":
    main()
