"""What the jobs print reads as English and says each thing once; progress guesses no time left too early."""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys

import pytest

from beam_jobs import inspect_shard
from beam_jobs.cli import progress
from tests.shard_fixtures import make_class_tree
from tests.tfrecord_fixtures import write_shard_set
from transforms.progress.report import Stage

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_inspect_counts_one_record_in_the_singular(tmp_path) -> None:
    shards = write_shard_set(str(tmp_path), splits={"train": 1}, per_shard=3)
    out = io.StringIO()
    assert inspect_shard.run([shards.path(shards.shard_names[0]), "--limit", "1"], out=out) == 0
    assert out.getvalue().endswith("# stopped after 1 record (--limit); more follow\n")


@pytest.mark.slow
def test_a_build_logs_no_line_that_repeats_its_summary(tmp_path) -> None:
    make_class_tree(str(tmp_path / "in"), per_class=1, broken=False)
    done = subprocess.run([sys.executable, "-m", "beam_jobs.cli.main", "build", "--input", str(tmp_path / "in"),
                           "--output_dir", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Published 3 records to ")
    assert "wrote shard train-00000-of-00001.tfrecord" in done.stderr  # one line per shard stays
    assert "published" not in done.stderr.lower(), done.stderr


def test_the_first_report_of_a_stage_guesses_no_time_left(tmp_path) -> None:
    """The job's start-up (two reports without a stage) is no part of the first stage's rate.

    Before, the first stage was taken to start with the reporter: its first
    line guessed the time left from 15 s of which 10 were start-up, although
    the stage had been seen once.
    """
    clock = itertools.count(0.0, 5.0)  # one report every 5 s
    stages = iter([None, None, Stage("reading images", "inputs", 10, 100),
                   Stage("reading images", "inputs", 20, 100)])
    stream = io.StringIO()

    def stage_of(counts):
        stage = next(stages, None)
        if stage is not None and stage.items == 20:
            reporter._stop.set()
        return stage

    reporter = progress._Reporter("build", str(tmp_path), stage_of, 0.001, stream, clock=lambda: next(clock))
    reporter.start()
    reporter._thread.join(timeout=60)
    lines = stream.getvalue().splitlines()
    assert lines == ["build: reading images: 10 of 100 inputs (10%), 2.0 inputs/s",
                     "build: reading images: 20 of 100 inputs (20%), 2.0 inputs/s, about 40 s left"], lines


def test_image_count_lines_say_one_record() -> None:
    from transforms.images.build_summary import image_lines

    lines = image_lines({"converted": {"tga": 1}, "png_chunks_fixed": {"iccp_srgb": 1}}, "tf")
    assert lines[0] == "  converted to PNG for TensorFlow: 1 record (tga 1)"
    assert lines[1].startswith("  PNG chunks fixed for TensorFlow: 1 record (")
