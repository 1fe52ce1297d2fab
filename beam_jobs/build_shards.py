"""Build job: images and labels -> balanced, shuffled, deterministic TFRecord shards.

Usage: ``python -m beam_jobs.build_shards --input data/flowers --output_dir out/flowers``. Beam's own
options (``--runner``, ``--direct_num_workers``, cloud options) pass straight through. See
docs/building.md for every flag (and Dataflow), docs/output.md for the output layout and the schema.
"""

from __future__ import annotations

from beam_jobs.cli import loading

if __name__ == "__main__":  # a command: its modules load with the collector paused (cli/loading.py)
    loading.pause()

import beam_jobs.quiet_beam  # noqa: E402,F401  (first of Beam: imported without its BigQuery warning)
import csv
import dataclasses
import functools
import importlib.metadata
import operator
import os
import re
import sys
from typing import Any, NamedTuple, Sequence

if __name__ == "__main__":  # python -m: plan_build imports this module by name; let that be this one,
    sys.modules.setdefault("beam_jobs.build_shards", sys.modules[__name__])  # so its options are defined once

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from beam_jobs.cli import values as opt
from transforms import beam_compat, worker_threads
from transforms.errors import ImageError, ManifestError, PlanError, UsageError
from transforms.images.records import EncodeSettings, orientation_spec
from transforms.images.build_survey import fixed_class_names, image_threads, survey_build
from transforms.images.build_manifest import build_manifest_extras, record_count_keys
from transforms.images.build_summary import build_lines
from transforms.images.inputs import check_manifest_head, is_manifest_path
from transforms.archives.members import (PARQUET, TAR, ZIP, ContainerRules, archive_kind, container_problem,
                                         is_container_input, is_parquet_pattern, is_shard_pattern)
from transforms.archives.parquet_rows import class_names_of, columns_problem, open_parquet
from transforms.archives.webdataset import expand_braces
from beam_jobs.cli.config import BuildConfig
from beam_jobs.cli.harness import PublishingJob, run_job
from beam_jobs.cli.logs import run_as_command
from beam_jobs.cli.progress import build_progress
from transforms.plan_shards import ASSIGNED, TOTALS, PlanShards
from transforms.discover_images import CollectListingFacts, DiscoverImages, folder_tasks
from transforms.inspect_images import (REUSED_INPUT_BYTES, REUSED_INPUTS, ImageRecordMaker, ImageRules, InspectImages,
                                      RecordStaging, image_order)
from transforms.reject_duplicates import (NEAR_DEAD_LETTERS, NEAR_DUPLICATES, OVER_CAP, UNHASHED, CollectSplitNames,
                                          NearDuplicateRule, ReadPublishedKeys, RejectDuplicateImages,
                                          RejectDuplicatePaths)
from transforms.storage.files import exists, open_file, open_for_read, read_at_most
from transforms.storage.listing import files_all_of_suffix, has_files_below, local_bytes_at_least, match_files
from transforms.storage.paths import is_local
from transforms.images.items import SourceImage
from transforms.shardset.dead_letters import DEAD_LETTERS, DeadLetter
from transforms.example.features import FEATURE_TYPES, undeclared_columns
from transforms.images.annotations import build_sidecars
from transforms.images.coco import coco_items, first_image_paths, image_folder, is_coco_path
from transforms.example.schema import IMAGE_FEATURES
from transforms.storage.journal import pending_manifest
from transforms.storage.output_folder import (check_replaced_splits, published_manifest, published_shard_sizes,
                                              published_shards, run_files_folder, staging_folder)
from transforms.progress.report import plural
from transforms.shardset.manifest import Manifest
from transforms.shardset.planning import MIB
from transforms.shardset.replacing import kept_format_problem, listed_splits, replace_problem
from transforms.shardset.disk_needs import apart_shortfall_clause, shortfall_clause
from transforms.storage.writing import free_bytes
from transforms.images.class_labels import index_order_problem
from transforms.images.listing_facts import appended_classes
from transforms.shard_sink import (REUSED_SHARDS, ExtrasFrom, PublishInputs, PublishShards, ShardOutput,
                                   ShardRecords, ShardReuse, WriteShards)
from transforms.shardset.ownership import PublishPolicy
from transforms.shardset.resume import RunMarker, fingerprint, shard_content_key
from transforms.storage.resume_files import AdoptedWork, adopted_work, resumable_bytes

def _input_problem(path: str) -> str | None:
    """Why an --input cannot be read (it is missing, or a folder with no file), or None; ``PlanError`` for
    a pattern's braces."""
    if is_manifest_path(path):
        return None if exists(path) else f"--input {path} does not exist"
    if is_shard_pattern(path):
        names = expand_braces(path)
        found = match_files(names[:1])[0]  # a later missing shard is its own dead letter
        if not found:
            return f"--input {path}: no shard {names[0]} (a brace range {{000..099}} or a pattern of .tar files)"
        return _archive_problem(found[0].path, TAR)
    if is_parquet_pattern(path):
        return None if _pattern_files(path) else f"--input {path} matches no Parquet file"
    if is_container_input(path):
        if not exists(path):
            return f"--input {path} does not exist"
        return None if archive_kind(path) == PARQUET else _archive_problem(path, archive_kind(path))
    if has_files_below(path):  # object stores have no folder objects, only keys below the prefix
        return None
    if "://" in path:  # an object under that exact name is a file; no key below it: nothing to read
        found = exists(path)
    elif os.path.isdir(path):
        return f"--input {path} is an empty folder: it holds no file to read"
    else:
        found = os.path.exists(path)
    if not found:
        return f"--input {path} does not exist" + (" or is empty" if "://" in path else "")
    return (f"--input {path} is a file; --input must be a folder of class (or split) folders, "
            "a .csv/.jsonl/COCO .json manifest listing the images, a .tar/.tar.gz/.tgz/.zip archive, "
            "WebDataset shards, .parquet files or a folder of them")


def _pattern_files(pattern: str) -> list[str]:
    """The files a pattern of Parquet files names: braces expanded (else ``PlanError``), wildcards matched."""
    return [meta.path for found in match_files(expand_braces(pattern))
            for meta in sorted(found, key=lambda meta: meta.path)]


def _parquet_folders(inputs: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(folder, its Parquet files)`` of each folder input holding only Parquet files (a Hugging Face
    export; hidden files and dataset cards (``.md``) aside); the listing stops at the first other entry."""
    found = []
    for path in inputs:
        if is_manifest_path(path) or is_container_input(path):
            continue
        try:
            files = files_all_of_suffix(path, ".parquet",
                                        lambda name: name.startswith(".") or name.lower().endswith(".md"))
        except OSError:
            continue  # not a folder that can be listed: the folder's own checks say so
        if files:
            found.append((path, tuple(files)))
    return tuple(found)


def _with_parquet_files(inputs: Sequence[str], folders: Sequence[tuple[str, tuple[str, ...]]]) -> list[str]:
    """The inputs, each folder of Parquet files replaced by its files."""
    files = dict(folders)
    return [each for path in inputs for each in files.get(path, (path,))]


def _archive_problem(path: str, kind: str) -> str | None:
    """Why an archive cannot be read at all (``container_problem``: its first header or its end), or None."""
    try:
        with open_for_read(path) as fh:
            problem = container_problem(fh, kind)
    except OSError as err:
        return f"--input {path} cannot be read: {type(err).__name__}: {err}"
    return f"--input {path}: {problem}" if problem else None


def _parquet_class_names(cfg: BuildConfig, inputs: Sequence[str]) -> tuple[str, ...] | None:
    """Checks the Parquet inputs' columns (their footers); the ``ClassLabel`` names they all give, or None."""
    paths = [each for path in inputs if archive_kind(path) == PARQUET
             for each in (_pattern_files(path) if is_parquet_pattern(path) else [path])]
    names: set[tuple[str, ...] | None] = set()
    for path in paths:
        try:
            with open_for_read(path) as fh:
                schema = open_parquet(fh).schema_arrow
        except OSError as err:
            raise UsageError(f"--input {path} cannot be read: {type(err).__name__}: {err}") from err
        except ImageError as err:
            raise UsageError(f"--input {path}: {err.detail}") from err
        problem = columns_problem(schema, cfg.image_column, cfg.label_column)
        if problem:
            raise UsageError(f"--input {path} {problem}")
        with opt.usage_error(f"--input {path}: ", ManifestError):
            names.add(class_names_of(schema, cfg.label_column))
    if len(names) > 1 and any(names):
        raise UsageError("Parquet inputs name their classes differently (ClassLabel names in their metadata); "
                         "give --class_names")
    return next(iter(names), None)


# Enough of an input manifest to check its header and find its first row.
_MANIFEST_HEAD_BYTES = 64 * 1024


def _check_manifest(path: str) -> None:
    """Refuses an input manifest whose header cannot work (``Path,Label``), from its first bytes."""
    try:
        with open_for_read(path) as fh:
            head = read_at_most(fh, _MANIFEST_HEAD_BYTES + 1)  # a byte more: is this the whole file?
    except OSError as err:
        raise UsageError(f"--input {path} cannot be read: {type(err).__name__}: {err}") from err
    with opt.usage_error("--input ", ManifestError):
        check_manifest_head(head[:_MANIFEST_HEAD_BYTES], path, len(head) <= _MANIFEST_HEAD_BYTES)


def _check_coco_images(path: str) -> None:
    """Raises ``UsageError``, naming ``--image_root``, for a COCO file none of whose first 8 images (among
    its first 100,000 entries) is in its folder (the default image root; COCO's own layout keeps them beside
    ``annotations/``)."""
    folder = image_folder(path, None)
    try:
        with open_for_read(path) as fh:
            paths = first_image_paths(coco_items(fh, path), folder, count=8, max_items=100_000)
    except (OSError, ManifestError):
        return  # the listing reports a file it cannot read as its dead letter
    if paths and not any(exists(image) for image in paths):
        raise UsageError(f"--input {path}: its images' file_names are looked up in its folder {folder}/ "
                         f"(no --image_root), and none of the first {len(paths)} is there (e.g. {paths[0]}); "
                         "give --image_root DIR, the folder holding them (COCO's val2017/ beside annotations/)")


def _fixed_names(cfg: BuildConfig) -> list[str] | None:
    """The names --class_names gives or --labels_file holds (one per line), unchecked; None without either
    (or for a dry run's labels file on a store: it stays offline)."""
    if cfg.class_names is not None:
        return cfg.class_name_list
    if not cfg.labels_file or (cfg.dataflow_dry_run and not is_local(cfg.labels_file)):
        return None
    if not exists(cfg.labels_file):
        raise UsageError(f"--labels_file {cfg.labels_file} does not exist")
    with open_file(cfg.labels_file, decompress=True) as fh:
        return [line.strip() for line in fh.read().decode("utf-8-sig").splitlines() if line.strip()]


def _check_inputs(cfg: BuildConfig, offline: bool) -> None:
    """Raises ``UsageError`` for inputs that cannot be read as the flags say (a pattern, a missing input,
    a manifest's header, a CSV column, a COCO file's image root), reading only their first bytes."""
    for path in cfg.input:
        problem = (None if is_manifest_path(path) or is_shard_pattern(path) or is_parquet_pattern(path)
                   else opt.wildcard_problem(path))
        if problem:
            raise UsageError(f"--input {problem}, or list its files in a .csv/.jsonl manifest")
    if not offline:
        for path in cfg.input:
            try:
                problem = _input_problem(path)
            except PlanError as err:
                problem = f"--input {err}"
            if problem:
                raise UsageError(problem)
            if is_manifest_path(path) and not is_coco_path(path):  # COCO files are read by the job
                _check_manifest(path)
            header = _csv_columns(path) if path.lower().endswith(".csv") else None
            undeclared = undeclared_columns(header or [], cfg.features)  # None: the listing reports the header
            if undeclared:
                raise UsageError(f"--input {path}: column {undeclared[0]!r} is not path, label or split; declare it "
                                 f"with --feature {undeclared[0]}:TYPE (TYPE one of {', '.join(FEATURE_TYPES)}) or "
                                 "remove it")
    if cfg.label_offset == 0 and any(is_coco_path(path) for path in cfg.input):
        raise UsageError("--label_offset 0 would give a COCO class id 0, which the Object Detection API "
                         "refuses; COCO ids are kept (1 and up) unless --coco_ids renumber numbers "
                         "them from --label_offset 1")
    if not offline and not cfg.image_root:
        for path in cfg.input:
            if is_coco_path(path):
                _check_coco_images(path)


def _check_folders(cfg: BuildConfig) -> None:
    """Raises ``UsageError`` for an input folder that holds --output_dir or --staging_dir (or lies in the output)."""
    for path in cfg.input:
        if is_manifest_path(path) or is_container_input(path):
            continue
        problem = opt.overlap_problem(path, cfg.output_dir)
        if problem:
            raise UsageError(problem)
        if cfg.staging_dir and opt.lies_in(cfg.staging_dir, path):
            raise UsageError(f"--staging_dir {cfg.staging_dir} lies in --input {path}: a later run would "
                             "read the run files as images; choose a folder outside the inputs")


def _policy(cfg: BuildConfig, offline: bool, inputs: Sequence[str],
            layouts: dict[str, str | None]) -> tuple[PublishPolicy, tuple[str, ...] | None]:
    """The run's publishing policy, and with --append the published set's class names (else None);
    ``UsageError`` for an append the set cannot take, or a split other inputs built (without --replace)."""
    # A local --staging_dir made absolute: a rerun from another folder finds, and removes, the same run files.
    staging_dir = os.path.abspath(cfg.staging_dir) if cfg.staging_dir and is_local(cfg.staging_dir) else cfg.staging_dir
    policy = dataclasses.replace(cfg.new_policy(), staging_dir=staging_dir)
    if cfg.append:  # an append publishes through its own journal: it does not resume
        return dataclasses.replace(policy, append=True), _append_checks(cfg)
    if not offline and not cfg.replace:  # the splits written whatever the inputs hold, known before they are listed
        check_replaced_splits(cfg.output_dir, cfg.input, lambda: (set(cfg.rules.split_fractions) or {cfg.rules.split})
                              if any(_unsplit(path, layouts) for path in inputs) else set())
    # A run resumes an interrupted one only with the same --staging_dir, where its run files lie.
    options = {**cfg.recorded, **({"staging_dir": staging_dir} if staging_dir else {})}
    marker = RunMarker(policy.run_id, fingerprint(options, _version()), options)  # shardset.resume
    return dataclasses.replace(policy, resume=marker, fresh=cfg.fresh), None


def make_config(cfg: BuildConfig, options: PipelineOptions) -> BuildConfig:
    """Checks the inputs and files the flags name; returns ``cfg`` with what the build found before its
    pipeline (``found``: ``images/build_survey.py``). Raises ``UsageError`` on a wrong flag or input."""
    offline = cfg.dataflow_dry_run  # a dry run stays offline: gs:// would need credentials
    _check_inputs(cfg, offline)
    fixed = fixed_class_names(_fixed_names(cfg))
    parquet_folders = () if offline else _parquet_folders(cfg.input)
    inputs = _with_parquet_files(cfg.input, parquet_folders)  # each folder of Parquet files as its files
    parquet_names = None if offline else _parquet_class_names(cfg, inputs)
    _check_folders(cfg)
    tasks = tuple(task for path in inputs if not is_manifest_path(path) and not is_container_input(path)
                  for task in folder_tasks(path, cfg.layout, offline=offline))
    layouts = {task.root: task.layout for task in tasks}
    # The check across splits hashes each image's pixels, unless the images all go to one split
    # (known before they are listed).
    near = cfg.near_duplicates != "off" and not offline
    one_split = near and len(cfg.rules.split_fractions) <= 1 and all(_unsplit(path, layouts) for path in inputs)
    policy, append_to = _policy(cfg, offline, inputs, layouts)
    # Archives that are read by range count as folders do; a .tar.gz (one stream per process) and
    # patterns of WebDataset shards or Parquet files do not.
    archives = [path for path in inputs if is_container_input(path)]
    counted = all(archive_kind(path) in (TAR, ZIP, PARQUET) and not is_shard_pattern(path)
                  and not is_parquet_pattern(path) for path in archives)
    cores = worker_threads.usable_cores()
    size = None if offline or not counted else _bytes_to_read(
        inputs, archives, cfg.output_dir, policy.resume.fingerprint if policy.resume else None,
        beam_compat.bytes_worth_counting(cores))
    note = beam_compat.choose_local_workers(options, size, cores)
    found = survey_build(
        fixed=fixed, parquet_names=parquet_names, only_parquet=len(inputs) == sum(
            archive_kind(path) == PARQUET for path in inputs), append_to=append_to, folder_tasks=tasks,
        parquet_folders=parquet_folders, near_duplicates=near, one_split=one_split,
        threads=_image_threads(options, cfg.image_threads, cfg.settings, cfg.input, hashes=near and not one_split))
    return dataclasses.replace(cfg, found=found, policy=policy, workers_note=note)


# Flags whose value shapes the records or shards: an append must use those the set was built with.
_APPEND_SAME = ("image_mode", "validate", "image_format", "jpeg_quality", "grayscale", "resize",
                "resize_mode", "shard_size_mb", "compression", "format", "seed", "split_fractions", "feature",
                "multi_label", "label_offset", "bbox_format", "coco_ids", "boxes_outside")


def _append_checks(cfg: BuildConfig) -> tuple[str, ...]:
    """Checks an ``--append`` run against the published set; returns the set's class names. ``UsageError``
    when nothing is published, the set was not built by this job, or a flag differs from the set's."""
    old = published_manifest(cfg.output_dir)
    if old is None:
        pending = pending_manifest(cfg.output_dir)
        old = Manifest.loads(pending) if pending else None
    if old is None:
        raise UsageError(f"--append: {cfg.output_dir} holds no published set (manifest.json) to append "
                         "to; build it first, without --append")
    if old.created_by != "build_shards":
        raise UsageError(f"--append: the set in {cfg.output_dir} was made by {old.created_by}, not "
                         "build_shards; only built sets take new images")
    boxes = "image/object/class/label" in old.feature_spec
    own = cfg.recorded
    for flag in _APPEND_SAME:
        if flag == "label_offset" and not boxes:
            continue  # it numbers object classes only: a set without boxes has none
        if flag in old.options and old.options[flag] != own.get(flag):
            recorded = old.options[flag]
            raise UsageError(f"--append: the set in {cfg.output_dir} was built with --{flag} {recorded}, "
                             f"this run has {own.get(flag)}; an append uses the set's settings: pass --{flag} "
                             f"{recorded}" if recorded not in (None, False) else
                             f"--append: the set in {cfg.output_dir} was built without --{flag}; leave it out")
    if old.options.get("num_shards"):
        raise UsageError(f"--append: the set in {cfg.output_dir} was built with --num_shards "
                         f"{old.options['num_shards']}; appending would change the count: rebuild with --replace")
    problem = index_order_problem(old.labels)
    if problem:
        raise UsageError(f"--append: the set in {cfg.output_dir} cannot take integer labels: {problem}; "
                         "it was built when integer labels were names sorted as text: rebuild it")
    return tuple(old.labels)


def _bytes_to_read(inputs: Sequence[str], archives: Sequence[str], output_dir: str,
                   fingerprint: str | None, limit: int) -> int | None:
    """The input bytes a run will read (at least: counted up to ``limit``), or None; archives read by
    range count as folders do, and what an interrupted run with the same flags left is not counted."""
    reused = resumable_bytes(output_dir, fingerprint) if fingerprint else 0
    size = local_bytes_at_least([path for path in inputs if path not in archives],
                                limit + reused, archives)
    return None if size is None else max(0, size - reused)


def _version() -> str:
    """The installed tool's version ('' when it is run from a checkout that is not installed)."""
    try:
        return importlib.metadata.version("tfrecord-shards")
    except importlib.metadata.PackageNotFoundError:
        return ""


def _image_threads(options: PipelineOptions, requested: int, settings: EncodeSettings,
                   inputs: Sequence[str], hashes: bool = False) -> tuple[int, int]:
    """Threads of the inspect and write steps (``build_survey.image_threads``), given whether Pillow decodes
    or encodes every image (``hashes``: for near-duplicates)."""
    decodes = settings.validate in ("decode", "full") or settings.mode in ("reencode", "raw") or hashes
    return image_threads(requested, beam_compat.local_workers(options), worker_threads.usable_cores(),
                         any("://" in path for path in inputs), decodes)


def _csv_columns(path: str) -> list[str] | None:
    """A CSV manifest's columns, from its first line; None if they cannot be read."""
    with open_file(path, decompress=True) as fh:
        first = fh.readline().decode("utf-8-sig", "replace")
    try:
        return next(csv.reader([first]), [])
    except csv.Error:
        return None  # the listing step reports an unreadable header


def _unsplit(path: str, layouts: dict[str, str | None]) -> bool:
    """True if every image of input ``path`` goes to ``--split`` (or the ``--split_fractions`` splits);
    ``layouts``: folder input -> layout of its listing tasks, None where only the listing tells."""
    if is_coco_path(path) or archive_kind(path) == PARQUET:
        return True
    if is_container_input(path):
        return False  # an archive's split folders or a sample's json may name splits
    if is_manifest_path(path):
        return path.lower().endswith(".csv") and "split" not in (_csv_columns(path) or ["split"])
    return layouts.get(path.rstrip("/")) == "classes"


_split_of = operator.attrgetter("source.split")


def _index_names(fixed: Sequence[str] | None, published: Sequence[str] | None) -> tuple[str, ...] | None:
    """The names integer labels index: ``--class_names``/``--labels_file``, or an appended set's class
    names (none for a set whose classes are the indices ``0`` to ``k``: new indices extend it)."""
    if fixed is not None:
        return tuple(fixed)
    if published and any(name != str(i) for i, name in enumerate(published)):
        return tuple(published)
    return None


class Listing(NamedTuple):
    """The build's listing steps' outputs (``list_inputs``), shared with the plan (``plan_build``)."""

    facts: beam.PCollection  # one ListingFacts
    labels: beam.PCollection  # one list of class names, in index order
    layout: beam.PCollection  # one RecordLayout
    sources: beam.PCollection  # every SourceImage listed
    unique: beam.PCollection  # those whose path no other input of their split has
    dead: tuple  # PCollections of DeadLetter: the listing's, duplicate paths


def _class_names(facts, fixed: Sequence[str] | None, published: Sequence[str] | None, check=None) -> list[str]:
    """The class names in index order, once ``check(facts)`` (if any) raised nothing."""
    if check is not None:
        check(facts)
    if fixed is not None:
        return list(fixed)
    return list(facts.classes) if published is None else appended_classes(published, facts.classes)


def list_inputs(p: beam.Pipeline, cfg: BuildConfig, check=None) -> Listing:
    """Wires the listing of the inputs, their facts and the duplicate-path check into ``p``; ``check``,
    given the ``ListingFacts``, may refuse the run (raise) before any image is read."""
    found = cfg.found
    names = _index_names(found.labels, found.append_to)
    inputs = _with_parquet_files(cfg.input, found.parquet_folders)  # each folder of Parquet files as its files
    listed = p | "Discover" >> DiscoverImages(  # SourceImage, DeadLetter or a class name
        dataclasses.replace(cfg.rules, class_names=names), folder_tasks=found.folder_tasks,
        manifests=[i for i in inputs if is_manifest_path(i)],
        archives=[i for i in inputs if is_container_input(i)],
        containers=ContainerRules(cfg.image_column, cfg.label_column, names),
        key_ranges=cfg.list_key_ranges)
    facts = listed | "CollectFacts" >> CollectListingFacts(  # one ListingFacts
        cfg.multi_label, cfg.label_offset, found.labels, cfg.boxes_outside, cfg.features)
    labels = facts | "ClassNames" >> beam.Map(_class_names, found.labels, found.append_to, check)
    layout = facts | "Layout" >> beam.Map(lambda f: f.layout)
    sources = listed | "SelectImages" >> beam.Filter(lambda entry: isinstance(entry, SourceImage))
    listing_dead = listed | "SelectListingDeadLetters" >> beam.Filter(lambda entry: isinstance(entry, DeadLetter))
    if len(inputs) == 1 and not is_manifest_path(inputs[0]) and not is_container_input(inputs[0]):
        # one folder of images: it lists each relative path once; no input to check, no shuffle of them all
        return Listing(facts, labels, layout, sources, sources, (listing_dead,))
    unique = sources | "RejectDuplicatePaths" >> RejectDuplicatePaths()
    return Listing(facts, labels, layout, sources, unique.main, (listing_dead, unique[DEAD_LETTERS]))


def _refuse_replacing(facts, output_dir: str, old: Manifest, inputs: tuple[str, ...],
                      fractions: tuple[str, ...], file_format: str = "tfrecord", drop_other_splits: bool = False) -> None:
    """Raises ``UsageError`` when the listed inputs' splits would replace a split other inputs built,
    or the run would keep splits of the other shard file format (a set has one)."""
    written = listed_splits(facts.splits, fractions)
    problem = (replace_problem(output_dir, old, written, inputs)
               or kept_format_problem(output_dir, old, written, file_format, drop_other_splits))
    if problem:
        raise UsageError(problem)


def published_keys(p: beam.Pipeline, shards: Sequence[tuple[str, str]], compression: str, metas: beam.PCollection,
                   appending: bool) -> tuple[beam.PCollection | None, Any]:
    """The duplicate check's view of the published ``shards``: their images' keys, and unless appending
    (every published image then stays where it is) the splits ``metas`` (ImageMeta) go to; Nones without shards."""
    if not shards:
        return None, None
    published = p | "ReadPublished" >> ReadPublishedKeys(shards, compression)
    written = None if appending else beam.pvalue.AsSingleton(  # the splits this run writes to
        metas | "CollectSplits" >> CollectSplitNames(_split_of), default_value=[])
    return published, written


def build_pipeline(p: beam.Pipeline, cfg: BuildConfig):
    """Wires the build job into ``p``; returns the PCollection holding the manifest."""
    old = None if cfg.append or cfg.replace or cfg.dataflow_dry_run else published_manifest(cfg.output_dir)
    # Splits that only the listing names (split folders, a manifest's column): a split other inputs
    # built is refused with the class names, before any image is read (reading waits for them).
    check = None if old is None else functools.partial(
        _refuse_replacing, output_dir=cfg.output_dir, old=old, inputs=tuple(cfg.input),
        fractions=tuple(cfg.split_fraction_map or ()), file_format=cfg.format, drop_other_splits=cfg.drop_other_splits)
    facts, labels, layout, _, unique, listing_dead = list_inputs(p, cfg, check)  # listing_dead: 2 PCollections
    inputs = facts | "InputCount" >> beam.Map(lambda f: f.inputs)
    adopted = AdoptedWork() if cfg.dataflow_dry_run else adopted_work(cfg.output_dir, cfg.policy.run_id)
    near = cfg.found.near_hashes  # --near_duplicates, and the images may fall in two splits
    settings = cfg.settings
    staging = RecordStaging(cfg.output_dir, cfg.policy.run_id, cfg.policy.staging_dir,  # each image read once
                            done_lists=cfg.policy.resume is not None, resume=tuple(adopted.done_lists))
    inspected = unique | "Inspect" >> InspectImages(
        settings, cfg.seed, beam.pvalue.AsSingleton(labels),
        ImageRules(cfg.split_fraction_map or {}, cfg.max_image_bytes, hashed=near),
        layout=beam.pvalue.AsSingleton(layout), threads=cfg.found.inspect_threads, staging=staging)
    # Images of splits already published in --output_dir that this run keeps stay there: their
    # keys join the duplicate check (a dry run stays offline and reads none).
    shards, compression = ([], "none") if cfg.dataflow_dry_run else published_shards(
        cfg.output_dir, cfg.policy)
    appending = cfg.policy.append
    published, written = published_keys(p, shards, compression, inspected.main, appending)
    # With --near_duplicates, the buckets of the hashes' bands share the grouping by content.
    rule = NearDuplicateRule(cfg.near_duplicates == "reject", cfg.near_duplicate_distance) if near else None
    distinct = inspected.main | "RejectDuplicateImages" >> RejectDuplicateImages(  # groups of about GROUP_RECORDS
        published, written, appending, rule, expected=inputs)
    near_dead = (distinct[NEAR_DEAD_LETTERS],) if near else ()  # cross_split_near_duplicate
    plan = distinct["main"] | "Plan" >> PlanShards(
        split_of=_split_of, order_of=image_order, size_of=operator.attrgetter("record_size"),
        target_bytes=cfg.target_bytes, num_shards=cfg.num_shards,
        published=published_shard_sizes(cfg.output_dir) if appending else None,
        expected=inputs)  # groups of about GROUP_RECORDS images: a bundle's images of one travel packed together
    dead = (*listing_dead, inspected[DEAD_LETTERS], distinct[DEAD_LETTERS], *near_dead)
    output = ShardOutput(cfg.output_dir, cfg.compression, cfg.format, cfg.shard_sha256)
    records = ShardRecords(ImageRecordMaker(), image_order, cfg.found.write_threads,
                           tally_of=record_count_keys)  # each shard counts its image formats, channels, boxes skipped
    # An ArrayRecord shard of the same records is other bytes: its key says so (a TFRecord one's is unchanged).
    kind = cfg.compression if cfg.format == "tfrecord" else f"{cfg.format}:{cfg.compression}"
    reuse = (ShardReuse(lambda key, items: shard_content_key(key, kind, items), adopted.shards)
             if cfg.policy.resume else None)
    results = plan[ASSIGNED] | "Write" >> WriteShards(
        output, records, cfg.policy.run_id, plan[TOTALS], inputs=inputs, reuse=reuse,
        # appending, inputs the set already holds are rejected but not bad: publishing decides
        max_bad_fraction=None if appending else cfg.max_bad_fraction)
    fields = {"created_by": "build_shards", "options": cfg.recorded, "seed": cfg.seed, "file_format": cfg.format}
    own_spec = orientation_spec(settings)  # image/orientation with --exif_orientation keep
    spec = layout | "FeatureSpec" >> beam.Map(lambda lay: {**IMAGE_FEATURES, **lay.feature_spec(), **own_spec})
    # Object classes, image counts and, when hashed, near-duplicates, made in the publish step.
    views = {"layout": beam.pvalue.AsSingleton(layout), **({} if not near else {
        name: beam.pvalue.AsList(distinct[tag])
        for name, tag in (("near_pairs", NEAR_DUPLICATES), ("over_cap", OVER_CAP), ("unhashed", UNHASHED))})}
    extras = ExtrasFrom(functools.partial(build_manifest_extras, near_mode=cfg.near_duplicates if near else "off",
                                          distance=cfg.near_duplicate_distance), views)
    return p | "Publish" >> PublishShards(
        output, cfg.policy, PublishInputs(results, plan[TOTALS], dead, labels, inputs, spec), fields,
        max_bad_fraction=cfg.max_bad_fraction, manifest_extras=extras,
        sidecars=functools.partial(build_sidecars, name=cfg.tfds_name))

class BuildJob(PublishingJob):
    """The build job as the harness runs it: its summary says what a build adds (``images.build_summary``)
    and, for a resumed run, what it reused."""

    def disk_need(self, cfg: BuildConfig) -> str:
        """What a build that filled its disk needs against what is free (``disk_needs.shortfall_clause``);
        '' when its inputs' size is not known without reading them (manifests, stores)."""
        archives = [path for path in cfg.input if is_container_input(path)]
        size = local_bytes_at_least(
            [path for path in cfg.input if path not in archives and not is_manifest_path(path)], 1 << 62, archives)
        if not size:
            return ""
        if cfg.staging_dir:
            runs = run_files_folder(cfg.output_dir, cfg.policy.run_id, cfg.policy.staging_dir)
            kept = local_bytes_at_least([runs], 1 << 62) or 0  # kept for the rerun
            return apart_shortfall_clause(size, cfg.staging_dir, free_bytes(cfg.staging_dir), cfg.output_dir,
                                          free_bytes(cfg.output_dir), kept)
        kept = local_bytes_at_least([staging_folder(cfg.output_dir)], 1 << 62) or 0  # kept for the rerun
        return shortfall_clause(size, free_bytes(cfg.output_dir), kept)

    def summary_lines(self, cfg: BuildConfig, manifest: Manifest) -> list[str]:
        return build_lines(cfg.output_dir, manifest, cfg.near_duplicates == "off")

    def finish(self, result: Any, cfg: BuildConfig, seconds: float) -> tuple[str, int]:
        text, status = super().finish(result, cfg, seconds)
        if self.resumed:
            first, rest = text.split("\n", 1) if "\n" in text else (text, "")
            text = "\n".join(line for line in (first, "  " + resume_line(result, self.resumed, first), rest)
                             if line)
        return text, status


def _counter(result: Any, namespace: str, name: str) -> int:
    """A counter's committed value in a finished pipeline's metrics (0 where the runner gives none)."""
    try:
        found = result.metrics().query(MetricsFilter().with_namespace(namespace).with_name(name))["counters"]
    except (AttributeError, NotImplementedError, KeyError):
        return 0
    return sum(c.committed if c.committed is not None else c.attempted or 0 for c in found)


def resume_line(result: Any, runs: Sequence[str], published: str) -> str:
    """The summary's line saying what a resumed run reused, from its finished pipeline's metrics
    (``result``), given the interrupted runs' ids and the summary's first line (its input count)."""
    inputs = _counter(result, "build", REUSED_INPUTS)
    nbytes = _counter(result, "build", REUSED_INPUT_BYTES)
    shards = _counter(result, "shard_sink", REUSED_SHARDS)
    found = re.search(r"= ([\d,]+) inputs\)", published)
    total = f" of {int(found.group(1).replace(',', '')):,}" if found else ""
    which = f"run {runs[0]}" if len(runs) == 1 else f"runs {', '.join(runs)}"
    return (f"resumed: reused {inputs:,}{total} inputs ({nbytes / MIB:,.0f} MiB) and {plural(shards, 'finished shard')} "
            f"from the interrupted {which}")


HELP = BuildConfig.JOB  # its flags, help and manifest options: beam_jobs/cli/jobs.py


def run(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Runs the build job; returns the process exit status (0 ok, 1 failed, 2 bad flags)."""
    return run_job(BuildJob(BuildConfig, make_config, build_pipeline, build_progress), argv, prog)


if __name__ == "__main__":
    run_as_command(run, "beam_jobs.build_shards")
