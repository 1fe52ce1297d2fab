"""How the jobs run: flags, runner, pipeline, exit status, summary and one-line failures.

The build and reshard jobs publish a shard set, so they share one
``run_publishing_job``: parse and check the flags (one line and exit status 2
on a bad one), check the output folder and take its lock
(``transforms.storage.output_folder``; exit status 2 as well), build and run
the pipeline (one line and exit status 1 on a failure), then print a summary
read back from the published manifest (or, for a Dataflow dry run, from the
translated graph).
"""

from __future__ import annotations

import beam_jobs.quiet_beam  # noqa: F401  (first: Beam imported without its BigQuery warning)
import contextlib
import logging
import re
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable, Iterator, Mapping, Sequence

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from beam_jobs.cli import logs
from beam_jobs.cli.beam_flag_names import BEAM_FLAG_NAMES
from beam_jobs.cli.config import JobConfig, PublishingConfig, known_flag_names
from beam_jobs.cli.declared import respelt, unknown_flag_problem
from beam_jobs.cli.started import run_started
from beam_jobs.cli.flags import flag_values
from beam_jobs.cli.help import format_beam_help, format_job_help, wants_beam_help, wants_help
from transforms import beam_compat
from transforms.errors import ManifestError, NothingToPublish, ShardsError, UsageError
from transforms.images.annotations import LABEL_MAP_NAME, object_ids_problem
from transforms.images.choices import NEAR_DUPLICATE_CPU_S_PER_GB
from transforms.images.orientation import UPRIGHT_HOW
from transforms.images.png_chunks import PNG_CHUNK_FIXES
from transforms.inspect_images import REUSED_INPUT_BYTES, REUSED_INPUTS
from transforms.shard_sink import REUSED_SHARDS
from transforms.progress.report import plural
from transforms.shardset.manifest import MANIFEST_NAME, Manifest
from transforms.shardset.replacing import change_line, split_changes
from transforms.shardset.planning import MIB
from transforms.shardset.naming import join_path
from transforms.shardset.tfds_metadata import tfds_problem
from transforms.storage import output_folder
from transforms.storage.writing import is_no_space
from transforms.filesystems import set_options

__all__ = ["prepare_options", "unknown_flags", "error_summary", "error_lines", "report_failure",
           "run_job", "run_publishing_job", "JobFinished", "dry_run_summary", "summarize",
           "refuse_unknown_flags",
           "INTERRUPTED_LINE", "INTERRUPTED_STATUS", "RESUMABLE_LINE", "KEPT_LINE", "resume_line"]

_PROJECT_ERROR = re.compile(
    r"(?:transforms\.errors\.)?(ShardsError|UsageError|RecordError|ExampleError|ImageError|"
    r"ManifestError|PlanError|PublishError|NothingToPublish): (.+)")


_STEP_SUFFIX = re.compile(r"\s*\[while running '[^']*'\]\s*$")


def prepare_options(options: PipelineOptions, no_auth: bool) -> PipelineOptions:
    """Returns the options a job runs with (Beam's own flags are left as given).

    Makes Beam's file systems use these options at once, as ``beam.Pipeline`` does
    later, so the checks a job makes before building its pipeline reach s3://
    with ``--s3_endpoint_url`` and the S3 keys given. With ``--no_auth``,
    Beam's GCS filesystem connects anonymously, as Beam's Dataflow client
    already does for that flag; without it, a process with no Google
    credentials retries the credential lookup for about 24 s before falling
    back to the same anonymous client. A GCS emulator
    (``STORAGE_EMULATOR_HOST``) needs no credentials.
    """
    set_options(options)
    if no_auth:
        beam_compat.use_anonymous_gcp_credentials()
    return options


def unknown_flags(options: PipelineOptions, argv: Sequence[str]) -> list[str]:
    """Returns the arguments in ``argv`` that no options class (Beam's or a job's) defines.

    Beam drops such arguments with a warning, so a misspelt flag
    (``--decode-images``) or a path given without its flag would be ignored;
    a job can refuse them instead. Beam's own warning is silenced here.
    """
    parsers = []
    log = logging.getLogger("apache_beam.options.pipeline_options")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        options.get_all_options(add_extra_args_fn=parsers.append)
    finally:
        log.setLevel(level)
    return parsers[0].parse_known_args(list(argv))[1]


def error_summary(err: BaseException) -> str:
    """Returns one line saying why a pipeline failed.

    Runners wrap errors raised in workers in their own exception types and add
    stack traces to the message; the project's own error, if any, is the line
    a user needs.
    """
    return error_lines(err)[0]


def error_lines(err: BaseException) -> tuple[str, list[str]]:
    """Returns why a pipeline failed: one line, and the detail lines the error carries.

    A project error's message is a headline, optionally followed by detail
    lines indented by two spaces (e.g. the reasons of a refusal); a runner's
    wrapper holds it inside a stack trace, or with the failing step appended.
    """
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


def _is_project_error(err: BaseException) -> bool:
    return isinstance(err, ShardsError) or bool(_PROJECT_ERROR.search(str(err)))


def _raised(err: BaseException, kind: type[ShardsError]) -> bool:
    """True if a pipeline failed on the project's error ``kind``.

    Runners wrap what a step raised in their own types; the project's error
    is then the last one named in the text (as ``error_lines`` reads it).
    """
    if isinstance(err, ShardsError):
        return isinstance(err, kind)
    found = list(_PROJECT_ERROR.finditer(str(err)))
    return bool(found) and found[-1].group(1) == kind.__name__


def _is_usage_error(err: BaseException) -> bool:
    """True if a pipeline failed on a ``UsageError``: a refusal a flag answers (``--replace``)."""
    return _raised(err, UsageError)


def report_failure(name: str, err: BaseException, settings: logs.LogSettings, more: str = "") -> None:
    """Prints why a job failed: detail lines, then exactly one line, last, on stderr.

    The traceback is printed only with ``--verbose`` or ``--log_level DEBUG``;
    otherwise it goes, with the run's log records, to a log file that the
    line names when the cause is not one of the project's own errors.
    ``more`` is added to the line (after ``; ``).
    """
    message, details = error_lines(err)
    message = f"{message}; {more}" if more else message
    if settings.tracebacks:
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
        where = ""
    else:
        path = logs.write_failure_log(name, err)
        where = f" (traceback in {path})" if path and not _is_project_error(err) else ""
    for line in details:
        print(line, file=sys.stderr)
    print(f"{name}: failed: {message}{where}", file=sys.stderr)


class _ProjectErrorsWithoutTraceback(logging.Filter):
    """Drops the traceback Beam logs with a failing element when the error is one of ours.

    The project's errors are deliberate and say in their message what went
    wrong and where; the job prints that line anyway. Other errors keep
    their traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], ShardsError):
            record.exc_info, record.exc_text = None, None
        return True


# Beam's loggers that log a failing element's error with its traceback (Beam 2.77).
_ELEMENT_ERROR_LOGGERS = ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker",
                          "apache_beam.runners.worker.bundle_processor")


def refuse_unknown_flags(options: PipelineOptions, argv: Sequence[str],
                         positional_hint: str = "every value needs its flag, e.g. --input PATH",
                         own: Sequence[str] = ()) -> None:
    """Raises ``UsageError`` for a flag no options class defines (Beam would drop it), naming the
    closest of the job's flags (``own``) or Beam's."""
    extra = unknown_flags(options, argv)
    if not extra:
        return
    if extra[0].startswith("-"):
        raise UsageError(unknown_flag_problem(extra[0], own, BEAM_FLAG_NAMES))
    raise UsageError(f"unexpected argument {extra[0]!r}; {positional_hint}")


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
    """Notes a Ctrl-C (SIGINT) while a job runs; it still raises ``KeyboardInterrupt`` where it lands.

    Beam's runner wraps a ``KeyboardInterrupt`` raised inside a step in its own
    error (``RuntimeError: KeyboardInterrupt``), so the job asks whether one
    came instead. Only the main thread can set a signal handler; where SIGINT
    is ignored (a background job of a shell) it stays ignored. A terminal's
    Ctrl-C also stops the runner's worker processes, and the runner's threads
    watching them then fail: once a Ctrl-C was seen, what those threads raise
    is not printed (the job prints its one line).
    """

    def __init__(self) -> None:
        self.seen = False
        self._previous = None
        self._excepthook = None

    def _thread_failed(self, args) -> None:
        if not self.seen:
            self._excepthook(args)

    def _raise(self, signum, frame) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def _note(self, signum, frame) -> None:
        self.seen = True

    def _install(self, handler) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return None
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            return None
        return signal.signal(signal.SIGINT, handler)

    def __enter__(self) -> "_Interrupts":
        self._previous = self._install(self._raise)
        self._excepthook, threading.excepthook = threading.excepthook, self._thread_failed
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        threading.excepthook = self._excepthook
        return False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Within the block, a Ctrl-C is noted but raises nothing."""
        before = self._install(self._note)
        try:
            yield
        finally:
            if before is not None:
                signal.signal(signal.SIGINT, before)


class JobFinished(Exception):
    """Raised by a job's ``make_config`` when its outcome is known before any pipeline runs.

    Attributes:
        text: What the job prints on standard output.
        status: The job's exit status.
    """

    def __init__(self, text: str, status: int) -> None:
        super().__init__(text)
        self.text = text
        self.status = status


def dry_run_summary(p: beam.Pipeline) -> str:
    """Returns what a dry run translated: the job graph's size and top-level steps.

    The size is that of the serialized pipeline, every step's pickled code
    and data included: what the runner submits.
    """
    graph = p.to_runner_api()
    transforms = graph.components.transforms
    steps = [transforms[t].unique_name for root in graph.root_transform_ids
             for t in transforms[root].subtransforms]
    return (f"Dry run: the job graph has {len(transforms)} transforms and {graph.ByteSize()} bytes; "
            f"nothing was submitted, read or written\n  steps: {', '.join(steps)}")


def _image_lines(images, mode: str | None, orientation_feature: bool = False) -> list[str]:
    """Summary lines of a build's ``images`` counts: conversions, fixed PNG chunks, EXIF orientation,
    undecodable records."""
    def listed(counts) -> str:
        return ", ".join(f"{fmt} {n}" for fmt, n in sorted(counts.items()))
    lines = []
    if mode == "tf" and images.get("converted"):
        lines.append(f"  converted to PNG for TensorFlow: {plural(sum(images['converted'].values()), 'record')} "
                     f"({listed(images['converted'])})")
    if images.get("png_chunks_fixed"):
        fixed = images["png_chunks_fixed"]
        lines.append(f"  PNG chunks fixed for TensorFlow: {plural(sum(fixed.values()), 'record')} ("
                     + "; ".join(f"{PNG_CHUNK_FIXES.get(fix, fix)}: {n}" for fix, n in sorted(fixed.items()))
                     + ")")
    if images.get("exif_oriented"):
        turned = images["exif_oriented"]
        lines.append(f"  turned upright for their EXIF orientation: {plural(sum(turned.values()), 'record')} ("
                     + "; ".join(f"{UPRIGHT_HOW.get(how, how)}: {n}" for how, n in sorted(turned.items())) + ")")
    if images.get("exif_orientation_kept"):
        kept = images["exif_orientation_kept"]
        where = ("image/orientation holds it" if orientation_feature
                 else "--image_mode tf turns them upright")
        lines.append(f"  stored as the file holds them, not upright: {plural(sum(kept.values()), 'record')} with an "
                     f"EXIF orientation (orientation {listed(kept)}); {where}")
    if images.get("tf_undecodable"):
        lines.append(f"  TensorFlow cannot decode {plural(sum(images['tf_undecodable'].values()), 'record')} "
                     f"as recorded ({listed(images['tf_undecodable'])}); --image_mode tf converts them")
    return lines


def _reader_lines(manifest: Manifest) -> list[str]:
    """Summary lines on what detectors and tensorflow-datasets get: object classes, boxes, tfds files."""
    lines = []
    boxes = manifest.images.get("boxes", {})
    if boxes:
        done = ", ".join(f"{boxes[kind]} {kind}" for kind in ("clipped", "skipped") if boxes.get(kind))
        lines.append(f"  boxes not inside their image: {plural(sum(boxes.values()), 'box')}, {done} "
                     f"(--boxes_outside {manifest.options.get('boxes_outside') or 'skip'})")
    if manifest.object_labels:
        ids = [class_id for class_id, _ in manifest.object_labels]
        problem = object_ids_problem(manifest.object_labels)
        lines.append(f"  object classes: {len(ids)}, ids {min(ids)}-{max(ids)}; "
                     + (f"no {LABEL_MAP_NAME}: {problem}" if problem else LABEL_MAP_NAME))
    problem = tfds_problem(manifest.compression)
    if problem:
        lines.append(f"  {problem}")
    return lines


def _near_duplicate_lines(output_dir: str, near: Mapping[str, Any]) -> list[str]:
    """Summary lines of a build's near-duplicate check: the pairs found, what was done, what was not compared."""
    if not near:
        return []
    done = ("the copy in the split that ranks later dead-lettered (cross_split_near_duplicate)"
            if near.get("mode") == "reject" else "--near_duplicates reject dead-letters the later copy")
    between = ", ".join(f"{each['kept']} keeps, {each['later']} has the later copy: {each['pairs']}"
                        for each in near.get("split_pairs") or ())
    lines = [f"  near-duplicates across splits (perceptual hash within {near.get('distance')} bits): "
             f"{plural(near['pairs'], 'pair')} in {join_path(output_dir, near['file'])}"
             + (f" ({between})" if between else "") + (f"; {done}" if near["pairs"] else "")]
    if near.get("buckets_over_cap"):
        lines.append(f"  near-duplicates: {plural(near['buckets_over_cap'], 'bucket')} of hashes held more "
                     f"images than are compared; {near.get('images_not_compared_in_a_bucket')} images were "
                     "not compared there (pairs found only there are missed; a lower "
                     "--near_duplicate_distance makes buckets smaller)")
    if near.get("images_not_hashed"):
        lines.append(f"  near-duplicates: {plural(near['images_not_hashed'], 'image')} whose pixels do not "
                     "decode were not compared")
    return lines


def summarize(output_dir: str, seconds: float, before: Manifest | None = None,
              near_unchecked: bool = False) -> str:
    """Returns the human summary of a published shard set, read from its manifest.

    Args:
        output_dir: The folder the run published into.
        seconds: How long the run took.
        before: The folder's manifest before the run, if it had one: the
            summary then names each split the run replaced (old and new
            record counts), kept or removed.
        near_unchecked: The run could have looked for near-duplicates
            across splits and did not (``--near_duplicates off``): a set of
            two splits or more then says so, and how to look.
    """
    manifest = output_folder.read_manifest(output_dir)  # shard entries without label counts: shards x small
    changes = {change.split: change for change in split_changes(before, manifest)}
    kept = {name for name, change in changes.items() if change.kind == "kept"}
    if manifest.written_splits is not None:  # kept splits' records were not this run's inputs
        kept |= set(manifest.splits) - set(manifest.written_splits)
    written = sum(split.records - manifest.appended.get(name, 0)
                  for name, split in manifest.splits.items() if name not in kept)
    # An append's manifest counts the set's dead letters, earlier runs' too: this run's are the difference.
    dead = manifest.dead_letters - (before.dead_letters if manifest.appended and before is not None else 0)
    # An append's inputs the set had dead-lettered already: in its dead_letters.jsonl once, not again.
    known = manifest.known_dead_letters if manifest.appended else 0
    told = f", {plural(known, 'input')} already dead-lettered in the set" if known else ""
    lines = [f"Published {plural(written, 'record')} to {output_dir} in {seconds:.1f} s "
             f"({plural(dead, 'dead letter')}{told}; written + dead-lettered = {written + dead + known} inputs)"]
    lines += [f"  {line}" for line in map(change_line, changes.values()) if line]
    for name, split in sorted(manifest.splits.items()):
        sizes = [s.bytes for s in split.shards]
        lines.append(f"  {name}{' (kept)' if name in kept else ''}: {plural(split.records, 'record')} in "
                     f"{plural(len(sizes), 'shard')}, {split.bytes / MIB:.1f} MiB "
                     f"(shards {min(sizes) / MIB:.1f}-{max(sizes) / MIB:.1f} MiB)")
    lines += _image_lines(manifest.images, manifest.options.get("image_mode"),
                          manifest.options.get("exif_orientation") == "keep")
    lines += _reader_lines(manifest)
    lines += _near_duplicate_lines(output_dir, manifest.near_duplicates)
    if near_unchecked and len(manifest.splits) > 1 and not manifest.near_duplicates:
        lines.append(f"  near-duplicates across splits: not looked for (--near_duplicates report looks: "
                     f"about {NEAR_DUPLICATE_CPU_S_PER_GB} CPU s more per GB of JPEGs)")
    lines.append(f"  labels: {plural(len(manifest.labels), 'class')}; manifest: "
                 f"{join_path(output_dir, MANIFEST_NAME)}")
    return "\n".join(lines)


def run_job(name: str, argv: Sequence[str] | None, config: type[JobConfig],
            make_config: Callable[[Any, PipelineOptions], Any],
            build_pipeline: Callable[[beam.Pipeline, Any], Any],
            finish: Callable[[beam.Pipeline, Any, float], tuple[str, int]],
            positional_hint: str = "every value needs its flag, e.g. --input PATH",
            prepare: Callable[[Any], Callable[[bool, bool, bool], str | None] | None] | None = None,
            *, prog: str | None = None,
            progress: Callable[[Any], Any] | None = None,
            on_result: Callable[[Any], None] | None = None,
            disk_need: Callable[[Any], str] | None = None) -> int:
    """Runs a job: flags, pipeline, outcome; returns its exit status.

    Args:
        name: Job name for messages (``build_shards``).
        argv: Command-line arguments (None for ``sys.argv[1:]``).
        config: The job's config class (``beam_jobs/cli/config.py``), built
            once from the flags; its job's declaration is what ``--help`` shows.
        make_config: Given the config and Beam's options (for the local
            runner's workers), checks the inputs the flags name and returns the
            config with what the job found before its pipeline; raises
            ``UsageError`` on a bad flag or path, or ``JobFinished`` when the
            outcome is known without running a pipeline.
        build_pipeline: Wires the job into a pipeline.
        finish: After the pipeline ran, given the pipeline, config and
            seconds since the command started (``started.run_started``),
            returns the text to print and the status.
        positional_hint: What to say about an argument given without a flag.
        prepare: Called with the config before the pipeline is
            built (may raise ``UsageError``); returns None or a function called
            once the job succeeded or failed, with ``ok``, whether a Ctrl-C
            stopped it and whether it was refused as a usage error once running; it returns what to say after the job's name when
            interrupted (None: ``INTERRUPTED_LINE``) or, last, when it failed
            (None: nothing more).
        prog: How the job was invoked, for ``--help`` (``tfrecord-shards build``).
        progress: Given the config, returns a context manager that
            reports progress while the pipeline runs (see ``progress.py``).
        on_result: Given the ``PipelineResult`` once the pipeline finished
            (its metrics), before ``finish`` is called.
        disk_need: Given the config once the job failed on a full disk (and
            cleaned up), says what it needs against what is free: added to the
            failure's line.

    Returns:
        ``finish``'s status; 1 when the pipeline failed; 2 for a bad flag or input.
    """
    started = run_started()  # the command's start: importing Beam and the job's modules counts
    argv = respelt(sys.argv[1:] if argv is None else argv, known_flag_names(config.JOB))
    prog = prog or f"python -m beam_jobs.{name}"
    if wants_help(argv):
        print(format_job_help(config.JOB, prog))
        return 0
    if wants_beam_help(argv):
        beam_compat.register_dask_options()  # Beam's --dask_* flags too
        print(format_beam_help(prog))
        return 0
    settings = logs.log_settings(argv)
    with _Interrupts() as interrupts:
        try:
            if beam_compat.wants_dask(argv):  # Beam's --dask_* flags
                beam_compat.register_dask_options()
            options = PipelineOptions(argv)
            refuse_unknown_flags(options, argv, positional_hint, config.JOB.flag_names())
            flags = config.from_flags(flag_values(options))
            cfg = make_config(flags, prepare_options(options, flags.no_auth))
            if cfg.workers_note:  # the workers a large local run was given
                print(f"{name}: {cfg.workers_note}", file=sys.stderr)
            done = prepare(cfg) if prepare is not None else None
        except (UsageError, ManifestError) as err:  # a bad flag, or an input manifest bad as a whole
            print(f"{name}: error: {err}", file=sys.stderr)
            return 2
        except JobFinished as finished:
            print(finished.text)
            return finished.status
        except (ShardsError, OSError) as err:  # storage refused what a run writes before reading (its marker)
            report_failure(name, err, settings)
            return 1
        except KeyboardInterrupt:  # nothing staged yet (prepare releases the lock it took)
            print(f"{name}: {INTERRUPTED_LINE}", file=sys.stderr)
            return INTERRUPTED_STATUS
        ok, ran, said, failed, full = False, False, None, None, None
        quiet = _ProjectErrorsWithoutTraceback()
        for logger in _ELEMENT_ERROR_LOGGERS:
            logging.getLogger(logger).addFilter(quiet)
        try:
            p = beam.Pipeline(runner=beam_compat.local_runner(options), options=options)
            build_pipeline(p, cfg)
            reporter = progress(cfg) if progress is not None else contextlib.nullcontext()
            with logs.worker_stderr_captured(), reporter:
                result = p.run()
                result.wait_until_finish()
            ran = True
            if on_result is not None:
                on_result(result)
            text, status = finish(p, cfg, time.monotonic() - started)
            ok = True
        except BaseException as err:  # the runner wraps worker errors, KeyboardInterrupt too, in its types
            if not (interrupts.seen or isinstance(err, KeyboardInterrupt)):
                if not isinstance(err, Exception):
                    raise
                if _is_usage_error(err):  # refused once the inputs were listed: as a bad flag
                    print(f"{name}: error: {error_lines(err)[0]}", file=sys.stderr)
                    failed = 2
                elif _raised(err, NothingToPublish):  # the folder already holds what the run would add
                    message, details = error_lines(err)
                    print("\n".join([message, *details]))
                    return 0
                elif disk_need is not None and is_no_space(error_lines(err)[0]):
                    full, failed = err, 1  # told once the run is done: what it needs against what is free
                else:
                    report_failure(name, err, settings)
                    failed = 1
        finally:
            for logger in _ELEMENT_ERROR_LOGGERS:
                logging.getLogger(logger).removeFilter(quiet)
            if done is not None:
                with interrupts.held():  # a second Ctrl-C does not stop the cleaning up
                    said = done(ok, interrupts.seen, failed == 2)
        if failed is not None:
            if full is not None:
                report_failure(name, full, settings, disk_need(cfg))
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
            return INTERRUPTED_STATUS
    print(text)
    return status


def run_publishing_job(name: str, argv: Sequence[str] | None, config: type[PublishingConfig],
                       make_config: Callable[[Any, PipelineOptions], Any],
                       build_pipeline: Callable[[beam.Pipeline, Any], Any],
                       **kwargs: Any) -> int:
    """Runs a job that publishes a shard set (build, reshard); returns its exit status.

    Prints a summary read back from the published manifest, naming the splits
    the run replaced, kept or removed against the manifest the folder held when
    the run took its lock (or, for a Dataflow dry run, the translated graph's
    size). See ``run_job`` for the rest.
    """
    before: list[Manifest | None] = [None]
    resumed: list[tuple[str, ...]] = [()]  # the interrupted runs whose staging this run found
    metrics: list[Any] = [None]

    def prepare(cfg: PublishingConfig) -> Callable[[bool, bool, bool], str | None] | None:
        if cfg.dataflow_dry_run:  # a dry run stays offline and writes nothing
            return None
        output_folder.prepare_output(cfg.output_dir, cfg.policy, name)
        before[0] = output_folder.published_manifest(cfg.output_dir)
        if cfg.policy.resume is not None:
            resumed[0] = tuple(r for r in output_folder.resumable_runs(cfg.output_dir) if r != cfg.policy.run_id)

        def done(ok: bool, interrupted: bool, refused: bool = False) -> str | None:
            kept = output_folder.finish_output(cfg.output_dir, cfg.policy, ok, interrupted, resumed[0], refused)
            staging = output_folder.staging_folder(cfg.output_dir)
            if cfg.policy.staging_dir:  # its run files lie there
                staging = f"{staging} and {cfg.policy.staging_dir}"
            if interrupted and cfg.policy.resume is not None:
                return RESUMABLE_LINE.format(staging=staging)
            if kept:
                return (KEPT_LINE if cfg.policy.resume is not None else KEPT_FOR_JOURNAL_LINE).format(staging=staging)
            return None
        return done

    def outcome(p: beam.Pipeline, cfg: PublishingConfig, seconds: float) -> tuple[str, int]:
        if cfg.dataflow_dry_run:
            return dry_run_summary(p), 0
        text = summarize(cfg.output_dir, seconds, before[0], getattr(cfg, "near_duplicates", None) == "off")
        if resumed[0]:
            first, rest = text.split("\n", 1) if "\n" in text else (text, "")
            text = "\n".join(line for line in (first, "  " + resume_line(metrics[0], resumed[0], first), rest)
                             if line)
        return text, 0

    return run_job(name, argv, config, make_config, build_pipeline, outcome, prepare=prepare,
                   on_result=lambda result: metrics.__setitem__(0, result), **kwargs)


def _counter(result: Any, namespace: str, name: str) -> int:
    """A counter's committed value in a finished pipeline's metrics (0 where the runner gives none)."""
    try:
        found = result.metrics().query(MetricsFilter().with_namespace(namespace).with_name(name))["counters"]
    except (AttributeError, NotImplementedError, KeyError):
        return 0
    return sum(c.committed if c.committed is not None else c.attempted or 0 for c in found)


def resume_line(result: Any, runs: Sequence[str], published: str) -> str:
    """The summary's line saying what a resumed run reused, from its metrics.

    Args:
        result: The finished pipeline's ``PipelineResult``.
        runs: The interrupted runs' ids.
        published: The summary's first line (its input count is read from it).
    """
    inputs = _counter(result, "build", REUSED_INPUTS)
    nbytes = _counter(result, "build", REUSED_INPUT_BYTES)
    shards = _counter(result, "shard_sink", REUSED_SHARDS)
    found = re.search(r"= ([\d,]+) inputs\)", published)
    total = f" of {int(found.group(1).replace(',', '')):,}" if found else ""
    which = f"run {runs[0]}" if len(runs) == 1 else f"runs {', '.join(runs)}"
    return (f"resumed: reused {inputs:,}{total} inputs ({nbytes / MIB:,.0f} MiB) and {plural(shards, 'finished shard')} "
            f"from the interrupted {which}")
