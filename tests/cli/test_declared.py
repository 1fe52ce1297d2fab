"""The command answers --help and usage errors from the declared flags, without Beam, Pillow or numpy."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from beam_jobs.cli import jobs
from beam_jobs.cli.config import usage_problem
from transforms.archives import parquet_rows
from transforms.images import samples

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Measured about 0.09 s of CPU (BENCHMARKS.md, "Instant help"); before, 1.5 s. Generous for a loaded machine.
CPU_BOUND_S = 0.6
HEAVY = ("apache_beam", "PIL", "numpy")


def _cpu_of(*argv: str) -> tuple[subprocess.CompletedProcess, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "beam_jobs.cli.main", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


@pytest.mark.parametrize("argv, status, text", [
    (("--help",), 0, "commands:"),
    (("build", "--help"), 0, "--shard_size_mb"),
    (("verify", "--help"), 0, "--decode_with"),
    (("sample", "--help"), 0, "--broken"),
    (("build", "--input", "x", "--output_dir", "y", "--seed", "x"), 2,
     "build_shards: error: argument --seed: 'x' is not an integer"),
    (("reshard", "--output_dir", "y"), 2, "reshard: error: --input is required (TFRecord files"),
    (("build", "--input", "x", "--output_dir", "y", "--append", "--replace"), 2,
     "build_shards: error: --append keeps the set's shards and classes; it cannot be combined with --replace"),
])
def test_help_and_usage_errors_take_little_cpu(argv, status, text) -> None:
    done, cpu = _cpu_of(*argv)
    assert done.returncode == status, done.stderr
    assert text in done.stdout + done.stderr
    assert cpu <= CPU_BOUND_S, f"{' '.join(argv)} took {cpu:.2f} s of CPU"


def test_the_command_module_imports_no_beam_pillow_or_numpy() -> None:
    code = ("import sys; from beam_jobs.cli import main; main.run_command('build', ['--help'], 'x'); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & set(%r)))" % (HEAVY,))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-1] == "[]", done.stdout


@pytest.mark.parametrize("job, argv, problem", [
    (jobs.BUILD, ["--input", "a"], "--output_dir is required"),
    (jobs.BUILD, ["--input", "a", "--output_dir", "b", "--layout", "odd"],
     "argument --layout: invalid choice: 'odd' (choose from 'auto', 'classes', 'splits')"),
    (jobs.BUILD, ["--input", "a", "--output_dir", "b"], None),
    (jobs.BUILD, ["--output_dir", "b", "--runner", "DirectRunner"], None),  # Beam's flags: the job decides
    (jobs.VERIFY, ["--output_dir", "a", "--files", "b"], "give --output_dir (a shard set with manifest.json) "
                                                          "or --files (a pattern of TFRecord files), not both"),
    (jobs.INSPECT, ["f", "--limit", "0"], "argument --limit: '0' must be >= 1"),
    (jobs.SAMPLE, ["--size_mb", "1"], "the following arguments are required: --output"),
])
def test_usage_problem_from_the_declarations(job, argv, problem) -> None:
    assert usage_problem(job, argv) == problem


def test_declared_defaults_match_their_modules() -> None:
    assert jobs.PARQUET_COLUMNS == (parquet_rows.DEFAULT_IMAGE_COLUMN, parquet_rows.DEFAULT_LABEL_COLUMN)
    assert jobs.SAMPLE_CLASSES == tuple(samples.CLASS_STYLES)


def test_the_manifest_records_the_declared_flags() -> None:
    assert "image_threads" not in jobs.BUILD.recorded() and "append" not in jobs.BUILD.recorded()
    assert "output_dir" not in jobs.RESHARD.recorded()
    assert set(jobs.RESHARD.recorded()) == {"input", "split", "shard_size_mb", "num_shards", "compression",
                                            "input_compression", "seed", "skip_corrupt", "max_bad_fraction", "format",
                                            "name", "shard_sha256"}


@pytest.mark.slow
def test_a_build_run_as_a_module_refuses_a_local_dry_run_in_one_line(tmp_path) -> None:
    """Before, ``python -m beam_jobs.build_shards --dry_run True`` failed with a traceback: the plan job
    imported the build module again, and Beam's parser met its options class twice (``conflicting option
    string: --layout``). The module now refuses it as reshard and verify do, as ``tfrecord-shards build`` does."""
    from tests.shard_fixtures import make_class_tree

    make_class_tree(str(tmp_path / "in"), classes=("rose",), per_class=2, broken=False)
    done = subprocess.run([sys.executable, "-m", "beam_jobs.build_shards", "--input", str(tmp_path / "in"),
                           "--output_dir", str(tmp_path / "out"), "--dry_run", "True"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--dry_run" in lines[0] and "DataflowRunner" in lines[0], done.stderr
    assert not (tmp_path / "out").exists()
