"""Plan job: what a build with the same flags would find, reject and write; nothing is written.

Usage: ``tfrecord-shards plan --input data/flowers --output_dir out/flowers [--plan_json plan.json]``.
Takes every flag of the build, checked as the build checks them, lists the inputs with the build's own
steps, reads each input's header once and prints a plan (docs/next-day.md, "Plan before running").
``--output_dir`` is only read.
"""

from __future__ import annotations

from beam_jobs.cli import loading

if __name__ == "__main__":  # a command: its modules load with the collector paused (cli/loading.py)
    loading.pause()

import beam_jobs.quiet_beam  # noqa: E402,F401  (first of Beam: imported without its BigQuery warning)
import contextlib
import dataclasses
from typing import Any, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_jobs import build_shards
from beam_jobs.cli import values as opt
from beam_jobs.cli.config import PlanConfig
from beam_jobs.cli.harness import Job, run_job
from beam_jobs.cli.logs import run_as_command
from beam_jobs.cli.progress import plan_progress
from transforms.storage import output_folder
from transforms.reject_duplicates import RejectDuplicateImages
from transforms.shardset.dead_letters import DEAD_LETTERS
from transforms.errors import ManifestError, UsageError
from transforms.storage.handback import check_handback, handback_folder, read_handed_back, remove_handback
from transforms.storage.listing import is_folder
from transforms.storage.writing import free_bytes, write_file
from transforms.images.inputs import is_manifest_path
from transforms.inspect_images import ImageRules
from transforms.plan_steps import READS, SurveyImages, TallyPlan
from transforms.progress.report import plural
from transforms.shardset.ownership import kept_splits
from transforms.shardset.plan_report import (DEFAULT_RATE, BuildRate, Plan, PlanTally, folder_change, folder_problems,
                                             make_plan)


def _check_plan_json(path: str, output_dir: str, inputs: Sequence[str]) -> None:
    """Raises ``UsageError`` for a ``--plan_json`` path inside the output folder or an input, or naming a folder."""
    if opt.lies_in(path, output_dir):
        raise UsageError(f"--plan_json {path} lies inside --output_dir {output_dir}, which a plan "
                         "never writes to; write the plan elsewhere")
    for source in inputs:
        if opt.lies_in(path, source):
            what = "is the input manifest" if is_manifest_path(source) else "lies inside --input " + source
            raise UsageError(f"--plan_json {path} {what}; write the plan elsewhere")
    if is_folder(path):
        raise UsageError(f"--plan_json {path} is a folder; give a file path")


def make_config(cfg: PlanConfig, options: PipelineOptions) -> PlanConfig:
    """Checks the flags and inputs as the build does, and the plan's own; reads the output folder's state.
    Raises ``UsageError`` on a wrong flag or input."""
    # A split other inputs built: the plan says the build would refuse, and goes on (--append takes no --replace).
    built = build_shards.make_config(dataclasses.replace(cfg, replace=not cfg.append), options)
    cfg = dataclasses.replace(built, replace=cfg.replace, policy=dataclasses.replace(built.policy, replace=cfg.replace))
    if cfg.plan_json:
        _check_plan_json(cfg.plan_json, cfg.output_dir, cfg.input)
    offline = cfg.dataflow_dry_run
    state = None if offline or not is_folder(cfg.output_dir) else output_folder.folder_state(cfg.output_dir)
    shards = None
    if state is not None and state.manifest is not None:
        with contextlib.suppress(ManifestError):  # the plan says why the build would stop
            shards = output_folder.published_shards(cfg.output_dir, cfg.policy)
    # Workers may share no disk with this process: the tally comes back through storage.
    handback = handback_folder(cfg.output_dir, cfg.temp_location, cfg.JOB.name)
    if not offline:
        check_handback(handback, cfg.JOB.name)
    return dataclasses.replace(cfg, handback=handback, tally=handback.path("tally.json"), state=state,
                               published_shards=shards if shards and shards[0] else None)


def build_pipeline(p: beam.Pipeline, cfg: PlanConfig) -> None:
    """Wires the plan into ``p``: the build's listing, a survey of each input, one tally."""
    listing = build_shards.list_inputs(p, cfg)
    surveyed = listing.unique | "Survey" >> SurveyImages(
        cfg.settings, cfg.seed, beam.pvalue.AsSingleton(listing.labels),
        ImageRules(cfg.split_fraction_map or {}, cfg.max_image_bytes), layout=beam.pvalue.AsSingleton(listing.layout),
        threads=cfg.found.inspect_threads)  # as the build inspects: threads for gs:// and s3:// inputs
    # As in the build: images of published splits this run keeps stay; a copy of one here is rejected.
    published, written = build_shards.published_keys(p, *(cfg.published_shards or ((), "none")), surveyed.main,
                                                     cfg.policy.append)
    inputs = listing.facts | "InputCount" >> beam.Map(lambda f: f.inputs)  # groups of about GROUP_RECORDS images
    distinct = surveyed.main | "RejectDuplicateImages" >> RejectDuplicateImages(
        published, written, cfg.policy.append, expected=inputs)
    seen = {"listed": listing.sources,  # SourceImage
            "records": distinct["main"],  # ImageMeta a build would write
            "reads": surveyed[READS],  # ("read", bytes, exact)
            "facts": listing.facts,  # one ListingFacts
            "dead": (*listing.dead, surveyed[DEAD_LETTERS], distinct[DEAD_LETTERS])}  # DeadLetter
    _ = seen | "Tally" >> TallyPlan(cfg.tally, cfg.found.labels, cfg.settings)  # writes one PlanTally to cfg.tally


def _plan(cfg: PlanConfig, tally: PlanTally, seconds: float) -> Plan:
    state = cfg.state
    written = sorted({split for split, _ in tally.records})
    change = None
    if state is not None:
        problems = folder_problems(cfg.output_dir, state.present, state.manifest, state.manifest_problem,
                                   state.owned(), cfg.policy, written, cfg.compression,
                                   tally.feature_spec, tally.classes, cfg.input)
        published = ({name: split.records for name, split in state.manifest.splits.items()}
                     if state.manifest is not None else {})
        kept = kept_splits(state.manifest, written, cfg.policy)
        if published or problems:
            change = folder_change(published, written, kept, problems, cfg.policy.append)
    notes = []
    if cfg.published_shards and change is not None and change.kept:
        notes.append("duplicates include copies of images published in the splits the build would keep "
                     f"({plural(len(cfg.published_shards[0]), 'published shard')} read)")
    return make_plan(tally, inputs=cfg.input, output_dir=cfg.output_dir, target_bytes=cfg.target_bytes,
                     num_shards=cfg.num_shards, change=change, output_exists=state is not None,
                     rate=BuildRate.of_mib_per_second(cfg.rate_mb_s) if cfg.rate_mb_s else DEFAULT_RATE,
                     max_bad_fraction=cfg.max_bad_fraction, plan_seconds=seconds,
                     notes=notes, validate=cfg.settings.validate, free_bytes=free_bytes(cfg.output_dir),
                     staging=output_folder.staging_folder(cfg.output_dir), staging_dir=cfg.staging_dir or "",
                     staging_free=free_bytes(cfg.staging_dir) if cfg.staging_dir else None)


def _outcome(result: Any, cfg: PlanConfig, seconds: float) -> tuple[str, int]:
    """The plan's summary, with the JSON written where asked."""
    try:  # the tally the pipeline wrote (ShardsError when it is missing); its folder is removed once read
        tally = PlanTally.loads(read_handed_back(cfg.tally, "plan's tally"))
    finally:
        remove_handback(cfg.handback)
    plan = _plan(cfg, tally, seconds)
    text = plan.text()
    if cfg.plan_json:
        write_file(cfg.plan_json, plan.to_json())
        text += f"\n  plan as JSON: {cfg.plan_json}"
    return text, 0


HELP = PlanConfig.JOB  # its flags and help: beam_jobs/cli/jobs.py


def run(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Runs the plan job; returns the exit status (0 planned, 1 failed, 2 bad flags)."""
    return run_job(Job(PlanConfig, make_config, build_pipeline, plan_progress, _outcome), argv, prog)


if __name__ == "__main__":
    run_as_command(run, "beam_jobs.plan_build")
