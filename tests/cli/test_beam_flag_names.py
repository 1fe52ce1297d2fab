"""Flags spelt with dashes are the declared flags; a misspelt flag is answered with the closest one, before Beam."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from beam_jobs.cli import jobs
from beam_jobs.cli.beam_flag_names import BEAM_FLAG_NAMES
from beam_jobs.cli.config import known_flag_names, usage_problem
from beam_jobs.cli.declared import respelt, unknown_flag_problem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_NAMES = known_flag_names(jobs.BUILD)


@pytest.mark.parametrize("argv, spelt", [
    (["--shard-size-mb", "6"], ["--shard_size_mb", "6"]),
    (["--shard-size-mb=6"], ["--shard_size_mb=6"]),
    (["--output-dir", "a-b", "--input", "--x-y"], ["--output_dir", "a-b", "--input", "--x-y"]),  # values kept
    (["--temp-location", "gs://b/t", "--direct-num-workers=2"], ["--temp_location", "gs://b/t",
                                                                  "--direct_num_workers=2"]),
    (["--job-server-timeout", "5", "--job_server_timeout", "5"],  # Beam's own spellings, kept
     ["--job-server-timeout", "5", "--job_server_timeout", "5"]),
    (["--no-such-flag", "1"], ["--no-such-flag", "1"]),
    (["--", "--shard-size-mb"], ["--", "--shard-size-mb"]),
    (["--help-beam"], ["--help_beam"]),
])
def test_dashed_flags_are_spelt_as_declared(argv, spelt) -> None:
    assert respelt(argv, BUILD_NAMES) == spelt


@pytest.mark.parametrize("typed, problem", [
    ("--shard_sise_mb", "unknown flag --shard_sise_mb; did you mean --shard_size_mb? (see --help)"),
    ("--shard-sise-mb=3", "unknown flag --shard-sise-mb; did you mean --shard_size_mb? (see --help)"),
    ("--split_fraction", "unknown flag --split_fraction; did you mean --split_fractions? (see --help)"),
    ("--direct_num_worker", "unknown flag --direct_num_worker; did you mean --direct_num_workers? (see --help)"),
    ("--tmp_location", "unknown flag --tmp_location; did you mean --temp_location? (see --help)"),
    ("--frobnicate", "unknown flag --frobnicate (see --help; --help_beam lists Beam's options)"),
])
def test_a_misspelt_flag_is_answered_with_the_closest(typed, problem) -> None:
    assert unknown_flag_problem(typed, jobs.BUILD.flag_names(), BEAM_FLAG_NAMES) == problem


@pytest.mark.parametrize("job, argv, problem", [
    (jobs.BUILD, ["--input", "a", "--output_dir", "b", "--shard_sise_mb", "6"],
     "unknown flag --shard_sise_mb; did you mean --shard_size_mb? (see --help)"),
    (jobs.BUILD, ["--input", "a", "--output_dir", "b", "--runner", "DirectRunner", "--split_fraction", "x"],
     "unknown flag --split_fraction; did you mean --split_fractions? (see --help)"),
    (jobs.BUILD, ["--input", "a", "--output_dir", "b", "--temp_location", "/tmp"], None),  # Beam's: the job decides
    (jobs.BUILD, ["--help_beam"], None),  # the job prints Beam's options
    (jobs.BUILD, ["--input", "a", "--output_dir", "b", "--runner", "DaskRunner",
                  "--dask_client_address", "tcp://127.0.0.1:8786"], None),  # Beam's DaskOptions
    (jobs.INSPECT, ["f", "--help_beam"], "unknown flag --help_beam (see --help)"),
    (jobs.VERIFY, ["--output_dir", "a", "--decode_image"],
     "unknown flag --decode_image; did you mean --decode_images? (see --help)"),
    (jobs.INSPECT, ["f", "--limt", "2"], "unknown flag --limt; did you mean --limit? (see --help)"),
    (jobs.INSPECT, ["f", "--temp_location", "x"], "unknown flag --temp_location (see --help)"),  # no Beam
])
def test_usage_problem_names_the_closest_flag(job, argv, problem) -> None:
    assert usage_problem(job, argv) == problem


def _main_in_subprocess(*argv: str) -> subprocess.CompletedProcess:
    """Runs ``tfrecord-shards ARGV`` in a fresh interpreter; its last stdout line says whether Beam was imported."""
    code = ("import sys\nfrom beam_jobs.cli.main import main\n"
            f"status = main({list(argv)!r})\n"
            "print(status, 'apache_beam' in sys.modules)\n")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})


@pytest.mark.parametrize("argv, line", [
    (("build", "--input", "x", "--output_dir", "y", "--shard_sise_mb", "6"),
     "build_shards: error: unknown flag --shard_sise_mb; did you mean --shard_size_mb? (see --help)"),
    (("build", "--input", "x", "--output_dir", "y", "--split_fraction", "train=1"),
     "build_shards: error: unknown flag --split_fraction; did you mean --split_fractions? (see --help)"),
    (("reshard", "--input", "x", "--output_dir", "y", "--direct_num_worker", "2"),
     "reshard: error: unknown flag --direct_num_worker; did you mean --direct_num_workers? (see --help)"),
    (("build", "--input", "x", "--output-dir", "y", "--shard-size-mb=0"),  # dashed: the flag, its value checked
     "build_shards: error: argument --shard_size_mb: '0' must be between"),
])
def test_a_usage_error_is_told_before_beam_is_imported(argv, line) -> None:
    done = _main_in_subprocess(*argv)
    assert done.stdout.splitlines()[-1] == "2 False", (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines()[-1].startswith(line), done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--help_beam", "--help-beam"])
def test_the_command_prints_beams_options(flag) -> None:
    done = subprocess.run([sys.executable, "-m", "beam_jobs.cli.main", "build", flag], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    assert "--direct_num_workers" in done.stdout and "--temp_location" in done.stdout


@pytest.mark.slow
def test_the_listed_beam_flags_are_those_beam_defines() -> None:
    from beam_jobs.cli import main  # every job's options classes defined, as Beam's parser then sees them

    for module, _ in main.COMMANDS.values():
        importlib.import_module(module)
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms import beam_compat

    beam_compat.register_dask_options()  # the jobs register them when a command line asks for Dask

    parsers: list = []
    PipelineOptions([]).get_all_options(add_extra_args_fn=parsers.append)
    defined = {s[2:] for action in parsers[0]._actions for s in action.option_strings if s.startswith("--")}
    own = {name for job in jobs.JOBS.values() for name in job.flag_names()}
    assert BEAM_FLAG_NAMES == defined - own - {"help"}
