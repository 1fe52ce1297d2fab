"""The jobs' options classes, made from the flags declared in ``beam_jobs/cli/jobs.py``.

Beam parses every direct subclass of ``PipelineOptions`` with one argparse
parser, so two jobs cannot each define ``--input``: the flags they share are
one class (``ShardingOptions``), and each job's own options class adds only its
own flags. The values' parsers are in ``beam_jobs/cli/values.py`` (imported
here too, as before).
"""

from __future__ import annotations

import beam_jobs.quiet_beam  # noqa: F401  (first: Beam imported without its BigQuery warning)
import uuid

from apache_beam.options.pipeline_options import PipelineOptions

from beam_jobs.cli import jobs
from beam_jobs.cli.declared import FlagSet, Job
from beam_jobs.cli.values import (DEFAULT_MAX_BAD_FRACTION, LOG_LEVELS, MAX_SHARD_MB, MAX_SIDE,  # noqa: F401
                                  MIN_SHARD_MB, WILDCARDS, add_max_record_mb, fraction, folder_path,
                                  input_path, max_record_bytes, non_negative_int, one_line_errors, overlap_problem,
                                  parse_size, positive_float, positive_int, record_size_mb, resolved_path, seed,
                                  shard_size_mb, tfds_name, wildcard_problem)
from transforms.shardset.ownership import PublishPolicy

__all__ = ["one_line_errors", "parse_size", "positive_float", "positive_int", "non_negative_int",
           "fraction", "input_path", "folder_path", "wildcard_problem", "WILDCARDS", "ShardingOptions",
           "shard_size_mb", "seed", "publish_policy", "resolved_path", "overlap_problem", "MIN_SHARD_MB",
           "MAX_SHARD_MB", "MAX_SIDE", "RunOptions", "LOG_LEVELS", "record_size_mb", "add_max_record_mb",
           "max_record_bytes", "RecordReadingOptions", "BuildOptions", "PlanOptions", "ReshardOptions",
           "VerifyOptions", "recorded_options", "DEFAULT_MAX_BAD_FRACTION", "tfds_name"]


def _declared(flags: FlagSet) -> classmethod:
    """An options class's ``_add_argparse_args``: adds the declared ``flags`` to Beam's parser."""
    return classmethod(lambda cls, parser: flags._add_argparse_args(parser))


# Each options class parses one declared flag set (beam_jobs/cli/jobs.py). They live here, in one
# module, so that running a job module as a script never defines one twice (Beam's parser refuses
# a flag defined twice).
class ShardingOptions(PipelineOptions):
    """Inputs, output folder and shard layout, common to build, reshard and verify (``jobs.SHARED``)."""

    _add_argparse_args = _declared(jobs.SHARED)


class RecordReadingOptions(PipelineOptions):
    """How the jobs that read TFRecord files (reshard, verify) bound a record (``jobs.RECORD_READING``)."""

    _add_argparse_args = _declared(jobs.RECORD_READING)


class RunOptions(PipelineOptions):
    """How a job talks to the person running it: logging, tracebacks, progress (``jobs.RUN``)."""

    _add_argparse_args = _declared(jobs.RUN)


class BuildOptions(PipelineOptions):
    """Flags of the build job (``jobs.BUILD_FLAGS``); shared ones are in ``ShardingOptions``."""

    _add_argparse_args = _declared(jobs.BUILD_FLAGS)


class PlanOptions(PipelineOptions):
    """Flags of the plan job beyond the build's (``jobs.PLAN_FLAGS``)."""

    _add_argparse_args = _declared(jobs.PLAN_FLAGS)


class ReshardOptions(PipelineOptions):
    """Flags of the reshard job (``jobs.RESHARD_FLAGS``); shared ones are in ``ShardingOptions``."""

    _add_argparse_args = _declared(jobs.RESHARD_FLAGS)


class VerifyOptions(PipelineOptions):
    """Flags of the verify job (``jobs.VERIFY_FLAGS``; ``--output_dir`` is shared)."""

    _add_argparse_args = _declared(jobs.VERIFY_FLAGS)


_CLASSES = {cls.__name__: cls for cls in (ShardingOptions, RecordReadingOptions, RunOptions, BuildOptions,
                                          PlanOptions, ReshardOptions, VerifyOptions)}


def recorded_options(options: PipelineOptions, job: Job) -> dict:
    """The values of the flags of ``job`` that its manifest records (``Flag.recorded``), by name."""
    found = {}
    for flags in (job.shared_set, *job.options):
        view = options.view_as(_CLASSES[flags.name])
        for flag in flags.flags:
            if flag.recorded and (flags is not job.shared_set or flag.name in job.shared):
                found[flag.name] = getattr(view, flag.name)
    return {name: found[name] for name in job.recorded()}


def publish_policy(shared: ShardingOptions) -> PublishPolicy:
    """The publishing policy of one run, with a fresh run id."""
    return PublishPolicy(run_id=uuid.uuid4().hex, overwrite_unlisted=shared.overwrite_unlisted_shards,
                         drop_other_splits=shared.drop_other_splits, replace=shared.replace)
