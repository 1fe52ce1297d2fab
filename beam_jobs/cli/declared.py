"""How a job's flags are declared: once, as plain data, without Beam, Pillow or numpy.

A ``Flag`` says everything about one flag; a ``FlagSet`` is the flags one options class parses
(``beam_jobs/cli/flags.py``); a ``Job`` is what one command takes. From the declarations
(``beam_jobs/cli/jobs.py``) come the job's ``--help``, a parser of its flags alone that tells a
usage error before any of the job's modules is imported (``flag_parser``), Beam's options classes,
the options a manifest records, each job's config, the flags' dashed spelling (``respelt``) and the
closest flag to a misspelt one (``unknown_flag_problem``).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from beam_jobs.cli.values import one_line_errors

__all__ = ["Flag", "FlagSet", "Job", "BEAM_HELP_FLAG", "format_job_help", "print_help", "flag_parser", "parsed_flags",
           "wants_help", "respelt", "unknown_flag_problem", "flag_name"]

BEAM_HELP_FLAG = "--help_beam"
GROUP_ORDER = ("inputs", "labels and splits", "images", "checks", "output", "sharding", "failures", "messages")


@dataclass(frozen=True)
class Flag:
    """One flag of a job.

    Attributes:
        name: The flag without ``--`` (and its attribute name), e.g. ``shard_size_mb``;
            for a positional argument, its name (``shard``).
        help: What it means, for ``--help``; the default is added there.
        type: Parses its text (an argparse type from ``beam_jobs.cli.values``), or None for text.
        action: ``store_true`` for a switch, ``append`` for a repeatable flag, None for a value.
        group: The title it is listed under in ``--help``.
        recorded: The manifest records its value (it shapes the output, not how the run goes).
        required: Shown as required in ``--help``; refused when missing by argparse itself
            only for a job that runs no Beam pipeline (others' configs check it).
        positional: A positional argument (``inspect SHARD``), not a flag.
    """

    name: str
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: tuple | None = None
    action: str | None = None
    group: str = "other"
    recorded: bool = False
    required: bool = False
    positional: bool = False

    @property
    def option(self) -> str:
        """How it is spelt on the command line: ``--name``, or ``name`` when positional."""
        return self.name if self.positional else f"--{self.name}"

    def argparse_kwargs(self, enforce_required: bool = False) -> dict[str, Any]:
        """The keyword arguments of ``parser.add_argument`` for this flag."""
        given = {"help": self.help, "action": self.action, "type": self.type, "choices": self.choices}
        kwargs = {key: value for key, value in given.items() if value is not None}
        if not self.positional:
            kwargs["default"] = self.default
        if enforce_required and self.required and not self.positional:
            kwargs["required"] = True
        return kwargs


@dataclass(frozen=True)
class FlagSet:
    """Flags that one options class, named ``name``, parses, in the order ``--help`` lists them."""

    name: str
    flags: tuple[Flag, ...]

    def _add_argparse_args(self, parser: Any) -> None:
        """Adds every flag to ``parser``, as Beam calls an options class's method of this name."""
        one_line_errors(parser)
        for flag in self.flags:
            parser.add_argument(flag.option, **flag.argparse_kwargs())


@dataclass(frozen=True)
class Job:
    """What one command takes and says about itself.

    Attributes:
        shared: Which flags of ``shared_set`` (``jobs.SHARED``) the job takes (names).
        run_flags: The flag sets every Beam job takes besides (logging, progress).
        regroup: flag name -> group title, where this job lists a flag elsewhere than its declaration.
        beam: Whether the job runs a Beam pipeline (and takes Beam's options).
    """

    name: str
    summary: str
    options: tuple[FlagSet, ...] = ()
    shared: tuple[str, ...] = ()
    shared_set: FlagSet | None = None
    run_flags: tuple[FlagSet, ...] = ()
    regroup: Mapping[str, str] = field(default_factory=dict)
    epilog: str = ""
    beam: bool = True
    usage: str = "%(prog)s [flags]"

    def flags(self) -> list[Flag]:
        """Every flag the job takes: the shared ones it uses, its own, then the run flags."""
        shared = [f for f in self.shared_set.flags if f.name in self.shared] if self.shared_set else []
        return shared + [f for s in (*self.options, *self.run_flags) for f in s.flags]

    def recorded(self) -> tuple[str, ...]:
        """The names of the flags whose values the manifest records, in ``flags()`` order."""
        return tuple(flag.name for flag in self.flags() if flag.recorded)

    def flag_names(self) -> tuple[str, ...]:
        """The names of the job's flags (without ``--``; positional arguments left out)."""
        return tuple(flag.name for flag in self.flags() if not flag.positional)


def flag_name(arg: str) -> str | None:
    """The name an argument gives as a flag (``--shard_size_mb=6`` -> ``shard_size_mb``), or None."""
    if not arg.startswith("--") or arg == "--":
        return None
    return arg[2:].split("=", 1)[0]


def respelt(argv: Sequence[str], names: Collection[str]) -> list[str]:
    """``argv`` with each flag spelt with dashes (``--shard-size-mb``, ``--shard-size-mb=6``) spelt as
    declared, with underscores, where that is one of ``names``; everything else is left as given.

    Many command lines (gsutil, tfds) spell flags with dashes; the jobs' and
    Beam's flags are declared with underscores. A name given as declared (Beam's
    ``--job-server-timeout``) is kept, and nothing after a bare ``--`` is read.
    """
    out: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--":
            out.append(arg)
            out.extend(args)
            break
        name = flag_name(arg)
        if name is not None and "-" in name and name not in names and name.replace("-", "_") in names:
            arg = "--" + name.replace("-", "_") + arg[2 + len(name):]
        out.append(arg)
    return out


def unknown_flag_problem(arg: str, own: Iterable[str], beam: Iterable[str] = ()) -> str:
    """What to say about ``arg`` (``--shard_sise_mb=6``), a flag no parser defines: the closest flag the
    job takes, if one is close; its own flags (``own``) are looked at before Beam's (``beam``)."""
    name = flag_name(arg) or arg.lstrip("-")
    typed = name.replace("-", "_")
    beam = list(beam)
    for names, cutoff in ((list(own), 0.6), (beam, 0.75)):
        close = difflib.get_close_matches(typed, names, n=1, cutoff=cutoff)
        if close:
            return f"unknown flag --{name}; did you mean --{close[0]}? (see --help)"
    return f"unknown flag --{name} (see --help{'; --help_beam lists Beam' + chr(39) + 's options' if beam else ''})"


def wants_help(argv: Sequence[str]) -> bool:
    """True if the arguments ask for the job's help."""
    return any(a in ("-h", "--help") for a in argv)


def _describe(flag: Flag) -> str:
    default = flag.default
    if flag.required:
        suffix = "(required)"
    elif flag.action in ("store_true", "store_false") or default is None or flag.positional:
        suffix = ""
    else:
        suffix = f"(default: {default})"
    return " ".join(part for part in (flag.help, suffix) if part).replace("%", "%%")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Wraps each line of a flag's help on its own: a help with a line per choice keeps them."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        lines: list[str] = []
        for line in text.splitlines():
            lines.extend(super()._split_lines(line, width) or [""])
        return lines


def format_job_help(job: Job, prog: str) -> str:
    """Returns the help text of a job: every flag in its group (``GROUP_ORDER``, then the others)."""
    parser = argparse.ArgumentParser(
        prog=prog, usage=job.usage, description=job.summary, add_help=False, epilog=job.epilog or None,
        formatter_class=_HelpFormatter)
    flags = job.flags()
    titles = {flag.name: job.regroup.get(flag.name, flag.group) for flag in flags}
    order = [t for t in GROUP_ORDER if t in titles.values()]
    order += sorted({t for t in titles.values() if t not in order})
    groups = {title: parser.add_argument_group(title) for title in order}
    for flag in flags:
        shown = {k: v for k, v in flag.argparse_kwargs().items() if k not in ("help", "type", "default")}
        groups[titles[flag.name]].add_argument(flag.option, help=_describe(flag), **shown)
    general = parser.add_argument_group("help")
    general.add_argument("-h", "--help", action="store_true", help="Show this help and exit.")
    if job.beam:
        general.add_argument(BEAM_HELP_FLAG, action="store_true",
                             help="Show Beam's own options (--runner, --direct_num_workers, "
                                  "cloud options), which every job takes as well.")
    return parser.format_help()


def print_help(text: str) -> None:
    """Prints a help text to stdout; a reader that stops early (``--help | head``) ends it quietly,
    with no traceback now nor when stdout is flushed at exit."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no descriptor: nothing to flush
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def flag_parser(job: Job, prog: str | None = None) -> argparse.ArgumentParser:
    """A parser of the job's flags with their types, raising ``UsageError`` on a bad one.

    For a Beam job it knows none of Beam's flags: parse with ``parse_known_args``.
    """
    parser = argparse.ArgumentParser(prog=prog, add_help=False, allow_abbrev=False)
    one_line_errors(parser)
    for flag in job.flags():
        parser.add_argument(flag.option, **flag.argparse_kwargs(enforce_required=not job.beam))
    return parser


def parsed_flags(job: Job, argv: Sequence[str] | None, prog: str) -> argparse.Namespace | None:
    """The flags of a command without Beam (None: ``sys.argv[1:]``), parsed; None once its ``--help`` is printed."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if wants_help(argv):
        print_help(format_job_help(job, prog))
        return None
    return flag_parser(job, prog).parse_args(argv)
