"""``--help`` of the jobs: every flag of a job, grouped, with its default and meaning.

Beam parses ``--help`` itself, with a parser that has none of a job's flags
yet, so a job answers ``--help`` before Beam sees the arguments. A job's help
is made from the same options classes Beam parses (``_add_argparse_args``), so
it cannot miss a flag; ``--help_beam`` prints Beam's own options.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from apache_beam.options.pipeline_options import PipelineOptions

from beam_jobs.cli.flags import RunOptions, ShardingOptions

__all__ = ["JobHelp", "wants_help", "wants_beam_help", "job_flags", "job_parser", "format_job_help",
           "format_beam_help", "SHARED_GROUPS", "BEAM_HELP_FLAG"]

BEAM_HELP_FLAG = "--help_beam"

# Groups of the flags every job may share (ShardingOptions, RunOptions).
SHARED_GROUPS = {
    "input": "inputs", "output_dir": "output", "compression": "output",
    "split": "labels and splits", "shard_size_mb": "sharding", "num_shards": "sharding",
    "seed": "sharding", "verbose": "messages", "log_level": "messages", "progress_interval": "messages",
    "overwrite_unlisted_shards": "output", "drop_other_splits": "output", "replace": "output",
    "max_bad_fraction": "failures", "name": "output",
}


@dataclass(frozen=True)
class JobHelp:
    """What a job's ``--help`` shows.

    Attributes:
        summary: One line saying what the job does.
        options: The job's own options classes.
        shared: Which ``ShardingOptions`` flags (dest names) the job uses.
        groups: dest -> group title, for the job's own flags (others: ``other``).
        group_order: Titles in the order they are shown; unlisted ones follow.
        required: dest names of flags without which the job refuses to run.
        epilog: Lines shown after the flags (examples).
        beam: Whether the job runs a Beam pipeline (and takes Beam's options).
    """

    summary: str
    options: tuple[type, ...] = ()
    shared: tuple[str, ...] = ()
    groups: Mapping[str, str] = field(default_factory=dict)
    group_order: tuple[str, ...] = ("inputs", "labels and splits", "images", "checks", "output",
                                    "sharding", "failures", "messages")
    required: tuple[str, ...] = ()
    epilog: str = ""
    beam: bool = True


def wants_help(argv: Sequence[str]) -> bool:
    """True if the arguments ask for the job's help."""
    return any(a in ("-h", "--help") for a in argv)


def wants_beam_help(argv: Sequence[str]) -> bool:
    """True if the arguments ask for Beam's options."""
    return BEAM_HELP_FLAG in argv


class _Recorder:
    """Stands in for a parser: records the ``add_argument`` calls of an options class."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))


def _dest(args: tuple, kwargs: dict) -> str:
    return kwargs.get("dest") or args[0].lstrip("-").replace("-", "_")


def job_flags(spec: JobHelp) -> list[tuple[tuple, dict]]:
    """Returns the ``add_argument`` calls of every flag the job takes (shared ones first)."""
    classes: list[type] = [ShardingOptions, *spec.options] if spec.beam else list(spec.options)
    calls = []
    for cls in classes:
        recorder = _Recorder()
        cls._add_argparse_args(recorder)
        calls.extend(c for c in recorder.calls if cls is not ShardingOptions or _dest(*c) in spec.shared)
    if spec.beam:
        recorder = _Recorder()
        RunOptions._add_argparse_args(recorder)
        calls.extend(recorder.calls)
    return calls


def _describe(kwargs: dict, required: bool) -> str:
    text = kwargs.get("help") or ""
    default = kwargs.get("default")
    if required:
        suffix = "(required)"
    elif kwargs.get("action") in ("store_true", "store_false") or default is None:
        suffix = ""
    elif isinstance(default, (list, tuple)):
        suffix = f"(default: {'x'.join(str(d) for d in default)})"
    else:
        suffix = f"(default: {default})"
    return " ".join(part for part in (text, suffix) if part).replace("%", "%%")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Wraps each line of a flag's help on its own: a help with a line per choice keeps them."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        lines: list[str] = []
        for line in text.splitlines():
            lines.extend(super()._split_lines(line, width) or [""])
        return lines


def job_parser(spec: JobHelp, prog: str) -> argparse.ArgumentParser:
    """Returns a parser holding every flag of the job in its group, for printing help."""
    parser = argparse.ArgumentParser(
        prog=prog, usage="%(prog)s [flags]", description=spec.summary, add_help=False, epilog=spec.epilog or None,
        formatter_class=_HelpFormatter)
    calls = job_flags(spec)
    titles = {_dest(*c): spec.groups.get(_dest(*c)) or SHARED_GROUPS.get(_dest(*c), "other") for c in calls}
    order = [t for t in spec.group_order if t in titles.values()]
    order += sorted({t for t in titles.values() if t not in order})
    groups = {title: parser.add_argument_group(title) for title in order}
    for args, kwargs in calls:
        dest = _dest(args, kwargs)
        shown = {k: v for k, v in kwargs.items() if k not in ("help", "type", "default")}
        shown["help"] = _describe(kwargs, dest in spec.required)
        groups[titles[dest]].add_argument(*args, **shown)
    general = parser.add_argument_group("help")
    general.add_argument("-h", "--help", action="store_true", help="Show this help and exit.")
    if spec.beam:
        general.add_argument(BEAM_HELP_FLAG, action="store_true",
                             help="Show Beam's own options (--runner, --direct_num_workers, "
                                  "cloud options), which every job takes as well.")
    return parser


def format_job_help(spec: JobHelp, prog: str) -> str:
    """Returns the help text of a job."""
    return job_parser(spec, prog).format_help()


def format_beam_help(prog: str) -> str:
    """Returns the help of Beam's own pipeline options (every options class Beam defines)."""
    parsers: list[argparse.ArgumentParser] = []
    log = logging.getLogger("apache_beam.options.pipeline_options")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        PipelineOptions([]).get_all_options(add_extra_args_fn=parsers.append)
    finally:
        log.setLevel(level)
    parser = parsers[0]
    parser.prog = prog
    parser.description = ("Apache Beam's pipeline options; the job's own flags are in --help. "
                          "Beam's documentation: https://beam.apache.org/documentation/runners/")
    return parser.format_help()
