"""Logging of a job run as a command: what reaches the terminal, and the log file of a failure.

By default the terminal gets the job's own INFO lines (one per finished shard, progress) and
Beam's warnings; not Beam's INFO lines, nor the error Beam logs, with its traceback, when a step
fails. Every record, with its traceback, is kept in memory too, and written to a log file when the
job fails; ``--verbose`` or ``--log_level DEBUG`` show it all on the terminal.
"""

from __future__ import annotations

import beam_jobs.quiet_beam  # noqa: F401  (first: Beam imported without its BigQuery warning)
import argparse
import collections
import contextlib
import io
import logging
import os
import re
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterator, NoReturn, Sequence

from beam_jobs.cli import loading
from beam_jobs.cli.declared import respelt
from beam_jobs.cli.started import mark_command_start, mark_process_command
from beam_jobs.cli.values import LOG_LEVELS

__all__ = ["LogSettings", "log_settings", "configure_logging", "write_failure_log", "OWN_LOGGERS", "not_beam_error",
           "LOG_FORMAT", "worker_stderr_captured", "set_progress_display", "set_up_command", "run_as_command"]

OWN_LOGGERS = ("transforms", "beam_jobs")
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
_KEPT_RECORDS = 5000


@dataclass(frozen=True)
class LogSettings:
    """What the person asked to see: ``--verbose`` (Beam's INFO lines and full tracebacks) and the
    ``--log_level`` of the job's own loggers."""

    verbose: bool = False
    level: str = "INFO"

    @property
    def tracebacks(self) -> bool:
        """True if failures are shown with their traceback on the terminal."""
        return self.verbose or self.level == "DEBUG"


def log_settings(argv: Sequence[str]) -> LogSettings:
    """Reads ``--verbose`` and ``--log_level`` (or ``--log-level``) from the arguments (others are left alone)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--verbose", action="store_true", default=False)
    parser.add_argument("--log_level", default="INFO", type=str.upper)
    try:
        known, _ = parser.parse_known_args(respelt(argv, ("verbose", "log_level")))
    except SystemExit:  # a malformed --log_level is reported by the job's own parser
        return LogSettings()
    level = known.log_level if known.log_level in LOG_LEVELS else "INFO"
    return LogSettings(verbose=known.verbose, level=level)


class _TerminalHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is at each record (as ``logging.lastResort`` does: it follows
    ``worker_stderr_captured``), on a line above the progress display, if any."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ sets it; sys.stderr is used instead
        pass

    def emit(self, record: logging.LogRecord) -> None:
        with (_progress_display or contextlib.nullcontext)():
            super().emit(record)


_progress_display: Callable[[], ContextManager[None]] | None = None


def set_progress_display(line_above: Callable[[], ContextManager[None]] | None) -> None:
    """Registers the progress display while it is shown (None: none is): ``line_above()`` is a context
    manager within which a log line is written whole, above the progress bar."""
    global _progress_display
    _progress_display = line_above


def not_beam_error(record: logging.LogRecord) -> bool:
    """A filter that keeps Beam's error records (a failing step, with its traceback) off the terminal, also
    those Beam logs through the root logger (``S3Uploader._start_upload``'s traceback, Beam 2.77.0)."""
    from_beam = record.name.startswith("apache_beam") or (
        record.name == "root" and f"{os.sep}apache_beam{os.sep}" in (record.pathname or ""))
    return not (from_beam and record.levelno >= logging.ERROR)


class _NoTraceback(logging.Formatter):
    """Formats a record without its traceback (the log file of a failure has it)."""

    def format(self, record: logging.LogRecord) -> str:
        bare = logging.makeLogRecord(record.__dict__)
        bare.exc_info = bare.exc_text = bare.stack_info = None
        return super().format(bare)


class _KeptRecords(logging.Handler):
    """Keeps the last records, formatted with their tracebacks, for the log file of a failure."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: collections.deque[str] = collections.deque(maxlen=_KEPT_RECORDS)
        self.setFormatter(logging.Formatter("%(asctime)s " + LOG_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # logging must never fail the job; Handler.handleError reports it
            self.handleError(record)


# Beam's local runner logs what its worker processes log as "Worker: <LogEntry proto as text>".
_WORKER_LOGGER = "apache_beam.runners.portability.local_job_service"
_ENTRY_MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')
_ENTRY_LOCATION = re.compile(r'log_location: "([^"]*)"')
_OWN_PATH = re.compile(r"(?:^|/)((?:transforms|beam_jobs)/[\w/]+)\.py")


class _WorkerRecords(logging.Filter):
    """Shows the job's own lines logged in worker processes (``--direct_running_mode multi_processing``:
    Beam's ``Worker: ... message: "..."`` records) as the job's lines; Beam's only if verbose (``_settings``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "Worker: %s" or not record.args:
            return True
        entry = str(record.args[0])
        location = _ENTRY_LOCATION.search(entry)
        own = _OWN_PATH.search(location.group(1)) if location else None
        if own is None:
            return _settings.tracebacks or record.levelno >= logging.ERROR
        message = _ENTRY_MESSAGE.search(entry)
        text = message.group(1) if message else entry
        try:
            text = text.encode("latin-1", "backslashreplace").decode("unicode_escape")
        except UnicodeDecodeError:  # shown as logged
            pass
        record.name = own.group(1).replace("/", ".")
        record.msg, record.args = text, ()
        return record.levelno >= getattr(logging, _settings.level)


_kept: _KeptRecords | None = None
_settings: LogSettings | None = None
_worker_output = ""


def configure_logging(settings: LogSettings) -> None:
    """Sets up logging for a job run as a command (see the module docstring)."""
    global _kept, _settings
    terminal = _TerminalHandler()
    _settings = settings
    if settings.tracebacks:
        terminal.setFormatter(logging.Formatter(LOG_FORMAT))
    else:
        terminal.setFormatter(_NoTraceback(LOG_FORMAT))
        terminal.addFilter(not_beam_error)
    _kept = _KeptRecords()
    logging.basicConfig(level=logging.INFO if settings.verbose else logging.WARNING,
                        handlers=[terminal, _kept], force=True)  # Beam's PipelineOptions() called it already
    own = getattr(logging, settings.level)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(own)
    beam = logging.DEBUG if settings.level == "DEBUG" else logging.INFO if settings.verbose else logging.WARNING
    logging.getLogger("apache_beam").setLevel(beam)
    workers = logging.getLogger(_WORKER_LOGGER)
    workers.setLevel(logging.DEBUG if settings.level == "DEBUG" else logging.INFO)
    for old in [f for f in workers.filters if isinstance(f, _WorkerRecords)]:
        workers.removeFilter(old)
    workers.addFilter(_WorkerRecords())


def write_failure_log(job: str, err: BaseException) -> str | None:
    """Writes the kept log records and ``err``'s traceback to a new file in ``tfrecord-shards-logs``
    under the system's temporary folder; returns its path, or None when it cannot be written."""
    folder = os.path.join(tempfile.gettempdir(), "tfrecord-shards-logs")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(folder, f"{job}-{stamp}-{os.getpid()}.log")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f"{job} failed; command: {' '.join(sys.argv)}\n\n")
            if _kept is not None:
                fh.write("\n".join(_kept.lines) + "\n\n")
            if _worker_output:
                fh.write(f"What worker processes wrote to stderr:\n{_worker_output}\n\n")
            fh.write("".join(traceback.format_exception(type(err), err, err.__traceback__)))
    except OSError:
        return None
    return path


@contextlib.contextmanager
def worker_stderr_captured() -> Iterator[None]:
    """Keeps what worker processes print to stderr off the terminal while the block runs.

    Beam's SDK worker prints a failing bundle's traceback straight to the stderr worker processes
    share with the job (Beam 2.77). For the block, file descriptor 2 goes to a temporary file, whose
    text goes into the failure log; the job's own ``sys.stderr`` keeps writing to the terminal. Does
    nothing unless logging was set up for a command run without ``--verbose``/``--log_level DEBUG``.
    """
    global _worker_output
    if _settings is None or _settings.tracebacks:
        yield
        return
    previous = sys.stderr
    previous.flush()
    fd, path = tempfile.mkstemp(prefix="tfrecord-shards-workers-", suffix=".log")
    saved = os.dup(2)
    terminal = io.TextIOWrapper(io.FileIO(saved, "w", closefd=False), encoding="utf-8",
                                errors="backslashreplace", line_buffering=True)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = terminal
    try:
        yield
    finally:
        terminal.flush()
        os.dup2(saved, 2)
        os.close(saved)
        sys.stderr = previous
        try:
            with open(path, encoding="utf-8", errors="backslashreplace") as fh:
                _worker_output = fh.read()[-200_000:]
            os.remove(path)
        except OSError:
            _worker_output = ""


def set_up_command(argv: Sequence[str]) -> None:
    """Sets up what a job run as a command needs before it runs: logging, as ``argv`` asks, and the
    start its summary counts from (the process's, unless ``tfrecord-shards`` noted one)."""
    mark_command_start()
    configure_logging(log_settings(argv))


def run_as_command(run: Callable[..., int], module: str) -> NoReturn:
    """Runs a job module as ``python -m MODULE``, once its modules are loaded (``loading.resume``): sets up
    the command (``set_up_command``), then ``run``s the job and exits with its status."""
    loading.resume()
    mark_process_command()
    set_up_command(sys.argv[1:])
    sys.exit(run(sys.argv[1:], prog=f"python -m {module}"))
