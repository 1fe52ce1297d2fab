"""Log lines and the progress display share the terminal: a log line never lands inside the bar's line."""

from __future__ import annotations

import io
import logging
import threading

import pytest

from beam_jobs.cli import logs
from beam_jobs.cli.progress import _Reporter
from transforms.progress.report import Stage

SHARD_LINE = "wrote shard train-00003-of-00012.tfrecord: 21 records, 2.2 MiB"


class _Terminal(io.StringIO):
    """What a terminal is sent; ``while_writing`` is called at each write of text holding ``watch``."""

    def __init__(self, tty: bool, watch: str = "", while_writing=None) -> None:
        super().__init__()
        self._tty, self._watch, self._while_writing = tty, watch, while_writing

    def isatty(self) -> bool:
        return self._tty

    def write(self, text: str) -> int:
        if self._watch and self._watch in text and self._while_writing is not None:
            self._while_writing()
        return super().write(text)


def screen(text: str) -> list[str]:
    """The lines a terminal shows for ``text``: a carriage return goes back to the line's start."""
    lines = []
    for raw in text.split("\n"):
        line: list[str] = []
        at = 0
        for char in raw:
            if char == "\r":
                at = 0
                continue
            if at < len(line):
                line[at] = char
            else:
                line.append(char)
            at += 1
        lines.append("".join(line).rstrip())
    return lines


@pytest.fixture
def shard_log():
    """The job's shard logger, its lines written by the command's terminal handler to ``sys.stderr``."""
    logger = logging.getLogger("transforms.shard_sink")
    handler = logs._TerminalHandler()
    handler.setFormatter(logging.Formatter(logs.LOG_FORMAT))
    logger.addHandler(handler)
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger
    logger.removeHandler(handler)
    logger.setLevel(level)
    logger.propagate = propagate


def _reporter(stream, tmp_path) -> _Reporter:
    stage = Stage("writing shards", "records", 85, 265, 8 << 20)
    return _Reporter("build", str(tmp_path), lambda counts: stage, 3600.0, stream)


@pytest.mark.parametrize("tty", [True, False])
def test_no_progress_is_drawn_while_a_log_line_is_written(tty, tmp_path, shard_log, monkeypatch):
    drawn_meanwhile = []
    reporter = None

    def draw() -> None:
        got = reporter._lock.acquire(blocking=False)
        drawn_meanwhile.append(got)
        if got:
            reporter._lock.release()

    def try_to_draw() -> None:  # the progress thread, at that instant
        drawer = threading.Thread(target=draw)
        drawer.start()
        drawer.join()

    terminal = _Terminal(tty, watch=SHARD_LINE, while_writing=try_to_draw)
    monkeypatch.setattr("sys.stderr", terminal)
    reporter = _reporter(terminal, tmp_path)
    reporter.start()
    try:
        reporter._report()
        shard_log.info(SHARD_LINE)
    finally:
        reporter.stop()
    assert drawn_meanwhile == [False]


def test_a_log_line_takes_a_line_of_its_own_and_the_bar_comes_back_below_it(tmp_path, shard_log, monkeypatch):
    terminal = _Terminal(tty=True)
    monkeypatch.setattr("sys.stderr", terminal)
    reporter = _reporter(terminal, tmp_path)
    reporter.start()
    try:
        reporter._report()
        shard_log.info(SHARD_LINE)
        shard_log.info(SHARD_LINE)
        shown = screen(terminal.getvalue())
    finally:
        reporter.stop()
    assert shown[:2] == [f"INFO transforms.shard_sink: {SHARD_LINE}"] * 2
    assert shown[2].startswith("build [") and "writing shards: 85 of 265 records" in shown[2]
    assert len(shown) == 3


class _Waits:
    """A stop event whose ``wait`` returns at once, recording how long each asked; set after ``times``."""

    def __init__(self, times: int) -> None:
        self.asked: list[float] = []
        self._times = times

    def wait(self, seconds: float) -> bool:
        self.asked.append(seconds)
        return len(self.asked) > self._times

    def set(self) -> None:
        self._times = 0


@pytest.mark.parametrize("tty, interval", [(True, 5.0), (True, 0.1), (False, 0.1), (False, 5.0)])
def test_progress_is_reported_at_most_once_a_second(tty, interval, tmp_path):
    stream = _Terminal(tty)
    counted = iter(range(10, 1000, 10))
    reporter = _Reporter("build", str(tmp_path),
                         lambda counts: Stage("writing shards", "records", next(counted), 265, 8 << 20),
                         interval, stream)
    reporter._stop = waits = _Waits(6)
    reporter._loop()
    assert len(waits.asked) == 7 and min(waits.asked) >= 1.0, waits.asked
    assert max(waits.asked) == (max(interval, 1.0) if not tty else 1.0)
    reports = stream.getvalue().count("\r") if tty else stream.getvalue().count("\n")
    assert reports == 6
