"""Each job's config (beam_jobs/cli/config.py): built once from the declared flags, checked in __post_init__."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from beam_jobs.cli import jobs
from beam_jobs.cli.config import (BEAM_FLAGS, CONFIGS, BuildConfig, PlanConfig, ReshardConfig, VerifyConfig,
                                  usage_problem)
from beam_jobs.cli.declared import Job, flag_parser
from transforms.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
_PUBLISH = ["--input", "in", "--output_dir", "out"]


def parsed(job: Job, argv: list[str], **beam: Any) -> dict[str, Any]:
    """The job's declared flags parsed from ``argv`` (as the command parses them), with Beam's flags ``beam``."""
    return {**vars(flag_parser(job).parse_args(argv)), **beam}


# What a job finds before its pipeline (its make_config), besides the flags' fields.
_FOUND = {"workers_note", "handback", "policy", "found",
          "tally", "state", "published_shards", "files", "shards", "decoders", "report_path", "split_ranges"}


@pytest.mark.parametrize("config", sorted(set(CONFIGS.values()), key=lambda c: c.__name__))
def test_a_field_per_declared_flag(config):
    fields = {field.name for field in dataclasses.fields(config)}
    declared = {flag.name for flag in config.JOB.flags()}
    assert declared <= fields
    assert fields - declared - _FOUND == set(BEAM_FLAGS)


@pytest.mark.parametrize("config, argv, field, value", [
    (BuildConfig, ["--input", "a", "--input", "b", "--output_dir", "out"], "input", ("a", "b")),
    (BuildConfig, ["--input", "a", "--output_dir", "out/"], "output_dir", "out"),
    (BuildConfig, ["--input", "a", "--output_dir", "/"], "output_dir", "/"),
    (BuildConfig, _PUBLISH + ["--shard_size_mb", "2"], "target_bytes", 2 * MIB),
    (BuildConfig, _PUBLISH + ["--max_image_mb", "0.5"], "max_image_bytes", MIB // 2),
    (BuildConfig, _PUBLISH + ["--seed", "-3"], "seed", -3),
    (BuildConfig, _PUBLISH + ["--image_mode", "raw", "--resize", "4x3"], "resize", (4, 3)),
    (BuildConfig, _PUBLISH + ["--feature", "a:int64", "--feature", "b:float"], "feature", ("a:int64", "b:float")),
    (BuildConfig, _PUBLISH + ["--feature", "a:int64"], "features", {"a": "int64"}),
    (BuildConfig, _PUBLISH + ["--split_fractions", "train=0.75,test=0.25"], "split_fraction_map",
     {"train": 0.75, "test": 0.25}),
    (BuildConfig, _PUBLISH + ["--class_names", "a, b"], "class_name_list", ["a", "b"]),
    (BuildConfig, _PUBLISH + ["--image_threads", "3"], "image_threads", 3),
    (BuildConfig, _PUBLISH + ["--near_duplicates", "reject"], "near_duplicates", "reject"),
    (BuildConfig, _PUBLISH, "tfds_name", "out"),
    (BuildConfig, _PUBLISH + ["--name", "my_set"], "tfds_name", "my_set"),
    (BuildConfig, _PUBLISH + ["--log_level", "debug"], "log_level", "DEBUG"),
    (BuildConfig, _PUBLISH + ["--progress_interval", "0.5"], "progress_interval", 0.5),
    (PlanConfig, _PUBLISH + ["--rate_mb_s", "5"], "rate_mb_s", 5.0),
    (PlanConfig, _PUBLISH + ["--plan_json", "p.json"], "plan_json", "p.json"),
    (ReshardConfig, _PUBLISH + ["--skip_corrupt"], "skip_corrupt", True),
    (ReshardConfig, _PUBLISH + ["--input_compression", "gzip"], "input_compression", "gzip"),
    (ReshardConfig, _PUBLISH + ["--max_record_mb", "2"], "max_record_bytes", 2 * MIB),
    (VerifyConfig, ["--output_dir", "set/"], "folder", "set"),
    (VerifyConfig, ["--output_dir", "set"], "target", "set"),
    (VerifyConfig, ["--files", "a/*.tfrecord"], "folder", None),
    (VerifyConfig, ["--files", "a/*.tfrecord"], "target", "a/*.tfrecord"),
    (VerifyConfig, ["--output_dir", "set", "--report", "r.json"], "keep_report", True),
    (VerifyConfig, ["--output_dir", "set"], "keep_report", False),
    (VerifyConfig, ["--output_dir", "set", "--decode_with", "pillow"], "decode_with", "pillow"),
])
def test_a_flag_lands_in_its_field(config, argv, field, value):
    assert getattr(config.from_flags(parsed(config.JOB, argv)), field) == value


@pytest.mark.parametrize("beam, field, value", [
    ({}, "local", True),
    ({}, "dataflow_dry_run", False),
    ({"runner": "DataflowRunner"}, "local", False),
    ({"runner": "DataflowRunner", "dry_run": "True"}, "dataflow_dry_run", True),  # Beam keeps the text
    ({"runner": "DirectRunner", "direct_num_workers": 0}, "direct_num_workers", 0),
    ({"max_num_workers": 7}, "max_num_workers", 7),
    ({"temp_location": "gs://b/tmp"}, "temp_location", "gs://b/tmp"),
    ({"no_auth": True}, "no_auth", True),
])
def test_beams_flags_land_in_their_fields(beam, field, value):
    assert getattr(BuildConfig.from_flags(parsed(jobs.BUILD, _PUBLISH, **beam)), field) == value


@pytest.mark.parametrize("job, argv, flag, problem", [
    (jobs.BUILD, [], "--input", "--input is required (a folder of class folders"),
    (jobs.BUILD, ["--input", "a"], "--output_dir", "--output_dir is required"),
    (jobs.BUILD, _PUBLISH + ["--split", "../up"], "--split", "must match [A-Za-z0-9_-]+"),
    (jobs.BUILD, _PUBLISH + ["--split_fractions", "train=0.5"], "--split_fractions", "must sum to 1"),
    (jobs.BUILD, _PUBLISH + ["--feature", "x"], "--feature", "must be name:type"),
    (jobs.BUILD, _PUBLISH + ["--label_regex", "("], "--label_regex", "does not compile"),
    (jobs.BUILD, _PUBLISH + ["--grayscale"], "--grayscale", "need --image_mode reencode or raw"),
    (jobs.BUILD, _PUBLISH + ["--resize_mode", "fit"], "--resize_mode", "needs --resize WIDTHxHEIGHT"),
    (jobs.BUILD, _PUBLISH + ["--image_mode", "reencode", "--exif_orientation", "keep"], "--exif_orientation",
     "is for --image_mode tf or passthrough; reencode always applies"),
    (jobs.BUILD, _PUBLISH + ["--jpeg_quality", "101"], "--jpeg_quality", "must be 1-100, got 101"),
    (jobs.BUILD, _PUBLISH + ["--max_image_mb", "inf"], "--max_image_mb", "must be a finite number"),
    (jobs.BUILD, _PUBLISH + ["--near_duplicate_distance", "40"], "--near_duplicate_distance",
     "must be 0-31 bits, got 40"),
    (jobs.BUILD, _PUBLISH + ["--class_names", "a", "--labels_file", "l.txt"], "--labels_file", "not both"),
    (jobs.BUILD, _PUBLISH + ["--class_names", " , "], "--class_names", "is empty"),
    (jobs.BUILD, _PUBLISH + ["--append", "--replace"], "--replace", "cannot be combined with --replace"),
    (jobs.BUILD, _PUBLISH + ["--append", "--num_shards", "2"], "--num_shards", "cannot be combined"),
    (jobs.BUILD, _PUBLISH + ["--append", "--class_names", "a"], "--class_names", "cannot be combined"),
    (jobs.PLAN, ["--input", "a"], "--output_dir", "--output_dir is required"),
    (jobs.PLAN, _PUBLISH + ["--resize", "2x2"], "--resize", "need --image_mode reencode or raw"),
    (jobs.RESHARD, ["--output_dir", "b"], "--input", "--input is required (TFRecord files"),
    (jobs.RESHARD, _PUBLISH + ["--split", "a/b"], "--split", "must match"),
    (jobs.VERIFY, [], "--output_dir", "say what to verify"),
    (jobs.VERIFY, ["--output_dir", "a", "--files", "b"], "--files", "not both"),
])
def test_a_wrong_combination_is_one_usage_error_naming_the_flag(job, argv, flag, problem):
    told = usage_problem(job, argv)
    assert told is not None and problem in told and flag in told and "\n" not in told
    with pytest.raises(UsageError) as raised:  # the same line as the job prints, from the same builder
        CONFIGS[job.name].from_flags(parsed(job, argv))
    assert str(raised.value) == told


@pytest.mark.parametrize("beam, problem", [
    ({"direct_num_workers": -1}, "--direct_num_workers must be >= 0"),
    ({"runner": "DirectRunner", "dry_run": "True"}, "--dry_run only translates a job for --runner DataflowRunner"),
])
def test_beams_flags_are_checked_with_the_jobs(beam, problem):
    with pytest.raises(UsageError, match=problem):
        VerifyConfig.from_flags(parsed(jobs.VERIFY, ["--output_dir", "a"], **beam))


@pytest.mark.parametrize("job, instead", [(jobs.BUILD, "tfrecord-shards plan shows what a build would do"),
                                           (jobs.PLAN, "a plan writes nothing anyway: leave --dry_run out")])
def test_a_builds_local_dry_run_is_refused_naming_the_plan(job, instead):
    with pytest.raises(UsageError, match="--dry_run only translates") as raised:
        CONFIGS[job.name].from_flags(parsed(job, _PUBLISH, runner="DirectRunner", dry_run="True"))
    assert str(raised.value).endswith(instead) and "\n" not in str(raised.value)


def test_an_append_has_no_dataflow_dry_run():
    with pytest.raises(UsageError, match="--append reads the published set; it has no Dataflow dry run"):
        BuildConfig.from_flags(parsed(jobs.BUILD, _PUBLISH + ["--append"], runner="DataflowRunner", dry_run="True"))


def test_a_config_is_frozen_and_checked_again_when_changed():
    cfg = BuildConfig.from_flags(parsed(jobs.BUILD, _PUBLISH + ["--append"]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 1  # type: ignore[misc]
    with pytest.raises(UsageError, match="cannot be combined with --replace"):
        dataclasses.replace(cfg, replace=True)


def test_a_flag_declared_without_its_field_fails_at_once():
    class Missing(ReshardConfig):
        JOB = dataclasses.replace(jobs.RESHARD, run_flags=(*jobs.RESHARD.run_flags, jobs.VERIFY_FLAGS))

    with pytest.raises(TypeError, match="unexpected keyword argument"):
        Missing.from_flags(parsed(jobs.RESHARD, _PUBLISH) | parsed(jobs.VERIFY, ["--output_dir", "o"]))


@pytest.mark.parametrize("argv, recorded", [
    (_PUBLISH, {"input": ["in"], "split": "train", "resize": None, "feature": None, "near_duplicates": None,
                "near_duplicate_distance": None}),  # off by default: not recorded
    (_PUBLISH + ["--near_duplicates", "report"], {"near_duplicates": "report", "near_duplicate_distance": 6}),
    (_PUBLISH + ["--split", "val", "--image_mode", "raw", "--resize", "4x3", "--feature", "a:int64"],
     {"split": "val", "resize": "4x3", "feature": ["a:int64"]}),
    (_PUBLISH + ["--near_duplicates", "reject", "--near_duplicate_distance", "4"],
     {"near_duplicates": "reject", "near_duplicate_distance": 4}),
    (_PUBLISH + ["--shard_sha256"], {"shard_sha256": True}),
])
def test_the_build_records_its_declared_options(argv, recorded):
    options = BuildConfig.from_flags(parsed(jobs.BUILD, argv)).recorded
    base = [name for name in options if name not in ("near_duplicates", "near_duplicate_distance")]
    # In the declared order; near-duplicates last, they and --shard_sha256 only when on.
    assert base == [name for name in jobs.BUILD.recorded() if name != "shard_sha256" or "--shard_sha256" in argv]
    for name, value in recorded.items():
        assert options.get(name) == value, name


def test_the_reshard_records_its_declared_options():
    options = ReshardConfig.from_flags(parsed(jobs.RESHARD, _PUBLISH + ["--skip_corrupt"])).recorded
    assert list(options) == [name for name in jobs.RESHARD.recorded() if name != "shard_sha256"]  # only when on
    assert options["input"] == ["in"] and options["skip_corrupt"] is True and options["split"] is None


def test_usage_problems_of_combinations_need_no_beam_pillow_or_numpy():
    code = ("import sys; from beam_jobs.cli import config, jobs; "
            "print(config.usage_problem(jobs.BUILD, ['--input', 'a', '--output_dir', 'b', '--append', "
            "'--replace'])); print(sorted({m.split('.')[0] for m in sys.modules} & {'apache_beam', 'PIL', 'numpy'}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-2:] == [
        "--append keeps the set's shards and classes; it cannot be combined with --replace", "[]"], done.stderr


@pytest.mark.parametrize("staging", ["out", "out/", "out/tmp", "./out/../out/tmp"])
def test_a_staging_dir_in_the_output_folder_is_refused(tmp_path, monkeypatch, staging) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"^--staging_dir .* lies in --output_dir out; give a folder elsewhere"):
        BuildConfig.from_flags(parsed(jobs.BUILD, ["--input", "in", "--output_dir", "out", "--staging_dir", staging]))


@pytest.mark.parametrize("staging, kept", [("/ssd/tmp/", "/ssd/tmp"), ("out2", "out2"), ("gs://b/tmp/", "gs://b/tmp")])
def test_a_staging_dir_elsewhere_is_kept_without_its_trailing_slash(staging, kept) -> None:
    cfg = BuildConfig.from_flags(parsed(jobs.BUILD, ["--input", "in", "--output_dir", "out", "--staging_dir", staging]))
    assert cfg.staging_dir == kept and "staging_dir" not in cfg.recorded  # where, not what: not in the manifest
