"""Verify job: check a shard set against its manifest, or check any TFRecord files.

Usage: ``python -m beam_jobs.verify_shards --output_dir out/flowers`` or ``--files 'somewhere/*.tfrecord'``.
What is checked, the report and the preview: docs/verify.md. Exits 0 when nothing is wrong, 1 when
something is, 2 on a bad flag or path.
"""

from __future__ import annotations

from beam_jobs.cli import loading

if __name__ == "__main__":  # a command: its modules load with the collector paused (cli/loading.py)
    loading.pause()

import beam_jobs.quiet_beam  # noqa: E402,F401  (first of Beam: imported without its BigQuery warning)
import dataclasses
import os
import posixpath
import sys
from typing import Any, Mapping, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_jobs.cli import values as opt
from transforms import beam_compat, worker_threads
from transforms.errors import UsageError
from transforms.storage.folders import file_above, local_write_problem
from transforms.storage.handback import check_handback, handback_folder, read_handed_back, remove_handback
from transforms.storage.listing import exact_file, is_folder, list_folder, match_files
from transforms.storage.paths import same_file
from transforms.storage.writing import write_file
from beam_jobs.cli.config import VerifyConfig
from transforms.shardset.manifest import DEAD_LETTERS_NAME, LABELS_NAME, MANIFEST_NAME, SHARDS_NAME, Manifest
from transforms.tfrecord.record_index import index_names, indexed_shards
from transforms.images.annotations import LABEL_MAP_NAME
from transforms.shardset.tfds_metadata import is_tfds_file
from beam_jobs.cli.harness import Job, run_job
from beam_jobs.cli.logs import run_as_command
from beam_jobs.cli.progress import manifest_totals, verify_progress
from transforms.progress.report import plural
from transforms.read_and_check import ReadAndCheckRecords, RecordChecks
from transforms.verify_steps import (MANIFEST, PROBLEMS, SHARDS, CheckAcrossRanges, ReadManifest, WritePreview,
                                     WriteReport)
from transforms.shardset.naming import SHARD_NAME_RE, join_path, split_of_shard
from transforms.verify.checks import Report
from transforms.verify.decoders import missing_decoders, parse_decoders
from transforms.verify.ranges import KEY_BUCKETS, RECORD_BYTES_GUESS, ShardFile, key_bucket_count


def _reading_plan(sizes: Sequence[int], cfg: VerifyConfig, options: PipelineOptions) -> dict:
    """``split_ranges`` and ``workers_note`` for shards of these sizes (workers chosen first)."""
    note = beam_compat.choose_local_workers(options, sum(sizes), worker_threads.usable_cores(),
                                            min_cores=beam_compat.VERIFY_MIN_CORES)
    return {"split_ranges": split_ranges_for(len(sizes), cfg, options), "workers_note": note}


def split_ranges_for(shards: int, cfg: VerifyConfig, options: PipelineOptions) -> bool:
    """Whether verify splits shards into byte ranges (read in parallel, the hash reading the file again):
    only when there are fewer shards than workers (``--direct_num_workers``, else ``--max_num_workers``,
    else ``SPLIT_BELOW_SHARDS``)."""
    workers = beam_compat.local_workers(options) or cfg.max_num_workers
    return shards < (workers or SPLIT_BELOW_SHARDS)


# Without a known worker count (a remote runner without --max_num_workers), shard sets of fewer
# shards than this are split into byte ranges.
SPLIT_BELOW_SHARDS = 16


def _pattern_shards(pattern: str) -> tuple[ShardFile, ...]:
    if is_folder(pattern):
        raise UsageError(f"--files {pattern} is a folder; give its files as a pattern, "
                         f"e.g. --files '{join_path(pattern.rstrip('/'), '*.tfrecord*')}'")
    metas = match_files([pattern])[0]
    paths = {m.path for m in metas}
    return tuple(ShardFile(m.path, m.size_in_bytes, split_of_shard(m.path))
                 for m in sorted(metas, key=lambda m: m.path)
                 # an index sidecar of a matched file is not a TFRecord file
                 if not any(shard in paths for shard in indexed_shards(m.path)))


def _set_files(folder: str, present: Mapping[str, tuple[str, int]]) -> list[str]:
    """Paths of the shard set's files: its companions (tfds's too), shard-named files and their ``.idx`` files."""
    names = {MANIFEST_NAME, SHARDS_NAME, LABELS_NAME, DEAD_LETTERS_NAME, LABEL_MAP_NAME}
    names.update(name for name in present if SHARD_NAME_RE.match(name) or is_tfds_file(name))
    paths = [join_path(folder, name) for name in sorted(names)]
    return paths + [index for path in paths for index in index_names(path)]


def _refuse_overwriting(flags: VerifyConfig, read: Sequence[str], why: str) -> None:
    """Raises ``UsageError`` for a --report or --preview path that names a file of the set (or the other output)."""
    outputs = [(flag, path) for flag, path in (("--report", flags.report), ("--preview", flags.preview))
               if path]
    for flag, path in outputs:
        if is_folder(path):
            raise UsageError(f"{flag} {path} is a folder; give a file path")
        below = file_above(path)
        if below:
            raise UsageError(f"{flag} {path} lies below {below}, which is a file, not a folder")
        problem = local_write_problem(path)
        if problem:
            raise UsageError(f"{flag} {path}: {problem}")
        for other in read:
            if same_file(path, other):
                raise UsageError(f"{flag} {path} would replace {other}, {why}; write it elsewhere")
    if len(outputs) == 2 and same_file(outputs[0][1], outputs[1][1]):
        raise UsageError(f"--report and --preview both name {flags.report}; give two paths")


def _pattern_folder(pattern: str) -> str:
    """The folder a ``--files`` pattern's files lie in (or below): its part before any wildcard."""
    fixed = pattern[:min((i for i, ch in enumerate(pattern) if ch in "*?["), default=len(pattern))]
    folder = posixpath.dirname(fixed) if "://" in fixed else os.path.dirname(fixed)
    return folder or "."


def make_config(cfg: VerifyConfig, options: PipelineOptions) -> VerifyConfig:
    """Checks the paths the flags name (``options``: how many workers read); returns ``cfg`` with what
    verify found before its pipeline. ``UsageError`` on a wrong flag or a missing path."""
    # Workers may share no disk with this process: the report comes back through storage, in a
    # folder of the run's own under --temp_location, else in the set's .staging (a --files run needs one).
    handback = handback_folder(cfg.folder or _pattern_folder(cfg.files), cfg.temp_location, cfg.JOB.name)
    cfg = dataclasses.replace(cfg, decoders=_decoders(cfg.decode_with), handback=handback,
                              report_path=handback.path("report.json"))
    if cfg.dataflow_dry_run:  # stays offline: gs:// would need credentials; the files are not matched
        return cfg
    shards = _pattern_shards(cfg.files) if cfg.files else ()
    if cfg.files:
        if not shards:
            raise UsageError(f"--files {cfg.files} matches no files")
        _refuse_overwriting(cfg, [p for s in shards for p in (s.path, *index_names(s.path))],
                            "which this run reads")
        sizes = [s.size for s in shards]
    else:
        folder = cfg.output_dir
        if exact_file(folder) is not None:
            raise UsageError(f"--output_dir {folder} is a file, not a shard set's folder; to check "
                             f"TFRecord files without a manifest, use --files {folder}")
        present = list_folder(folder)
        # The manifest itself is read in the pipeline; the files of the set are known by name.
        _refuse_overwriting(cfg, _set_files(folder, present), "part of the shard set being verified")
        if MANIFEST_NAME not in present:
            if not present and not is_folder(folder):
                raise UsageError(f"--output_dir {folder} does not exist")
            raise UsageError(f"{folder} is not a shard set: it has no {MANIFEST_NAME} (jobs write it "
                             "last, so a run may have failed or still be running); to check TFRecord "
                             f"files without one, use --files '{join_path(folder, '*.tfrecord*')}'")
        sizes = [size for name, (_, size) in present.items() if split_of_shard(name) is not None]
    check_handback(handback, cfg.JOB.name)  # once the paths named are known to be right
    return dataclasses.replace(cfg, shards=shards, **_reading_plan(sizes, cfg, options))


def _decoders(text: str | None) -> tuple[str, ...]:
    """The ``--decode_with`` decoders that are installed; one line on stderr for each that is not.
    ``UsageError`` when a name is unknown, or none of them is installed."""
    if text is None:
        return ()
    with opt.usage_error("", ValueError):
        names = parse_decoders(text)
    missing = missing_decoders(names)
    if len(missing) == len(names):
        raise UsageError("; ".join(missing))
    for line in missing:
        print(f"{VerifyConfig.JOB.name}: {line}; verifying without it", file=sys.stderr)
    return tuple(name for name in names if not missing_decoders([name]))


def build_pipeline(p: beam.Pipeline, cfg: VerifyConfig) -> None:
    """Wires the verify job into ``p``; the last steps write the report (and preview).

    A shard set's manifest is read in the pipeline, so the job graph does not grow with the shards.
    On the DirectRunner it runs at most five fused stages: reading the manifest and listing the
    shards (or creating them); handing the shards to the readers; reading and checking the records;
    the checks across ranges; writing the report. A preview adds two: choosing its samples, drawing it.
    """
    with_manifest = cfg.folder is not None
    if with_manifest:
        loaded = p | "ReadManifest" >> ReadManifest(cfg.folder)
        manifest, shards, problems = loaded[MANIFEST], loaded[SHARDS], [loaded[PROBLEMS]]
        schema = beam.pvalue.AsSingleton(manifest | "FeatureSpec" >> beam.Map(lambda m: dict(m.feature_spec)),
                                          default_value=None)
        labels = beam.pvalue.AsSingleton(manifest | "Labels" >> beam.Map(lambda m: list(m.labels)),
                                          default_value=None)
        buckets = beam.pvalue.AsSingleton(  # more as the records grow
            manifest | "KeyBuckets" >> beam.Map(lambda m: key_bucket_count(m.records)), default_value=KEY_BUCKETS)
    else:
        shards, problems = p | "ShardFiles" >> beam.Create(list(cfg.shards)), []
        schema = labels = None
        # No manifest counts the records: their number is guessed from the files' size.
        buckets = key_bucket_count(sum(s.size for s in cfg.shards) // RECORD_BYTES_GUESS)
    # Records are checked as they are read, one tally per byte range; the reader of a shard's
    # first range also hashes listed shards from the bytes it reads and checks the .idx.
    checks = RecordChecks(decode_images=cfg.decode_images, preview=cfg.preview is not None, hash_files=with_manifest,
                          max_record_bytes=cfg.max_record_bytes, index_required=with_manifest,
                          decode_with=tuple(cfg.decoders))
    tallies = shards | "ReadAndCheckRecords" >> ReadAndCheckRecords(
        schema, labels, checks, split_ranges=cfg.split_ranges)  # RangeTally
    problems.append(tallies | "RangeProblems" >> beam.FlatMap(lambda tally: tally.problems))
    problems.append(tallies | "CheckAcrossRanges" >> CheckAcrossRanges(compare_counts=with_manifest,
                                                                            buckets=buckets))
    sizes = shards | "ShardSizes" >> beam.Map(lambda s: s.size)
    _ = (tallies, sizes, *problems) | "WriteReport" >> WriteReport(cfg.report_path)
    if cfg.preview:
        rows = beam.pvalue.AsList(shards | "SizeRows" >> beam.Map(  # (split, file name, bytes)
            lambda s: (s.split or "(no split)", posixpath.basename(s.path), s.size)))
        if with_manifest:
            details = manifest | "PreviewDetails" >> beam.Map(_preview_details, rows, cfg.target)
        else:
            details = (p
                       | "PreviewTitle" >> beam.Create([f"{cfg.target}: {plural(len(cfg.shards), 'file')}"])
                       | "PreviewDetails" >> beam.Map(lambda title, sizes: (title, sizes, None), rows))
        samples = tallies | "Samples" >> beam.FlatMap(  # (label, PreviewSample)
            lambda tally: [(sample.label, sample) for sample in tally.samples])
        _ = (samples, details) | "WritePreview" >> WritePreview(cfg.preview)


def _preview_details(manifest: Manifest, sizes: list[tuple[str, str, int]], target: str):
    """(title, shard sizes, class counts) of the preview of a shard set."""
    title = (f"{target}: {plural(manifest.records, 'record')} in {plural(manifest.num_shards, 'shard')}, "
             f"{plural(len(manifest.labels), 'class')}, splits {', '.join(sorted(manifest.splits))} (manifest)")
    counts: dict[int, int] = {}
    for split in manifest.splits.values():
        for label, count in split.label_counts().items():
            if label.isdigit():
                counts[int(label)] = counts.get(int(label), 0) + count
    return title, sizes, counts


def _outcome(result: Any, cfg: VerifyConfig, seconds: float) -> tuple[str, int]:
    """The summary of the report the pipeline wrote (written to ``--report`` if asked; ``ShardsError`` when
    it is missing: a worker that could not write it), and 0 when nothing is wrong, else 1."""
    try:
        data = read_handed_back(cfg.report_path, "verify report")
    finally:
        remove_handback(cfg.handback)  # once read
    if cfg.keep_report:
        write_file(cfg.report, data)
    report = Report.loads(data)
    text = report.summary(cfg.target, listed_records=manifest_totals(cfg.folder)[0] if cfg.folder else None)
    if cfg.preview:
        text += f"\npreview: {cfg.preview}"
    return text, 0 if report.ok else 1


HELP = VerifyConfig.JOB  # its flags and help: beam_jobs/cli/jobs.py


def run(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Runs the verify job; returns the exit status (0 no problem, 1 problems, 2 bad flags)."""
    job = Job(VerifyConfig, make_config, build_pipeline, verify_progress, _outcome,
              positional_hint="give a shard set as --output_dir or a pattern as --files")
    return run_job(job, argv, prog)


if __name__ == "__main__":
    run_as_command(run, "beam_jobs.verify_shards")
