"""The ``tfrecord-shards`` command: one entry point with a subcommand per job.

Usage: ``tfrecord-shards COMMAND [flags]`` (``tfrecord-shards --help``: the commands; each command's
``--help``: its flags). ``python -m beam_jobs.build_shards`` and the other job modules run the same
code: ``logs.set_up_command``, then their own ``run``.

A command's ``--help``, and a usage error its declared flags and config show, are answered here
before the job's modules, Beam, Pillow and numpy are imported (BENCHMARKS.md, "Instant help").
"""

from __future__ import annotations

import importlib
import sys
import time
from typing import Sequence

from beam_jobs.cli import loading
from beam_jobs.cli.config import known_flag_names, usage_problem
from beam_jobs.cli.declared import format_job_help, print_help, respelt, wants_help
from beam_jobs.cli.jobs import JOBS
from beam_jobs.cli.started import command_running, mark_process_command

__all__ = ["COMMANDS", "main", "run_command", "usage"]

PROG = "tfrecord-shards"

# subcommand -> (job module, one line about it)
COMMANDS = {
    "build": ("beam_jobs.build_shards", "images and labels -> balanced, shuffled TFRecord shards"),
    "append": ("beam_jobs.append_shards", "add new images to a published set, keeping its shards"),
    "plan": ("beam_jobs.plan_build", "what a build with the same flags would do; writes nothing"),
    "verify": ("beam_jobs.verify_shards", "check a shard set against its manifest, or any TFRecord files"),
    "reshard": ("beam_jobs.reshard", "regenerate any TFRecord files as balanced shards"),
    "inspect": ("beam_jobs.inspect_shard", "print the records of one TFRecord file as text"),
    "sample": ("beam_jobs.make_sample_data", "write a sample dataset of procedural images"),
}


def usage() -> str:
    """Returns the command's help: its subcommands."""
    width = max(len(c) for c in COMMANDS)
    lines = [f"usage: {PROG} COMMAND [flags]", "",
             "Build, verify and reshard TFRecord shard sets of image datasets on Apache Beam.", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
    lines += ["", f"'{PROG} COMMAND --help' lists the flags of a command; "
                  f"'{PROG} build --help_beam' Beam's own options."]
    return "\n".join(lines)


def run_command(command: str, argv: Sequence[str], prog: str, process: bool = False) -> int:
    """Runs one job as a command; returns its exit status (``--help`` and a usage error of its declared flags
    told without its modules). ``process``: the command is this process's (``loading.pause``)."""
    job = JOBS[command]
    argv = respelt(argv, known_flag_names(job))
    if wants_help(argv):
        print_help(format_job_help(job, prog))
        return 0
    problem = usage_problem(job, argv)
    if problem is not None:
        print(f"{job.name}: error: {problem}", file=sys.stderr)
        return 2
    if process:
        loading.pause()
    try:
        from beam_jobs.cli import logs  # here: Ctrl-C while importing is one line, and --help needs no Beam

        logs.set_up_command(argv)  # logging as argv asks; imports Beam
        module = importlib.import_module(COMMANDS[command][0])
    finally:
        loading.resume()
    return module.run(list(argv), prog=prog)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``tfrecord-shards``; returns the exit status. A job's time counts from the process's
    start, or from this call given ``argv``."""
    if argv is None:
        mark_process_command()
    with command_running(None if argv is None else time.monotonic()):
        return _main(sys.argv[1:] if argv is None else list(argv), process=argv is None)


def _main(argv: list[str], process: bool) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        if argv:
            print_help(usage())
        else:
            print(usage(), file=sys.stderr)
        return 0 if argv else 2
    command = argv[0]
    if command not in COMMANDS:
        print(f"{PROG}: error: unknown command {command!r}; choose one of {', '.join(COMMANDS)} "
              f"(see {PROG} --help)", file=sys.stderr)
        return 2
    try:
        return run_command(command, argv[1:], f"{PROG} {command}", process)
    except KeyboardInterrupt:  # while the job's modules load; the job itself reports its own
        print(f"{PROG}: interrupted: nothing was published", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
