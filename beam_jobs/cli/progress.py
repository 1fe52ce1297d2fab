"""Progress reports while a job runs on a local runner: a live bar on a terminal, lines otherwise.

The job's process names a fresh folder in ``PROGRESS_ENV`` before the pipeline starts; the steps
count into it (``transforms.progress.counters``) from every worker; a thread of the job's process
reads the counts every ``--progress_interval`` seconds (a terminal's bar every second) and prints
where the job is. On other runners nothing is started: their workers do not inherit the variable.
"""

from __future__ import annotations

import beam_jobs.quiet_beam  # noqa: F401  (first: Beam imported without its BigQuery warning)
import contextlib
import functools
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Callable, Iterator, Mapping, TextIO

from beam_jobs.cli import logs
from beam_jobs.cli.config import JobConfig, ReshardConfig, VerifyConfig
from transforms.errors import ManifestError
from transforms.progress import counters as c
from transforms.progress.report import ETA_AFTER_SECONDS, Stage, progress_bar, progress_line
from transforms.storage import output_folder
from transforms.tfrecord.compression import compression_of

__all__ = ["report_progress", "build_progress", "plan_progress", "verify_progress", "reshard_progress", "reshard_stage",
           "manifest_totals"]

# A terminal's bar is redrawn this often; nothing is reported more often.
_BAR_SECONDS = 1.0

Counts = Mapping[str, tuple[int, int]]


class _Reporter:
    """Prints the stage ``stage_of`` makes of the counts, every ``interval`` seconds."""

    def __init__(self, job: str, folder: str, stage_of: Callable[[Counts], Stage | None],
                 interval: float, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self._job = job
        self._clock = clock
        self._folder = folder
        self._stage_of = stage_of
        self._stream = stream
        self._tty = stream.isatty()
        self._interval = _BAR_SECONDS if self._tty else max(interval, _BAR_SECONDS)
        self._stop = threading.Event()
        self._lock = threading.RLock()  # the terminal is shared with log lines (line_above)
        self._shown = 0
        self._printed = None  # (label, items, bytes) of the last plain line
        self._last = None  # the last stage reported, its seconds, and whether its time left is known
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        # Where the stage reported got to: see _report.
        self._label = None
        self._polled = self._seen = self._moved = self._since = clock()
        self._counted = None
        self._bar = ""  # the bar last drawn

    def start(self) -> None:
        logs.set_progress_display(self.line_above)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        logs.set_progress_display(None)
        if self._tty:
            self.clear()
            return
        # A plain log ends with where the run got to, also when it ended between two reports
        # (what this process counted since it last wrote its counts, written first).
        c.flush(now=True)
        stage = self._stage_of(c.read_counts(self._folder))
        if stage is not None and (stage.label, stage.items, stage.nbytes) != self._printed:
            same = self._last is not None and self._last[0].label == stage.label
            seconds, eta = self._last[1:] if same else (0.0, False)
            self._stream.write(progress_line(self._job, stage, seconds, eta) + "\n")
            self._stream.flush()

    def clear(self) -> None:
        """Blanks the bar's line, so that a log line can take it; the next report redraws it."""
        with self._lock:
            if self._shown:
                self._stream.write("\r" + " " * self._shown + "\r")
                self._stream.flush()
                self._shown = 0

    @contextlib.contextmanager
    def line_above(self) -> Iterator[None]:
        """Within the block, lines written to the terminal (a log line) go above the progress display:
        nothing is reported meanwhile, and a bar is drawn again below what the block wrote."""
        with self._lock:
            bar = self._bar if self._shown else None
            self.clear()
            try:
                yield
            finally:
                if bar is not None:
                    self._stream.write(bar)
                    self._shown = len(bar)
                    self._stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._report()

    def _report(self) -> None:
        """Reads the counts and reports where the job is.

        A stage is taken to start at the last report before it was seen (the first one too: the job's start-up
        before it is no part of its rate); its rate is measured up to the last report at which its counts moved.
        The time left is guessed only once the stage was watched for ETA_AFTER_SECONDS: on its first report its
        rate is one sighting's guess.
        """
        stage = self._stage_of(c.read_counts(self._folder))
        now, before = self._clock(), self._polled
        self._polled = now
        if stage is None:
            return
        if stage.label != self._label:
            self._label, self._since, self._seen = stage.label, before, now
        if (stage.items, stage.nbytes) != self._counted:
            self._counted, self._moved = (stage.items, stage.nbytes), now
        seconds = self._moved - self._since
        eta = now - self._seen >= ETA_AFTER_SECONDS
        with self._lock:
            if self._tty:
                text = progress_bar(self._job, stage, seconds, eta=eta)
                self._stream.write("\r" + text.ljust(self._shown))
                self._shown = max(self._shown, len(text))
                self._bar = text
            elif (stage.label, stage.items, stage.nbytes) != self._printed:  # no repeated line
                self._stream.write(progress_line(self._job, stage, seconds, eta) + "\n")
                self._printed = (stage.label, stage.items, stage.nbytes)
            self._last = (stage, seconds, eta)
            self._stream.flush()


@contextlib.contextmanager
def report_progress(job: str, cfg: JobConfig, stage_of: Callable[[Counts], Stage | None]) -> Iterator[None]:
    """Reports progress every ``cfg.progress_interval`` seconds while the block runs, on the local runners only."""
    if not cfg.local:
        yield
        return
    folder = tempfile.mkdtemp(prefix="tfrecord-shards-progress-")
    previous = os.environ.get(c.PROGRESS_ENV)
    os.environ[c.PROGRESS_ENV] = folder
    reporter = _Reporter(job, folder, stage_of, cfg.progress_interval, sys.stderr)
    reporter.start()
    try:
        yield
    finally:
        reporter.stop()
        if previous is None:
            os.environ.pop(c.PROGRESS_ENV, None)
        else:
            os.environ[c.PROGRESS_ENV] = previous
        shutil.rmtree(folder, ignore_errors=True)


def _build_stage(counts: Counts, reading: str = "reading images") -> Stage | None:
    listed, _ = counts.get(c.INPUTS_LISTED, (0, 0))
    read, read_bytes = counts.get(c.IMAGES_READ, (0, 0))
    accepted, _ = counts.get(c.IMAGES_ACCEPTED, (0, 0))
    duplicates, _ = counts.get(c.IMAGES_DUPLICATE, (0, 0))  # dropped before planning: not to be written
    written, written_bytes = counts.get(c.RECORDS_WRITTEN, (0, 0))
    if written:
        return Stage("writing shards", "records", written, accepted - duplicates or None, written_bytes)
    if read:
        return Stage(reading, "inputs", read, listed or None, read_bytes)
    if listed:
        return Stage("listing inputs", "inputs", listed)
    return None


def build_progress(cfg: JobConfig) -> contextlib.AbstractContextManager:
    """Progress of the build job: inputs read of inputs listed, then records written."""
    return report_progress("build", cfg, _build_stage)


def plan_progress(cfg: JobConfig) -> contextlib.AbstractContextManager:
    """Progress of the plan job: the build's stages up to reading, which reads headers (it writes nothing)."""
    return report_progress("plan", cfg, functools.partial(_build_stage, reading="reading headers"))


def _uncompressed_bytes(paths_and_sizes: Mapping[str, int]) -> int | None:
    """Total size of the files, when every one is uncompressed (record bytes then match it)."""
    if any(compression_of(path, "auto") != "none" for path in paths_and_sizes):
        return None
    return sum(paths_and_sizes.values())


def verify_progress(cfg: VerifyConfig) -> contextlib.AbstractContextManager:
    """Progress of the verify job: records read, of the records and bytes to read where known (a shard
    set's manifest is read here too, on the local runners only)."""
    records = total_bytes = None
    if cfg.shards:
        total_bytes = _uncompressed_bytes({s.path: s.size for s in cfg.shards})
    elif cfg.folder is not None and cfg.local:
        records, total_bytes = manifest_totals(cfg.folder)

    def stage(counts: Counts) -> Stage | None:
        done, nbytes = counts.get(c.RECORDS_READ, (0, 0))
        return Stage("checking records", "records", done, records, nbytes, total_bytes) if done else None

    return report_progress("verify", cfg, stage)


def manifest_totals(folder: str) -> tuple[int | None, int | None]:
    """(records, bytes of uncompressed shards) a shard set's manifest lists; Nones if unreadable (the
    verify job's report has that problem)."""
    try:
        manifest = output_folder.read_manifest(folder)
    except (ManifestError, OSError):
        return None, None
    size = sum(split.bytes for split in manifest.splits.values())
    return manifest.records, size if manifest.compression == "none" else None


def reshard_stage(counts: Counts, total_bytes: int | None) -> Stage | None:
    """Where a reshard is: reading records, shuffling them (all read, none written), writing shards."""
    read, read_bytes = counts.get(c.RECORDS_READ, (0, 0))
    written, written_bytes = counts.get(c.RECORDS_WRITTEN, (0, 0))
    if written:
        return Stage("writing shards", "records", written, read, written_bytes)
    if read and total_bytes and read_bytes >= total_bytes:
        return Stage("shuffling records", "records", read, None, read_bytes)
    if read:
        return Stage("reading records", "records", read, None, read_bytes, total_bytes)
    return None


def reshard_progress(cfg: ReshardConfig) -> contextlib.AbstractContextManager:
    """Progress of the reshard job: bytes of the input files read, then records written."""
    sizes = {m.path: m.size_in_bytes for m in cfg.files}  # as the job matched them to check them
    total_bytes = _uncompressed_bytes(sizes) if sizes else None
    return report_progress("reshard", cfg, lambda counts: reshard_stage(counts, total_bytes))
