"""Reshard job: regenerate any set of TFRecord files as balanced shards.

Usage::

    python -m beam_jobs.reshard --input 'old/*' --output_dir new/ [--split NAME] \\
        [--shard_size_mb 150] [--num_shards N] [--compression none|gzip|zlib] [--seed 0] \\
        [--skip_corrupt] [--max_bad_fraction 0.01] [--max_record_mb 512] [Beam options]

Input files are read with the project's splittable source (one big file is read
by many workers), records are planned exactly as the build job plans them and
written with the same sink: same names, ``.idx`` sidecars, manifest, atomic
publishing and determinism. Records are copied byte for byte.

Each input file keeps its split, the one its shard name states
(``{split}-NNNNN-of-NNNNN.tfrecord``), so a train+validation set stays one;
``--split NAME`` puts every record in NAME instead, and is required when a
file's name states no split.
"""

from __future__ import annotations

import beam_jobs.quiet_beam  # noqa: F401  (first: Beam imported without its BigQuery warning)
import functools
import sys
from dataclasses import dataclass
from typing import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_jobs.cli import flags as opt
from transforms import beam_compat, worker_threads
from transforms.errors import PlanError, ShardsError, UsageError
from beam_jobs.cli import jobs
from beam_jobs.cli.flags import ReshardOptions, ShardingOptions, recorded_options
from transforms.plan_shards import ASSIGNED, TOTALS, PlanShards
from transforms.shardset.planning import MIB
from transforms.shardset.naming import check_split_name
from transforms.reshard_steps import (CollectRecordFacts, MatchInputFiles, ToRecordItems,
                                      damaged_span, input_files, item_order, item_size, item_split,
                                      RecordCopy)
from transforms.shardset.record_items import RecordItem, input_split
from beam_jobs.cli.harness import dataflow_dry_run, run_publishing_job
from beam_jobs.cli.progress import reshard_progress
from transforms.storage.output_folder import check_replaced_splits
from transforms.shard_sink import PublishShards, WriteShards
from transforms.shardset.ownership import PublishPolicy
from transforms.tfrecord_source import ERRORS, RECORDS, ReadAllFromTFRecords
from transforms.shardset.tfds_metadata import dataset_name, tfds_files
from transforms.storage.listing import FileMetadata

@dataclass(frozen=True)
class ReshardConfig:
    """Checked settings of one reshard run."""

    inputs: tuple[str, ...]
    files: tuple[FileMetadata, ...]
    output_dir: str
    split: str | None
    target_bytes: int
    num_shards: int | None
    compression: str
    input_compression: str
    seed: int
    skip_corrupt: bool
    max_bad_fraction: float
    max_record_bytes: int
    options: dict
    policy: PublishPolicy
    workers_note: str | None = None  # what choose_local_workers chose, to print
    tfds_name: str = ""  # --name, or the output folder's name (not in the manifest: it moves with the folder)


def make_config(options: PipelineOptions) -> ReshardConfig:
    """Checks the flags and returns the run's settings.

    Raises:
        UsageError: A flag is missing or wrong; the message says what to fix.
    """
    shared, flags = options.view_as(ShardingOptions), options.view_as(ReshardOptions)
    missing = HELP.missing(shared)
    if missing:
        raise UsageError(missing)
    try:
        if shared.split is not None:
            check_split_name(shared.split)
    except PlanError as err:
        raise UsageError(str(err)) from err
    # A Dataflow dry run stays offline: gs:// patterns would need credentials.
    dry_run = dataflow_dry_run(options)
    files = () if dry_run else input_files(shared.input)
    output = shared.output_dir.rstrip("/")
    target = opt.resolved_path(output or "/")
    for path in (list(shared.input) if dry_run else [f.path for f in files]):
        if opt.resolved_path(path.rsplit("/", 1)[0] or "/") == target:
            raise UsageError(f"--input {path} lies in --output_dir; reshard into another folder")
        if not dry_run:
            try:
                input_split(path, shared.split)
            except ShardsError as err:
                raise UsageError(f"--input {err}") from err
    if not dry_run and not shared.replace:  # each file's split is known: checked before any is read
        check_replaced_splits(shared.output_dir, shared.input,
                              lambda: {input_split(f.path, shared.split) for f in files})
    return ReshardConfig(
        inputs=tuple(shared.input), files=files, output_dir=output or "/", split=shared.split,
        target_bytes=int(shared.shard_size_mb * MIB), num_shards=shared.num_shards,
        compression=shared.compression, input_compression=flags.input_compression,
        seed=shared.seed, skip_corrupt=flags.skip_corrupt, max_bad_fraction=shared.max_bad_fraction,
        max_record_bytes=opt.max_record_bytes(options.view_as(opt.RecordReadingOptions).max_record_mb),
        options=recorded_options(options, HELP),
        tfds_name=shared.name or dataset_name(output or "/"),
        policy=opt.publish_policy(shared),
        workers_note=beam_compat.choose_local_workers(
            options, None if dry_run else sum(f.size_in_bytes for f in files), worker_threads.usable_cores()))


def build_pipeline(p: beam.Pipeline, cfg: ReshardConfig):
    """Wires the reshard job into ``p``; returns the PCollection holding the manifest."""
    # The files are matched again inside the pipeline, so the job graph holds only the
    # patterns, whatever their number (make_config matched them to check them; a dry run
    # stays offline).
    read = (p
            | "MatchInputs" >> MatchInputFiles(cfg.inputs)  # FileMetadata
            | "Read" >> ReadAllFromTFRecords(
                with_offsets=True, compression=cfg.input_compression,
                errors="output" if cfg.skip_corrupt else "raise",
                max_record_bytes=cfg.max_record_bytes))  # (path, offset, record)
    if cfg.skip_corrupt:
        records, errors = read[RECORDS], read[ERRORS]
        dead = errors | "DamagedSpans" >> beam.Map(damaged_span)  # DeadLetter
    else:
        records, dead = read, None  # no dead letters, and no step for them
    items = records | "Items" >> ToRecordItems(  # records go to run files: no bytes are grouped
        cfg.seed, cfg.split, staging=(cfg.output_dir, cfg.policy.run_id))  # RecordItem
    # One combine: records read (and damaged stretches), class names and feature spec.
    facts = items | "CollectFacts" >> CollectRecordFacts(dead)  # one RecordFacts
    inputs = facts | "InputCount" >> beam.Map(lambda f: f.inputs)
    labels = facts | "ClassNames" >> beam.Map(lambda f: list(f.class_names))
    spec = facts | "FeatureSpec" >> beam.Map(lambda f: dict(f.feature_spec))
    plan = (items
            | "ForPlanning" >> beam.Map(RecordItem.for_planning)  # planning groups hold no more
            | "Plan" >> PlanShards(split_of=item_split, order_of=item_order, size_of=item_size,
                                   target_bytes=cfg.target_bytes, num_shards=cfg.num_shards))
    results = plan[ASSIGNED] | "Write" >> WriteShards(cfg.output_dir, cfg.compression,
                                                        RecordCopy(), item_order, cfg.policy.run_id,
                                                        plan[TOTALS])
    fields = {"created_by": "reshard", "options": cfg.options, "seed": cfg.seed}
    return p | "Publish" >> PublishShards(
        cfg.output_dir, cfg.compression, fields, cfg.max_bad_fraction, cfg.policy, results=results,
        totals=plan[TOTALS], dead_letters=() if dead is None else dead, labels=labels, inputs=inputs,
        feature_spec=spec, sidecar_files=functools.partial(tfds_files, name=cfg.tfds_name))


HELP = jobs.RESHARD  # its flags, help and manifest options: beam_jobs/cli/jobs.py


def run(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Runs the reshard job; returns the exit status (0 ok, 1 failed, 2 bad flags)."""
    return run_publishing_job("reshard", argv, make_config, build_pipeline, spec=HELP, prog=prog,
                              progress=reshard_progress)


if __name__ == "__main__":
    from beam_jobs.cli.logs import set_up_command

    set_up_command(sys.argv[1:])
    sys.exit(run(sys.argv[1:], prog="python -m beam_jobs.reshard"))
