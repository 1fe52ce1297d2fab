"""Each flag is declared once: a ``Flag(...)`` in ``beam_jobs/cli/jobs.py``; the configs' fields are made from it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from beam_jobs.cli import jobs
from beam_jobs.cli.config import CONFIGS, JobConfig, flag_fields

ROOT = Path(__file__).resolve().parents[2]
CONFIG_MODULE = ROOT / "beam_jobs" / "cli" / "config.py"
_BEAM_JOBS = [job for job in {id(job): job for job in jobs.JOBS.values()}.values() if job.beam]


def hand_written_flag_fields(source: str, flag_names: dict[str, set[str]], every: set[str]) -> list[str]:
    """``Class.field`` for each field a class in ``source`` annotates by hand under the name of one of its
    job's flags (``flag_names``: class name -> its job's flag names; ``every`` for any other class, a base)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            names = flag_names.get(node.name, every)
            found += [f"{node.name}.{item.target.id}" for item in node.body
                      if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                      and item.target.id in names]
    return found


def test_no_config_class_writes_a_flags_field_by_hand() -> None:
    own = {config.__name__: {flag.name for flag in config.JOB.flags()} for config in CONFIGS.values()}
    every = {flag.name for job in _BEAM_JOBS for flag in job.flags()}
    assert hand_written_flag_fields(CONFIG_MODULE.read_text(encoding="utf-8"), own, every) == []


def test_the_check_finds_a_field_written_by_hand() -> None:
    source = ("class BuildConfig(PublishingConfig):\n    seed: int\n    found: object = None\n"
              "class ReshardConfig(PublishingConfig):\n    files: tuple = ()\n"
              "class JobConfig:\n    verbose: bool\n")
    assert hand_written_flag_fields(source, {"BuildConfig": {"seed"}, "ReshardConfig": {"seed"}},
                                    {"verbose", "files"}) == ["BuildConfig.seed", "JobConfig.verbose"]


@pytest.mark.parametrize("config", sorted(set(CONFIGS.values()), key=lambda c: c.__name__))
def test_a_configs_flag_fields_are_its_jobs_flags_once_each(config) -> None:
    declared = [flag.name for flag in config.JOB.flags() if not flag.positional]
    assert sorted(config.FLAG_FIELDS) == sorted(declared)
    assert len(set(config.FLAG_FIELDS)) == len(config.FLAG_FIELDS)
    fields = {field.name: field for field in dataclasses.fields(config)}
    assert all(fields[name].default is dataclasses.MISSING for name in declared)  # each flag is always passed


def test_a_flag_shared_by_beam_jobs_is_one_declaration() -> None:
    """Beam parses every options class with one parser: a name is one ``Flag`` however many jobs take it."""
    by_name: dict[str, set[int]] = {}
    for job in _BEAM_JOBS:
        for flag in job.flags():
            by_name.setdefault(flag.name, set()).add(id(flag))
    assert {name: len(ids) for name, ids in by_name.items() if len(ids) > 1} == {}


def test_a_config_annotating_a_declared_flag_is_refused() -> None:
    with pytest.raises(TypeError, match="annotates seed by hand"):
        @flag_fields(*jobs.SHARED.flags)
        class Twice(JobConfig):
            seed: int
