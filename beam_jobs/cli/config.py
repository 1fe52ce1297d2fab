"""Each job's config: a typed, frozen dataclass built once from its flags; no Beam, Pillow or numpy.

A config has a field per flag its job declares (made by ``flag_fields`` from the declarations in
``beam_jobs/cli/jobs.py``) and per flag of Beam's that the jobs read; ``JobConfig.from_flags`` builds
it. ``__post_init__`` refuses what no flag's type can (a missing flag, flags that do not go
together), one ``UsageError`` naming the flag; what follows from the flags alone is a property.
What a job finds before its pipeline fills the fields after the flags', in its ``make_config``.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

from beam_jobs.cli import jobs
from beam_jobs.cli.beam_flag_names import BEAM_FLAG_NAMES
from beam_jobs.cli.declared import BEAM_HELP_FLAG, Flag, Job, flag_name, flag_parser, unknown_flag_problem
from beam_jobs.cli import values
from transforms.errors import PlanError, UsageError
from transforms.example.features import parse_feature_flags
from transforms.images.choices import MAX_NEAR_DUPLICATE_DISTANCE
from transforms.shardset.naming import check_split_name
from transforms.shardset.planning import MIB, parse_split_fractions
from transforms.shardset.tfds_metadata import dataset_name

if TYPE_CHECKING:  # the types of what jobs find; importing them needs Pillow
    from transforms.images.build_survey import BuildSurvey
    from transforms.images.inputs import LabelRules
    from transforms.images.records import EncodeSettings
    from transforms.shardset.ownership import PublishPolicy
    from transforms.storage.listing import FileMetadata
    from transforms.storage.handback import HandBack
    from transforms.storage.output_folder import FolderState
    from transforms.verify.ranges import ShardFile

__all__ = ["JobConfig", "PublishingConfig", "BuildConfig", "PlanConfig", "ReshardConfig", "VerifyConfig", "CONFIGS",
           "LOCAL_RUNNERS", "DEFAULT_SPLIT", "usage_problem", "known_flag_names", "flag_fields", "field_type"]

# Beam's flags the jobs read (Beam's own options classes define them).
BEAM_FLAGS = ("runner", "dry_run", "direct_num_workers", "max_num_workers", "temp_location", "no_auth")
# The runners that run a job in this process (progress is reported there).
LOCAL_RUNNERS = (None, "DirectRunner", "direct", "SwitchingDirectRunner", "FnApiRunner",
                 "BundleBasedDirectRunner")
# The split of a build's unsplit inputs without --split.
DEFAULT_SPLIT = "train"


def _field_value(flag: Flag, value: Any) -> Any:
    """A parsed flag's value as its config holds it: a repeatable flag's values as a tuple, a folder without
    its trailing ``/``."""
    if flag.action == "append" and value is not None:
        return tuple(value)
    if flag.name in ("output_dir", "staging_dir") and value:
        return value.rstrip("/") or "/"
    return value


def field_type(flag: Flag) -> str:
    """The type of the config field of ``flag`` (a string, as every annotation here): ``bool``, a tuple,
    or its parser's return type (``str`` without one), ``| None`` when it defaults to None."""
    if flag.action in ("store_true", "store_false"):
        return "bool"
    if flag.action == "append":
        return "tuple[str, ...] | None"
    returned = getattr(flag.type, "__annotations__", {}).get("return")
    if returned is None:  # no parser, or a builtin (``int``, ``str.upper``) without annotations
        returned = flag.type if isinstance(flag.type, type) else str
    kind = returned if isinstance(returned, str) else returned.__name__
    return f"{kind} | None" if flag.default is None else kind


def flag_fields(*flags: Flag) -> Callable[[type], type]:
    """Makes a config class a frozen dataclass with a field per flag (``flags``, or else its ``JOB``'s) not
    already a base class's, ahead of its own fields; ``TypeError`` if it annotates one of those by hand."""
    def make(cls: type) -> type:
        inherited = {f.name for base in cls.__mro__[1:] if hasattr(base, "__dataclass_fields__")
                     for f in fields(base)}
        declared = flags or tuple(cls.JOB.flags())
        own = dict(cls.__dict__.get("__annotations__", {}))
        made = {flag.name: field_type(flag) for flag in declared
                if not flag.positional and flag.name not in inherited}
        twice = sorted(set(made) & set(own))
        if twice:
            raise TypeError(f"{cls.__name__} annotates {', '.join(twice)} by hand; a flag's field is made "
                            "from its Flag declaration (beam_jobs/cli/jobs.py)")
        cls.__annotations__ = {**made, **own}
        cls.FLAG_FIELDS = (*getattr(cls, "FLAG_FIELDS", ()), *made)  # not a field: no annotation
        return dataclass(frozen=True, kw_only=True)(cls)

    return make


@flag_fields(*jobs.RUN.flags)
class JobConfig:
    """What every Beam job's flags say: the run flags (``jobs.RUN``) and Beam's flags the jobs read;
    ``workers_note``, found by the job: what ``beam_compat.choose_local_workers`` chose, to print."""

    JOB: ClassVar[Job]
    # What a local --dry_run's refusal suggests instead ('' for none).
    DRY_RUN_INSTEAD: ClassVar[str] = ""
    # The names of the fields made from flag declarations (``flag_fields``), bases' first.
    FLAG_FIELDS: ClassVar[tuple[str, ...]]

    runner: str | None = None
    dry_run: bool = False
    direct_num_workers: int | None = None
    max_num_workers: int | None = None
    temp_location: str | None = None
    no_auth: bool = False
    workers_note: str | None = None

    @classmethod
    def from_flags(cls, parsed: Mapping[str, Any]) -> JobConfig:
        """The config of parsed flags (flag name -> value; Beam's flags may be absent)."""
        declared = {flag.name: _field_value(flag, parsed[flag.name]) for flag in cls.JOB.flags()}
        beam = {name: parsed[name] for name in BEAM_FLAGS if parsed.get(name) is not None}
        beam["dry_run"] = bool(beam.get("dry_run"))
        return cls(**declared, **beam)

    def __post_init__(self) -> None:
        # Beam accepts --direct_num_workers -1 and fails with an IndexError once the job started.
        if self.direct_num_workers is not None and self.direct_num_workers < 0:
            raise UsageError(f"--direct_num_workers must be >= 0 (0: one per CPU core), got {self.direct_num_workers}")
        if self.dry_run and not self.dataflow_dry_run:
            # Beam reads --dry_run only with DataflowRunner; any other runner would run the job for real.
            raise UsageError("--dry_run only translates a job for --runner DataflowRunner; with this "
                             "runner the job would run and publish for real, so it is refused (nothing "
                             f"was read or written){self.DRY_RUN_INSTEAD}")

    @property
    def dataflow_dry_run(self) -> bool:
        """True if DataflowRunner only translates the job (``--dry_run``, as Beam reads it): it stays offline
        and writes nothing."""
        return (self.runner or "").lower() in ("dataflow", "dataflowrunner") and bool(self.dry_run)

    @property
    def local(self) -> bool:
        """True if the job runs on a local runner (progress is reported)."""
        return self.runner in LOCAL_RUNNERS

    @property
    def recorded(self) -> dict[str, Any]:
        """The values of the flags the manifest records (``Flag.recorded``), by name, a repeatable one's as a list."""
        values = {name: getattr(self, name) for name in self.JOB.recorded()}
        return {name: list(value) if isinstance(value, tuple) else value for name, value in values.items()}


@flag_fields(*jobs.SHARED.flags)
class PublishingConfig(JobConfig):
    """The flags of a job that publishes a shard set (``jobs.PUBLISHING``): build, plan, reshard;
    ``policy``, found by the job: how the run treats what its output folder holds."""

    ABOUT_INPUT: ClassVar[str]

    policy: PublishPolicy | None = None

    @property
    def recorded(self) -> dict[str, Any]:
        """The manifest's options; ``--shard_sha256`` only when on (other manifests stay as they were)."""
        own = super().recorded
        if not own.get("shard_sha256"):
            own.pop("shard_sha256", None)
        return own

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.input:
            raise UsageError(f"--input is required ({self.ABOUT_INPUT})")
        if not self.output_dir:
            raise UsageError("--output_dir is required")
        if self.split is not None:
            with values.usage_error("--split: ", PlanError):
                check_split_name(self.split)

    @property
    def target_bytes(self) -> int:
        """``--shard_size_mb`` in bytes."""
        return int(self.shard_size_mb * MIB)

    @property
    def tfds_name(self) -> str:
        """``--name``, or the output folder's name (not in the manifest: it moves with the folder)."""
        return self.name or dataset_name(self.output_dir)

    def new_policy(self) -> PublishPolicy:
        """The publishing policy of one run, with a fresh run id."""
        from transforms.shardset.ownership import PublishPolicy  # here: it needs Pillow

        return PublishPolicy(run_id=uuid.uuid4().hex, overwrite_unlisted=self.overwrite_unlisted_shards,
                             drop_other_splits=self.drop_other_splits, replace=self.replace)


def _array_record_checks(cfg: BuildConfig | ReshardConfig) -> None:
    """Raises ``UsageError`` for what ``--format array_record`` does not go with: ``--compression``,
    ``--append``, or no ``array_record`` package."""
    from transforms.arrayrecord.shard_file import missing_module

    if cfg.compression != "none":
        raise UsageError(f"--format array_record writes uncompressed ArrayRecord files (their records are "
                         f"read one by one); leave out --compression {cfg.compression}")
    if getattr(cfg, "append", False):
        raise UsageError("--append adds to TFRecord sets only; rebuild an ArrayRecord set with its new inputs")
    problem = missing_module()
    if problem:
        raise UsageError(f"--format array_record: {problem}")


# Flags that --append cannot take: it keeps the set's shards and classes.
_NOT_WITH_APPEND = ("replace", "drop_other_splits", "num_shards", "class_names", "labels_file")


@flag_fields()
class BuildConfig(PublishingConfig):
    """The build's flags (``jobs.BUILD``), and ``found``: what it found before its pipeline (class
    names, listing tasks, threads, ...), set by its ``make_config``; None before."""

    JOB: ClassVar[Job] = jobs.BUILD
    DRY_RUN_INSTEAD: ClassVar[str] = "; tfrecord-shards plan shows what a build would do"
    ABOUT_INPUT: ClassVar[str] = "a folder of class folders or a .csv/.jsonl manifest"

    found: BuildSurvey | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _ = self.split_fraction_map, self.features  # each raises UsageError on a bad value
        if self.label_regex is not None:
            with values.usage_error(f"--label_regex {self.label_regex!r} does not compile: ", re.error):
                re.compile(self.label_regex)
        if self.exif_orientation == "keep" and self.image_mode not in ("tf", "passthrough"):
            raise UsageError(f"--exif_orientation keep is for --image_mode tf or passthrough; "
                             f"{self.image_mode} always applies the orientation")
        if self.jpeg_quality > 100:
            raise UsageError(f"--jpeg_quality must be 1-100, got {self.jpeg_quality}")
        if not math.isfinite(self.max_image_mb):
            raise UsageError(f"--max_image_mb must be a finite number of MiB, got {self.max_image_mb}")
        if self.image_mode in ("tf", "passthrough") and (self.resize or self.grayscale):
            raise UsageError("--resize and --grayscale need --image_mode reencode or raw")
        if self.resize_mode != "stretch" and not self.resize:
            raise UsageError("--resize_mode needs --resize WIDTHxHEIGHT")
        if self.near_duplicate_distance > MAX_NEAR_DUPLICATE_DISTANCE:
            raise UsageError(f"--near_duplicate_distance must be 0-{MAX_NEAR_DUPLICATE_DISTANCE} bits, got "
                             f"{self.near_duplicate_distance}")
        if self.staging_dir and self.output_dir and values.lies_in(self.staging_dir, self.output_dir):
            raise UsageError(f"--staging_dir {self.staging_dir} lies in --output_dir {self.output_dir}; "
                             "give a folder elsewhere (or leave the flag out: the run stages in "
                             f"{self.output_dir}/.staging)")
        if self.format == "array_record":
            _array_record_checks(self)
        if self.class_names and self.labels_file:
            raise UsageError("give --class_names or --labels_file, not both")
        if self.class_names is not None and not any(self.class_name_list):
            raise UsageError("--class_names is empty; give the class names in index order, "
                             "e.g. --class_names daisy,rose,tulip")
        if self.append:
            for flag in _NOT_WITH_APPEND:
                if getattr(self, flag):
                    raise UsageError(f"--append keeps the set's shards and classes; it cannot be combined "
                                     f"with --{flag}")
            if self.dataflow_dry_run:
                raise UsageError("--append reads the published set; it has no Dataflow dry run "
                                 "(tfrecord-shards plan shows what a build would do)")

    @property
    def split_fraction_map(self) -> dict[str, float]:
        """``--split_fractions`` by split name; empty without it."""
        with values.usage_error("--split_fractions: ", PlanError):
            return parse_split_fractions(self.split_fractions) if self.split_fractions else {}

    @property
    def features(self) -> dict[str, str]:
        """``--feature`` name -> type."""
        return parse_feature_flags(self.feature or [])

    @property
    def class_name_list(self) -> list[str] | None:
        """``--class_names`` split at commas, or None."""
        return None if self.class_names is None else [n.strip() for n in self.class_names.split(",")]

    @property
    def rules(self) -> LabelRules:
        """How inputs get their split and class."""
        from transforms.images.inputs import LabelRules  # here: it needs Pillow

        return LabelRules(layout=self.layout, split=DEFAULT_SPLIT if self.split is None else self.split,
                          split_fractions=self.split_fraction_map, label_regex=self.label_regex,
                          features=self.features, multi_label=self.multi_label, bbox_format=self.bbox_format,
                          image_root=self.image_root.rstrip("/") if self.image_root else None,
                          coco_ids=self.coco_ids)

    @property
    def settings(self) -> EncodeSettings:
        """How source images become stored images."""
        from transforms.images.records import EncodeSettings  # here: it needs Pillow

        return EncodeSettings(mode=self.image_mode, validate=self.validate, image_format=self.image_format,
                              jpeg_quality=self.jpeg_quality, grayscale=self.grayscale, resize=self.resize,
                              resize_mode=self.resize_mode, exif_orientation=self.exif_orientation)

    @property
    def max_image_bytes(self) -> int:
        """``--max_image_mb`` in bytes."""
        return max(1, int(self.max_image_mb * MIB))

    @property
    def recorded(self) -> dict[str, Any]:
        """The manifest's options: ``--resize`` as ``WxH``, the split the build used, and
        ``--near_duplicates`` only when on (other builds' manifests stay as they were)."""
        own = super().recorded
        if self.near_duplicates != "off":
            own.update(near_duplicates=self.near_duplicates, near_duplicate_distance=self.near_duplicate_distance)
        own["resize"] = f"{self.resize[0]}x{self.resize[1]}" if self.resize else None
        own["split"] = DEFAULT_SPLIT if self.split is None else self.split
        return own


@flag_fields()
class PlanConfig(BuildConfig):
    """The plan's flags (the build's and ``jobs.PLAN_FLAGS``), and what it found.

    Attributes:
        handback: The run's folder on storage for what its workers hand back (``storage.handback``).
        tally: Where the pipeline writes its tally (a file of ``handback``).
        state: What the output folder holds, read before the run; None when it does not exist.
        published_shards: ``((split, shard path), ...)`` and their compression: the published shards whose
            keys the duplicate check reads, as the build's does; None when there are none or none can be kept.
    """

    JOB: ClassVar[Job] = jobs.PLAN
    DRY_RUN_INSTEAD: ClassVar[str] = "; a plan writes nothing anyway: leave --dry_run out"

    handback: HandBack | None = None
    tally: str = ""
    state: FolderState | None = None
    published_shards: tuple[list[tuple[str, str]], str] | None = None


@flag_fields()
class ReshardConfig(PublishingConfig):
    """The reshard's flags (``jobs.RESHARD``), and the input files it matched (``files``)."""

    JOB: ClassVar[Job] = jobs.RESHARD
    ABOUT_INPUT: ClassVar[str] = "TFRecord files or a pattern such as 'old/train-*'"

    files: tuple[FileMetadata, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.format == "array_record":
            _array_record_checks(self)

    @property
    def max_record_bytes(self) -> int:
        """``--max_record_mb`` in bytes."""
        return values.max_record_bytes(self.max_record_mb)


@flag_fields()
class VerifyConfig(JobConfig):
    """The verify job's flags (``jobs.VERIFY``), and what it found.

    Attributes:
        shards: The files to read with ``--files`` (a shard set's come from its manifest, in the pipeline).
        decoders: The ``--decode_with`` decoders that are installed.
        handback: The run's folder on storage for what its workers hand back (``storage.handback``).
        report_path: Where the pipeline writes the JSON report (a file of ``handback``; the launcher
            copies it to ``--report``).
        split_ranges: Split shards into byte ranges for the readers (fewer shards than workers), or
            read each shard whole, once.
    """

    JOB: ClassVar[Job] = jobs.VERIFY

    shards: tuple[ShardFile, ...] = ()
    decoders: tuple[str, ...] = ()
    handback: HandBack | None = None
    report_path: str = ""
    split_ranges: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.output_dir and not self.files:
            raise UsageError("say what to verify: --output_dir FOLDER (a shard set with manifest.json) "
                             "or --files PATTERN (TFRecord files without a manifest)")
        if self.output_dir and self.files:
            raise UsageError("give --output_dir (a shard set with manifest.json) or --files "
                             "(a pattern of TFRecord files), not both")

    @property
    def target(self) -> str:
        """What is verified, for messages: the pattern or the folder."""
        return self.files or self.output_dir

    @property
    def folder(self) -> str | None:
        """The shard set's folder (its manifest is read in the pipeline), or None with ``--files``."""
        return None if self.files else self.output_dir

    @property
    def keep_report(self) -> bool:
        """False when the report is a temporary file of this run."""
        return bool(self.report)

    @property
    def max_record_bytes(self) -> int:
        """``--max_record_mb`` in bytes."""
        return values.max_record_bytes(self.max_record_mb)


# job name -> its config (append is the build with --append)
CONFIGS: dict[str, type[JobConfig]] = {config.JOB.name: config
                                       for config in (BuildConfig, PlanConfig, ReshardConfig, VerifyConfig)}


def _beam_flag_names(job: Job) -> frozenset[str]:
    """The names of Beam's options and ``--help_beam``, for a job that runs a Beam pipeline; none otherwise."""
    return BEAM_FLAG_NAMES | {BEAM_HELP_FLAG[2:]} if job.beam else frozenset()


def known_flag_names(job: Job) -> frozenset[str]:
    """The names of every flag ``job`` takes: its declared ones and, for a Beam job, Beam's options."""
    return frozenset(job.flag_names()) | _beam_flag_names(job)


def usage_problem(job: Job, argv: Sequence[str]) -> str | None:
    """Why ``argv`` (as ``respelt`` spells it) is a usage error for ``job``, told from its declared flags
    and config, with the line the job itself would print; None if it is not.

    When ``argv`` holds Beam's own flags or a value without its flag, None: the job's full parser,
    which knows Beam's flags, decides. A job without Beam knows every flag it takes.
    """
    parser = flag_parser(job)
    beam = _beam_flag_names(job)
    try:
        known, extra = parser.parse_known_args(list(argv))
        for arg in extra:
            name = flag_name(arg)
            if name is not None and name not in beam:
                return unknown_flag_problem(arg, job.flag_names(), beam)
        if not job.beam:
            parser.parse_args(list(argv))
            return None
        if not extra:
            CONFIGS[job.name].from_flags(vars(known))
    except UsageError as err:
        return str(err)
    return None
