"""Progress counters across processes, and the progress lines and bars (pure)."""

from __future__ import annotations

import io
import multiprocessing
import os

import pytest

from beam_jobs.cli import progress
from transforms.progress import counters
from transforms.progress.report import Stage, format_seconds, plural, progress_bar, progress_line


def _count_in_child(folder: str, n: int) -> None:
    os.environ[counters.PROGRESS_ENV] = folder
    tally = counters.Tally(counters.RECORDS_READ, every=7)
    for _ in range(n):
        tally.add(1, 100)
    tally.flush()
    counters.flush()


@pytest.mark.slow
def test_counts_of_several_processes_add_up(tmp_path, monkeypatch):
    folder = str(tmp_path)
    context = multiprocessing.get_context("spawn")
    children = [context.Process(target=_count_in_child, args=(folder, n)) for n in (10, 25)]
    for child in children:
        child.start()
    for child in children:
        child.join()
        assert child.exitcode == 0
    monkeypatch.setenv(counters.PROGRESS_ENV, folder)
    counters.note(counters.RECORDS_READ, 5, 500)
    counters.flush()
    assert counters.read_counts(folder) == {counters.RECORDS_READ: (40, 4000)}


def test_without_a_listener_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(counters.PROGRESS_ENV, raising=False)
    counters.note(counters.IMAGES_READ, 1, 10)
    counters.flush()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("stage, seconds, line", [
    (Stage("reading images", "inputs", 50, 200, 5 * 2**20), 10.0,
     "build: reading images: 50 of 200 inputs (25%), 5.0 MiB, 512.0 KiB/s, about 30 s left"),
    (Stage("checking records", "records", 10, None, 2048, 8192), 8.0,
     "build: checking records: 10 records (25%), 2.0 KiB of 8.0 KiB, 256 B/s, about 24 s left"),
    # G4: no time left guessed from under ETA_AFTER_SECONDS of measured rate
    (Stage("checking records", "records", 10, None, 2048, 8192), 2.0,
     "build: checking records: 10 records (25%), 2.0 KiB of 8.0 KiB, 1.0 KiB/s"),
    (Stage("listing inputs", "inputs", 7), 1.0, "build: listing inputs: 7 inputs, 7.0 inputs/s"),
])
def test_progress_line(stage, seconds, line):
    assert progress_line("build", stage, seconds) == line


def test_progress_bar_shows_the_fraction():
    bar = progress_bar("verify", Stage("checking records", "records", 1, 4), 1.0, width=8)
    assert bar.startswith("verify [##......]  25% checking records: 1 of 4 records")


@pytest.mark.parametrize("count, noun, text", [
    (1, "shard", "1 shard"), (2, "shard", "2 shards"), (0, "shard", "0 shards"),
    (1, "class", "1 class"), (3, "class", "3 classes"), (1, "dead letter", "1 dead letter"),
])
def test_plural(count, noun, text):
    assert plural(count, noun) == text


def test_format_seconds():
    assert [format_seconds(s) for s in (5, 75, 3725)] == ["5 s", "1 min 15 s", "1 h 02 min"]


def test_an_unchanged_progress_line_is_printed_once(tmp_path, monkeypatch):
    """G4: while the counts stand still (e.g. a shuffle), the plain log gets no repeated line."""
    monkeypatch.setattr(progress, "_BAR_SECONDS", 0.001)  # the shortest interval: 20 polls, not 20 s
    stream = io.StringIO()
    polls = []

    def stage_of(counts):
        polls.append(1)
        if len(polls) == 20:
            reporter._stop.set()
        items = 5 if len(polls) < 10 else 7
        return Stage("reading records", "records", items, None, 100 * items)

    reporter = progress._Reporter("reshard", str(tmp_path), stage_of, 0.001, stream)
    reporter.start()
    reporter._thread.join(timeout=60)  # it stops itself at the 20th poll
    reporter.stop()
    lines = stream.getvalue().splitlines()
    assert len(polls) >= 20
    assert len(lines) == 2, lines
    assert lines[0].startswith("reshard: reading records: 5 records, 500 B"), lines
    assert lines[1].startswith("reshard: reading records: 7 records, 700 B"), lines


def test_reshard_names_the_shuffle():
    """G4: all input bytes read and nothing written yet: the stage is the shuffle, not reading."""
    total = 1000
    reading = progress.reshard_stage({counters.RECORDS_READ: (4, 400)}, total)
    shuffling = progress.reshard_stage({counters.RECORDS_READ: (10, 1000)}, total)
    writing = progress.reshard_stage({counters.RECORDS_READ: (10, 1000),
                                      counters.RECORDS_WRITTEN: (3, 300)}, total)
    assert [s.label for s in (reading, shuffling, writing)] == [
        "reading records", "shuffling records", "writing shards"]
    assert progress.reshard_stage({counters.RECORDS_READ: (10, 1000)}, None).label == "reading records"
