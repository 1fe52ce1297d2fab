"""Reshard job: regenerate any set of TFRecord (or ArrayRecord) files as balanced shards.

Usage: ``python -m beam_jobs.reshard --input 'old/*' --output_dir new/ [--split NAME]`` (``--help``: every flag).

Records are read with the splittable source, planned as the build plans them and written, byte
for byte, by the same sink; each input file keeps the split its shard name states unless
``--split NAME`` is given. See docs/verify.md, "Reshard".
"""

from __future__ import annotations

from beam_jobs.cli import loading

if __name__ == "__main__":  # a command: its modules load with the collector paused (cli/loading.py)
    loading.pause()

import beam_jobs.quiet_beam  # noqa: E402,F401  (first of Beam: imported without its BigQuery warning)
import dataclasses
import functools
from operator import attrgetter
from typing import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_jobs.cli import values as opt
from transforms import beam_compat, worker_threads
from transforms.errors import ShardsError, UsageError
from beam_jobs.cli.config import ReshardConfig
from transforms.plan_shards import ASSIGNED, TOTALS, PlanShards
from transforms.reshard_steps import (CollectRecordFacts, MatchInputFiles, ReadAllFromArrayRecords, ToRecordItems,
                                      damaged_span, input_files, is_array_record, RecordCopy)
from transforms.arrayrecord.shard_file import missing_module
from transforms.shardset.record_items import RecordItem, input_split
from beam_jobs.cli.harness import PublishingJob, run_job
from beam_jobs.cli.logs import run_as_command
from beam_jobs.cli.progress import reshard_progress
from transforms.shardset.replacing import kept_format_problem
from transforms.storage.output_folder import check_replaced_splits, published_manifest
from transforms.shard_sink import PublishInputs, PublishShards, ShardOutput, ShardRecords, WriteShards
from transforms.tfrecord_source import ERRORS, RECORDS, ReadAllFromTFRecords
from transforms.shardset.tfds_metadata import tfds_files


def make_config(cfg: ReshardConfig, options: PipelineOptions) -> ReshardConfig:
    """Matches and checks the input files; returns ``cfg`` with them (``files``) and its publishing policy.
    Raises ``UsageError`` on a wrong input."""
    # A Dataflow dry run stays offline: gs:// patterns would need credentials.
    dry_run = cfg.dataflow_dry_run
    files = () if dry_run else input_files(cfg.input)
    target = opt.resolved_path(cfg.output_dir)
    splits = set()  # each file's split is known: checked before any is read
    for path in (list(cfg.input) if dry_run else [f.path for f in files]):
        if opt.resolved_path(path.rsplit("/", 1)[0] or "/") == target:
            raise UsageError(f"--input {path} lies in --output_dir; reshard into another folder")
        if not dry_run:
            problem = missing_module() if is_array_record(path) else None
            if problem:
                raise UsageError(f"--input {path} is an ArrayRecord file: {problem}")
            with opt.usage_error("--input ", ShardsError):
                splits.add(input_split(path, cfg.split))
    if not dry_run:
        if not cfg.replace:
            check_replaced_splits(cfg.output_dir, cfg.input, lambda: splits)
        problem = kept_format_problem(cfg.output_dir, published_manifest(cfg.output_dir), splits, cfg.format,
                                      cfg.drop_other_splits)  # a set has one format
        if problem:
            raise UsageError(problem)
    note = beam_compat.choose_local_workers(options, None if dry_run else sum(f.size_in_bytes for f in files),
                                            worker_threads.usable_cores())
    return dataclasses.replace(cfg, files=files, policy=cfg.new_policy(), workers_note=note)


def _read_inputs(p: beam.Pipeline, cfg: ReshardConfig):
    """The input files' records, ``(path, offset, record)`` (an ArrayRecord file's: by record number), and
    with ``--skip_corrupt`` the damaged stretches (``RecordError``), else None. Only a run given both
    formats has the step that merges their records; a dry run goes by the patterns' names."""
    errors = "output" if cfg.skip_corrupt else "raise"
    kinds = {is_array_record(path) for path in ([f.path for f in cfg.files] or cfg.input)}
    files = p | "MatchInputs" >> MatchInputFiles(cfg.input)  # FileMetadata
    if kinds == {True, False}:
        parts = files | "ByFormat" >> beam.Partition(lambda meta, _: int(is_array_record(meta.path)), 2)
        tfrecord_files, array_record_files = parts[0], parts[1]
    else:
        tfrecord_files, array_record_files = (None, files) if True in kinds else (files, None)
    reads = []
    if tfrecord_files is not None:
        reads.append(tfrecord_files | "Read" >> ReadAllFromTFRecords(
            with_offsets=True, compression=cfg.input_compression, errors=errors,
            max_record_bytes=cfg.max_record_bytes))  # (path, offset, record)
    if array_record_files is not None:
        reads.append(array_record_files
                     | "ReadArrayRecords" >> ReadAllFromArrayRecords(errors))  # (path, number, record)
    if not cfg.skip_corrupt:
        return (reads[0] if len(reads) == 1 else tuple(reads) | "Records" >> beam.Flatten()), None
    if len(reads) == 1:
        return reads[0][RECORDS], reads[0][ERRORS]
    return (tuple(read[RECORDS] for read in reads) | "Records" >> beam.Flatten(),
            tuple(read[ERRORS] for read in reads) | "Errors" >> beam.Flatten())


def build_pipeline(p: beam.Pipeline, cfg: ReshardConfig):
    """Wires the reshard job into ``p``; returns the PCollection holding the manifest."""
    # The files are matched again inside the pipeline, so the job graph holds only the patterns, whatever their
    # number (make_config matched them to check them; a dry run stays offline).
    records, errors = _read_inputs(p, cfg)  # (path, offset or record number, record); RecordError
    dead = None if errors is None else errors | "DamagedSpans" >> beam.Map(damaged_span)  # DeadLetter
    items = records | "Items" >> ToRecordItems(  # records go to run files: no bytes are grouped
        cfg.seed, cfg.split, staging=(cfg.output_dir, cfg.policy.run_id))  # RecordItem
    # One combine: records read (and damaged stretches), class names and feature spec.
    facts = items | "CollectFacts" >> CollectRecordFacts(dead)  # one RecordFacts
    inputs = facts | "InputCount" >> beam.Map(lambda f: f.inputs)
    labels = facts | "ClassNames" >> beam.Map(lambda f: list(f.class_names))
    spec = facts | "FeatureSpec" >> beam.Map(lambda f: dict(f.feature_spec))
    plan = (items
            | "ForPlanning" >> beam.Map(RecordItem.for_planning)  # planning groups hold no more
            | "Plan" >> PlanShards(split_of=attrgetter("split"), order_of=RecordItem.sort_key,
                                   size_of=attrgetter("size"), target_bytes=cfg.target_bytes,
                                   num_shards=cfg.num_shards))
    output = ShardOutput(cfg.output_dir, cfg.compression, cfg.format, cfg.shard_sha256)
    results = plan[ASSIGNED] | "Write" >> WriteShards(output, ShardRecords(RecordCopy(), RecordItem.sort_key),
                                                        cfg.policy.run_id, plan[TOTALS])
    fields = {"created_by": "reshard", "options": cfg.recorded, "seed": cfg.seed, "file_format": cfg.format}
    return p | "Publish" >> PublishShards(
        output, cfg.policy, PublishInputs(results, plan[TOTALS], () if dead is None else dead, labels, inputs, spec),
        fields, max_bad_fraction=cfg.max_bad_fraction, sidecars=functools.partial(tfds_files, name=cfg.tfds_name))

HELP = ReshardConfig.JOB  # its flags, help and manifest options: beam_jobs/cli/jobs.py


def run(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Runs the reshard job; returns the exit status (0 ok, 1 failed, 2 bad flags)."""
    return run_job(PublishingJob(ReshardConfig, make_config, build_pipeline, reshard_progress), argv, prog)


if __name__ == "__main__":
    run_as_command(run, "beam_jobs.reshard")
