"""The jobs' options classes, made from the flags declared in ``beam_jobs/cli/jobs.py``; a job reads its
flags from its config (``beam_jobs/cli/config.py``)."""

from __future__ import annotations

import beam_jobs.quiet_beam  # noqa: F401  (first: Beam imported without its BigQuery warning)
from apache_beam.options.pipeline_options import PipelineOptions

from beam_jobs.cli import jobs
from beam_jobs.cli.declared import FlagSet

__all__ = ["ShardingOptions", "RecordReadingOptions", "RunOptions", "ShardFormatOptions", "BuildOptions",
           "PlanOptions", "ReshardOptions", "VerifyOptions"]


def _options_class(flags: FlagSet, doc: str) -> type[PipelineOptions]:
    """A ``PipelineOptions`` subclass named for ``flags`` (``BuildOptions``) whose parser adds them."""
    return type(flags.name, (PipelineOptions,), {
        "__doc__": doc, "_add_argparse_args": classmethod(lambda cls, parser: flags._add_argparse_args(parser))})


# Each options class parses one declared flag set (beam_jobs/cli/jobs.py). They live here, in one module, so
# that running a job module as a script never defines one twice (Beam's parser refuses a flag defined twice).
ShardingOptions = _options_class(jobs.SHARED, "Inputs, output folder and shard layout, common to build, "
                                              "reshard and verify.")
RecordReadingOptions = _options_class(jobs.RECORD_READING, "How reshard and verify bound a record.")
RunOptions = _options_class(jobs.RUN, "How a job talks to the person running it: logging, tracebacks, progress.")
ShardFormatOptions = _options_class(jobs.SHARD_FORMAT, "The shards' file format, of the build and the reshard.")
BuildOptions = _options_class(jobs.BUILD_FLAGS, "Flags of the build job.")
PlanOptions = _options_class(jobs.PLAN_FLAGS, "Flags of the plan job beyond the build's.")
ReshardOptions = _options_class(jobs.RESHARD_FLAGS, "Flags of the reshard job.")
VerifyOptions = _options_class(jobs.VERIFY_FLAGS, "Flags of the verify job.")

