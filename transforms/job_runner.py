"""How the build and reshard jobs run: flags, pipeline, exit status and summary.

Both jobs publish a shard set, so they share one ``run_publishing_job``: parse
and check the flags (one line and exit status 2 on a bad one), build and run
the pipeline (one line and exit status 1 on a failure), then print a summary
read back from the published manifest (or, for a Dataflow dry run, from the
translated graph).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TestOptions

from transforms.errors import UsageError
from transforms.manifest import MANIFEST_NAME, Manifest
from transforms.planning import MIB
from transforms.runner_setup import error_summary, local_runner, prepare_options, unknown_flags

__all__ = ["run_publishing_job", "dataflow_dry_run", "dry_run_summary", "summarize", "refuse_unknown_flags"]


def refuse_unknown_flags(options: PipelineOptions, argv: Sequence[str]) -> None:
    """Raises ``UsageError`` for a flag no options class defines (Beam would drop it)."""
    extra = unknown_flags(options, argv)
    if not extra:
        return
    if extra[0].startswith("-"):
        raise UsageError(f"unknown flag {extra[0]} (flags are spelt with underscores, "
                         "e.g. --shard_size_mb; see --help)")
    raise UsageError(f"unexpected argument {extra[0]!r}; every value needs its flag, e.g. --input PATH")


def dataflow_dry_run(options: PipelineOptions) -> bool:
    """True if DataflowRunner only translates the job (``--dry_run``, as Beam reads it)."""
    runner = (options.view_as(StandardOptions).runner or "").lower()
    return runner in ("dataflow", "dataflowrunner") and bool(options.view_as(TestOptions).dry_run)


def dry_run_summary(p: beam.Pipeline) -> str:
    """Returns what a dry run translated: the job graph's size and top-level steps."""
    graph = p.to_runner_api()
    transforms = graph.components.transforms
    steps = [transforms[t].unique_name for root in graph.root_transform_ids
             for t in transforms[root].subtransforms]
    return (f"Dry run: the job graph has {len(transforms)} transforms; nothing was submitted, "
            f"read or written\n  steps: {', '.join(steps)}")


def summarize(output_dir: str, seconds: float) -> str:
    """Returns the human summary of a published shard set, read from its manifest."""
    with FileSystems.open(FileSystems.join(output_dir, MANIFEST_NAME)) as fh:
        manifest = Manifest.loads(fh.read())
    lines = [f"Published {manifest.records} records to {output_dir} in {seconds:.1f} s "
             f"({manifest.dead_letters} dead letters; written + dead-lettered = "
             f"{manifest.records + manifest.dead_letters} inputs)"]
    for name, split in sorted(manifest.splits.items()):
        sizes = [s.bytes for s in split.shards]
        lines.append(f"  {name}: {split.records} records in {len(sizes)} shards, "
                     f"{split.bytes / MIB:.1f} MiB (shards {min(sizes) / MIB:.1f}-{max(sizes) / MIB:.1f} MiB)")
    lines.append(f"  labels: {len(manifest.labels)} classes; manifest: "
                 f"{FileSystems.join(output_dir, MANIFEST_NAME)}")
    return "\n".join(lines)


def run_publishing_job(name: str, argv: Sequence[str] | None,
                       make_config: Callable[[PipelineOptions], Any],
                       build_pipeline: Callable[[beam.Pipeline, Any], Any]) -> int:
    """Runs a job that publishes a shard set; returns its exit status.

    Args:
        name: Job name for messages (``build_shards``).
        argv: Command-line arguments (None for ``sys.argv[1:]``).
        make_config: Checks the options, returns the job's config (with an
            ``output_dir``), raises ``UsageError`` on a bad flag.
        build_pipeline: Wires the job into a pipeline.

    Returns:
        0 when published (or translated, for a dry run), 1 when the pipeline
        failed, 2 for a bad flag or input.
    """
    started = time.monotonic()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        options = prepare_options(PipelineOptions(argv))
        refuse_unknown_flags(options, argv)
        cfg = make_config(options)
    except UsageError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return 2
    try:
        p = beam.Pipeline(runner=local_runner(options), options=options)
        build_pipeline(p, cfg)
        p.run().wait_until_finish()
    except Exception as err:  # the runner wraps worker errors in its own types
        print(f"{name}: failed: {error_summary(err)}", file=sys.stderr)
        return 1
    if dataflow_dry_run(options):
        print(dry_run_summary(p))
    else:
        print(summarize(cfg.output_dir, time.monotonic() - started))
    return 0
