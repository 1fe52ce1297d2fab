"""How the jobs run: flags, runner, pipeline, exit status, summary and one-line failures."""

from __future__ import annotations

import beam_jobs.quiet_beam  # noqa: F401  (first: Beam imported without its BigQuery warning)
import argparse
import contextlib
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable, ContextManager, Iterator, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

import beam_jobs.cli.flags  # noqa: F401  (defines the options classes Beam parses)
from beam_jobs.cli import logs
from beam_jobs.cli.beam_flag_names import BEAM_FLAG_NAMES
from beam_jobs.cli.config import JobConfig, PublishingConfig, known_flag_names
from beam_jobs.cli.declared import (BEAM_HELP_FLAG, format_job_help, print_help, respelt, unknown_flag_problem,
                                    wants_help)
from beam_jobs.cli.started import job_ends_process, run_started
from transforms import beam_compat
from transforms.errors import ManifestError, NothingToPublish, ShardsError, UsageError
from transforms.shardset.manifest import Manifest
from transforms.shardset.summary import published_summary
from transforms.storage import output_folder
from transforms.storage.writing import is_no_space
from transforms.filesystems import set_options

__all__ = ["format_beam_help", "prepare_options", "unknown_flags", "error_lines", "report_failure",
           "Job", "PublishingJob", "run_job", "dry_run_summary",
           "INTERRUPTED_LINE", "INTERRUPTED_STATUS", "RESUMABLE_LINE", "KEPT_LINE"]

_PROJECT_ERROR = re.compile(
    r"(?:transforms\.errors\.)?(ShardsError|UsageError|RecordError|ExampleError|ImageError|"
    r"ManifestError|PlanError|PublishError|NothingToPublish): (.+)")


_STEP_SUFFIX = re.compile(r"\s*\[while running '[^']*'\]\s*$")


def prepare_options(options: PipelineOptions, no_auth: bool) -> PipelineOptions:
    """Returns the options a job runs with, its file systems set up with them at once.

    So the checks a job makes before its pipeline reach s3:// with the S3 flags given; with
    ``--no_auth`` Beam's GCS filesystem connects anonymously at once (without it, a process with no
    Google credentials retries their lookup for about 24 s first).
    """
    set_options(options)
    if no_auth:
        beam_compat.use_anonymous_gcp_credentials()
    return options


def format_beam_help(prog: str) -> str:
    """Returns ``--help_beam``: the help of Beam's own pipeline options (a job's own ``--help`` needs no
    Beam: ``declared.format_job_help``)."""
    parsers: list[argparse.ArgumentParser] = []
    beam_jobs.quiet_beam.all_options(PipelineOptions([]), add_extra_args_fn=parsers.append)
    parser = parsers[0]
    for action in parser._actions:  # Beam's own help line, with how the jobs choose when it is left out
        if action.dest == "direct_num_workers":
            action.help = f"{action.help} {beam_compat.WORKERS_RULE}"
    parser.prog = prog
    parser.description = ("Apache Beam's pipeline options; the job's own flags are in --help. "
                          "Beam's documentation: https://beam.apache.org/documentation/runners/")
    return parser.format_help()


def unknown_flags(options: PipelineOptions, argv: Sequence[str]) -> list[str]:
    """The arguments in ``argv`` that no options class (Beam's or a job's) defines: Beam would drop them."""
    parsers = []
    beam_jobs.quiet_beam.all_options(options, add_extra_args_fn=parsers.append)
    return parsers[0].parse_known_args(list(argv))[1]


def error_lines(err: BaseException) -> tuple[str, list[str]]:
    """Returns why a pipeline failed: one line, and the detail lines (indented by two spaces) a project
    error carries, also inside a runner's wrapper (a stack trace, or the failing step appended)."""
    text = str(err)
    cause = _one_storage_error(err)
    if cause is not None:
        return cause, []
    if isinstance(err, ShardsError):
        lines = text.strip().splitlines() or [type(err).__name__]
        message, rest = lines[0], lines[1:]
    else:
        at = max((m.start(2) for m in _PROJECT_ERROR.finditer(text)), default=None)
        if at is not None:
            lines = text[at:].splitlines()
            message, rest = lines[0], lines[1:]
        else:
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            message, rest = f"{type(err).__name__}: {lines[-1] if lines else ''}", []
    details = []
    for line in rest:
        if not line.startswith("  ") or line.startswith("  File "):
            break
        details.append(_STEP_SUFFIX.sub("", line.rstrip()))
    while _PROJECT_ERROR.match(message):  # runners may repeat the type name
        message = _PROJECT_ERROR.match(message).group(2)
    return _STEP_SUFFIX.sub("", message).strip(), details


def _one_storage_error(err: BaseException) -> str | None:
    """``PATH: why`` for Beam's ``BeamIOError`` of one path that failed with an ``OSError``
    (``exists() operation failed with exceptions {...}``), also inside another such error; else None."""
    details = getattr(err, "exception_details", None)
    if not isinstance(details, dict) or len(details) != 1:
        return None
    ((path, cause),) = details.items()
    if getattr(cause, "exception_details", None) is not None:  # a BeamIOError (an OSError too) in one
        return _one_storage_error(cause)
    return f"{path}: {cause.strerror or cause}" if isinstance(cause, OSError) else None


def _raised(err: BaseException, kind: type[ShardsError]) -> bool:
    """True if a pipeline failed on the project's error ``kind`` (inside a runner's wrapper: the last one
    named in the text, as ``error_lines`` reads it)."""
    if isinstance(err, ShardsError):
        return isinstance(err, kind)
    found = list(_PROJECT_ERROR.finditer(str(err)))
    return bool(found) and found[-1].group(1) == kind.__name__


def report_failure(name: str, err: BaseException, settings: logs.LogSettings, more: str = "") -> None:
    """Prints why a job failed: detail lines, then exactly one line (``more`` added after ``; ``), last,
    on stderr. The traceback is printed only with ``--verbose`` or ``--log_level DEBUG``; otherwise it
    goes to a log file, which the line names when the cause is not one of the project's own errors.
    """
    message, details = error_lines(err)
    message = f"{message}; {more}" if more else message
    if settings.tracebacks:
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
        where = ""
    else:
        path = logs.write_failure_log(name, err)
        ours = isinstance(err, ShardsError) or _PROJECT_ERROR.search(str(err))
        where = f" (traceback in {path})" if path and not ours else ""
    for line in details:
        print(line, file=sys.stderr)
    print(f"{name}: failed: {message}{where}", file=sys.stderr)


def _project_errors_without_traceback(record: logging.LogRecord) -> bool:
    """A filter that drops the traceback Beam logs with a failing element when the error is one of ours:
    its message says what went wrong and where, and the job prints that line anyway."""
    if record.exc_info and isinstance(record.exc_info[1], ShardsError):
        record.exc_info, record.exc_text = None, None
    return True


# Beam's loggers that log a failing element's error with its traceback (Beam 2.77).
_ELEMENT_ERROR_LOGGERS = ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker",
                          "apache_beam.runners.worker.bundle_processor")


# What a job prints, after its name, when Ctrl-C stopped it before it published; and its status
# (128 + SIGINT, as a shell reports a process that SIGINT ended).
INTERRUPTED_LINE = "interrupted: nothing was published; staging removed"
INTERRUPTED_STATUS = 130
# What a build prints instead, with its output folder: its staging is kept for a rerun to resume.
RESUMABLE_LINE = ("interrupted: nothing was published; the finished work is kept in {staging}: run the same "
                  "command again to resume")
# What a publishing job prints last when it failed and kept its staging for the next run.
KEPT_LINE = "staged work kept in {staging}; run again to resume, or --fresh to start over"
# The same where the next run finishes a publish forward from it (--fresh does not remove it).
KEPT_FOR_JOURNAL_LINE = "staged work kept in {staging}: the next run into the folder finishes its publish"


class _Interrupts:
    """Notes a Ctrl-C (SIGINT) or a SIGTERM while a job runs; it still raises ``KeyboardInterrupt`` where it lands.

    SIGTERM is how ``timeout``, ``kill``, ``docker stop``, Kubernetes and Slurm stop a job: it ends as a Ctrl-C
    does (the finished work kept, one line), with status 128 + the signal's number. Beam's runner wraps a
    ``KeyboardInterrupt`` raised inside a step in its own error, so the job asks whether one came instead. A
    signal ignored when the job starts (SIGINT in a shell's background job) stays ignored. Once one was seen,
    what the runner's threads raise (its workers stopped too) is not printed: the job prints its one line.

    When the block ends, what the job printed is flushed. In a command's process (``job_ends_process``), once
    the job has its exit status (``outcome``), a Ctrl-C or SIGTERM from then on ends the process at once with
    that status: the job has published, or not, and said so; its summary is not lost in a pipe's buffer, and
    no line says it was interrupted. Elsewhere (a job called as a function) the previous handlers return.
    """

    def __init__(self) -> None:
        self.seen = False
        self.status = INTERRUPTED_STATUS  # 128 + the signal's number, once one came
        self.outcome: int | None = None  # the job's exit status, once it has one
        self._quiet = False
        self._previous: dict[int, Any] = {}
        self._excepthook = None

    def _thread_failed(self, args) -> None:
        if not self.seen:
            self._excepthook(args)

    def _interrupted(self, signum, frame) -> None:
        self.seen, self.status = True, 128 + signum
        if not self._quiet:
            raise KeyboardInterrupt

    def __enter__(self) -> "_Interrupts":
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._interrupted) for sig in (signal.SIGINT, signal.SIGTERM)
                              if signal.getsignal(sig) not in (signal.SIG_IGN, None)}  # an ignored one stays so
        self._excepthook, threading.excepthook = threading.excepthook, self._thread_failed
        return self

    def __exit__(self, *exc: Any) -> bool:
        _flush_output()
        ending = self.outcome is not None and job_ends_process()
        for sig, handler in self._previous.items():
            signal.signal(sig, self._end_now if ending else handler)
        threading.excepthook = self._excepthook
        return False

    def _end_now(self, signum, frame) -> None:
        """A signal once the job has said how it ended: the process ends now, with the job's status."""
        _flush_output()
        os._exit(self.outcome)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Within the block, a Ctrl-C or SIGTERM is noted but raises nothing."""
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False


def _flush_output() -> None:
    """Flushes standard output and error (a reader that went away is no failure here)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed pipe or stream; None where there is none
            pass


def dry_run_summary(p: beam.Pipeline) -> str:
    """Returns what a dry run translated: the serialized job graph's size (what the runner submits)
    and its top-level steps."""
    graph = p.to_runner_api()
    transforms = graph.components.transforms
    steps = [transforms[t].unique_name for root in graph.root_transform_ids
             for t in transforms[root].subtransforms]
    return (f"Dry run: the job graph has {len(transforms)} transforms and {graph.ByteSize()} bytes; "
            f"nothing was submitted, read or written\n  steps: {', '.join(steps)}")


class Job:
    """A job the harness runs (``run_job``): its config class (whose ``JOB`` names it) and steps.

    Args:
        make_config: Given the config and Beam's options (for the local runner's workers), checks the
            inputs the flags name and returns the config with what the job found before its pipeline;
            raises ``UsageError`` on a bad flag or path.
        progress: Given the config, a context manager that reports progress while the pipeline runs
            (``progress.py``).
        finish: Given the ``PipelineResult``, the config and the seconds since the command started, the text
            to print and the exit status (a Dataflow dry run prints its graph instead).
        positional_hint: What to do with an argument given without a flag.
    """

    def __init__(self, config: type[JobConfig], make_config: Callable[[Any, PipelineOptions], Any],
                 build_pipeline: Callable[[beam.Pipeline, Any], Any], progress: Callable[[Any], ContextManager[Any]],
                 finish: Callable[[Any, Any, float], tuple[str, int]] | None = None,
                 positional_hint: str = "every value needs its flag, e.g. --input PATH") -> None:
        self.name, self.config, self.positional_hint = config.JOB.name, config, positional_hint
        self.make_config, self.build_pipeline, self.progress = make_config, build_pipeline, progress
        if finish is not None:
            self.finish = finish

    def prepare(self, cfg: Any) -> Callable[[bool, bool, bool], str | None] | None:
        """Called with the config before the pipeline is built (may raise ``UsageError``).

        Returns None or a function called once the job succeeded or failed, with ``ok``, whether a Ctrl-C
        stopped it and whether it was refused as a usage error once running; it returns what to say after the
        job's name when interrupted (None: ``INTERRUPTED_LINE``) or, last, when it failed (None: nothing more).
        """
        return None

    def disk_need(self, cfg: Any) -> str:
        """Once the job failed on a full disk (and cleaned up): what it needs against what is free,
        added to the failure's line ('' for nothing)."""
        return ""


def run_job(job: Job, argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Runs a job on ``argv`` (None: ``sys.argv[1:]``), invoked as ``prog`` (for ``--help``); returns
    ``job.finish``'s status, 1 when the pipeline failed, 2 for a bad flag or input."""
    started = run_started()  # the command's start: importing Beam and the job's modules counts
    argv = respelt(sys.argv[1:] if argv is None else argv, known_flag_names(job.config.JOB))
    prog = prog or f"python -m beam_jobs.{job.name}"
    if wants_help(argv):
        print_help(format_job_help(job.config.JOB, prog))
        return 0
    if BEAM_HELP_FLAG in argv:
        beam_compat.register_dask_options()  # Beam's --dask_* flags too
        print(format_beam_help(prog))
        return 0
    settings = logs.log_settings(argv)
    with _Interrupts() as interrupts:
        interrupts.outcome = _run_job(job, argv, settings, interrupts, started)
    return interrupts.outcome


def _run_job(job: Job, argv: list[str], settings: logs.LogSettings, interrupts: _Interrupts, started: float) -> int:
    """``run_job`` once its flags are known to be no request for help: returns the exit status."""
    try:
        if beam_compat.wants_dask(argv):  # Beam's --dask_* flags
            beam_compat.register_dask_options()
        options = PipelineOptions(argv)
        extra = unknown_flags(options, argv)  # Beam would drop them: refused, naming the closest flag
        if extra and extra[0].startswith("-"):
            raise UsageError(unknown_flag_problem(extra[0], job.config.JOB.flag_names(), BEAM_FLAG_NAMES))
        if extra:
            raise UsageError(f"unexpected argument {extra[0]!r}; {job.positional_hint}")
        flags = job.config.from_flags(beam_jobs.quiet_beam.all_options(options))
        cfg = job.make_config(flags, prepare_options(options, flags.no_auth))
        if cfg.workers_note:  # the workers a large local run was given
            print(f"{job.name}: {cfg.workers_note}", file=sys.stderr)
        done = job.prepare(cfg)
    except (UsageError, ManifestError) as err:  # a bad flag, or an input manifest bad as a whole
        print(f"{job.name}: error: {err}", file=sys.stderr)
        return 2
    except (ShardsError, OSError) as err:  # storage refused what a run writes before reading (its marker)
        report_failure(job.name, err, settings)
        return 1
    except KeyboardInterrupt:  # nothing staged yet (prepare releases the lock it took)
        print(f"{job.name}: {INTERRUPTED_LINE}", file=sys.stderr)
        return interrupts.status
    return _run(job, options, cfg, done, settings, interrupts, started)


def _failure(name: str, err: Exception, settings: logs.LogSettings) -> tuple[int, Exception | None]:
    """The exit status of a pipeline that failed on ``err``, and ``err`` where a full disk is told
    once the run cleaned up; says why now otherwise (0: nothing to publish, said on stdout)."""
    if _raised(err, UsageError):  # refused once the inputs were listed (``--replace`` answers it): a bad flag
        print(f"{name}: error: {error_lines(err)[0]}", file=sys.stderr)
        return 2, None
    if _raised(err, NothingToPublish):  # the folder already holds what the run would add
        message, details = error_lines(err)
        print("\n".join([message, *details]))
        return 0, None
    if is_no_space(error_lines(err)[0]):
        return 1, err  # told once the run is done: what it needs against what is free
    report_failure(name, err, settings)
    return 1, None


def _run(job: Job, options: PipelineOptions, cfg: Any, done: Callable[[bool, bool, bool], str | None] | None,
         settings: logs.LogSettings, interrupts: _Interrupts, started: float) -> int:
    """Builds and runs the pipeline, then says how it ended (``done``: ``Job.prepare``'s); returns the exit status."""
    name = job.name
    ok, ran, said, failed, full = False, False, None, None, None
    for logger in _ELEMENT_ERROR_LOGGERS:
        logging.getLogger(logger).addFilter(_project_errors_without_traceback)
    try:
        beam_compat.install_construction_memos()  # else a third of a small build's CPU
        p = beam.Pipeline(runner=beam_compat.local_runner(options), options=options)
        job.build_pipeline(p, cfg)
        with logs.worker_stderr_captured(), job.progress(cfg):
            result = p.run()
            result.wait_until_finish()
        ran = True
        seconds = time.monotonic() - started
        text, status = (dry_run_summary(p), 0) if cfg.dataflow_dry_run else job.finish(result, cfg, seconds)
        ok = True
    except BaseException as err:  # the runner wraps worker errors, KeyboardInterrupt too, in its types
        if not (interrupts.seen or isinstance(err, KeyboardInterrupt)):
            if not isinstance(err, Exception):
                raise
            failed, full = _failure(name, err, settings)
    finally:
        for logger in _ELEMENT_ERROR_LOGGERS:
            logging.getLogger(logger).removeFilter(_project_errors_without_traceback)
        if done is not None:
            with interrupts.held():  # a second Ctrl-C does not stop the cleaning up
                said = done(ok, interrupts.seen, failed == 2)
    if failed == 0:  # nothing to publish: said already
        return 0
    if failed is not None:
        if full is not None:
            report_failure(name, full, settings, job.disk_need(cfg))
        if said:  # what the failed run left for the next: the last line
            print(f"{name}: {said}", file=sys.stderr)
        return failed
    if not ok:
        if done is None:  # a job that publishes nothing
            print(f"{name}: interrupted", file=sys.stderr)
        elif ran:
            print(f"{name}: interrupted after the job published its output", file=sys.stderr)
        else:
            print(f"{name}: {said or INTERRUPTED_LINE}", file=sys.stderr)
        return interrupts.status
    print(text)
    return status


class PublishingJob(Job):
    """A job that publishes a shard set (build, reshard): it holds the output folder's lock while it runs,
    and its summary is read back from the published manifest, against the one the folder held before."""

    before: Manifest | None = None  # the folder's manifest when the run took its lock
    resumed: tuple[str, ...] = ()  # the interrupted runs whose staging this run found

    def prepare(self, cfg: PublishingConfig) -> Callable[[bool, bool, bool], str | None] | None:
        if cfg.dataflow_dry_run:  # a dry run stays offline and writes nothing
            return None
        output_folder.prepare_output(cfg.output_dir, cfg.policy, self.name)
        self.before = output_folder.published_manifest(cfg.output_dir)
        if cfg.policy.resume is not None:
            self.resumed = tuple(r for r in output_folder.resumable_runs(cfg.output_dir) if r != cfg.policy.run_id)

        def done(ok: bool, interrupted: bool, refused: bool = False) -> str | None:
            kept = output_folder.finish_output(cfg.output_dir, cfg.policy, ok, self.resumed, refused)
            staging = output_folder.staging_folder(cfg.output_dir)
            if cfg.policy.staging_dir:  # its run files lie there
                staging = f"{staging} and {cfg.policy.staging_dir}"
            if interrupted and cfg.policy.resume is not None:
                return RESUMABLE_LINE.format(staging=staging)
            if kept:
                return (KEPT_LINE if cfg.policy.resume is not None else KEPT_FOR_JOURNAL_LINE).format(staging=staging)
            return None
        return done

    def summary_lines(self, cfg: PublishingConfig, manifest: Manifest) -> list[str] | None:
        """The summary's lines after the splits' (None: every shard set's, ``summary.reader_lines``)."""
        return None

    def finish(self, result: Any, cfg: PublishingConfig, seconds: float) -> tuple[str, int]:
        manifest = output_folder.read_manifest(cfg.output_dir)  # shard entries without label counts: shards x small
        return published_summary(cfg.output_dir, manifest, seconds, self.before,
                                 self.summary_lines(cfg, manifest)), 0
