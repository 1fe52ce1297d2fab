"""Beam steps of the plan: survey each input from its header, and tally what a build would do.

A plan lists its inputs and rejects duplicates with the build's own steps
(``build_steps``); these steps replace the build's inspecting, writing and
publishing. ``SurveyImages`` reads each input once, checks its header
(``images.survey``) and hashes it (duplicates and ``--split_fractions`` need
the sha256); nothing is staged or written. ``TallyPlan`` gathers everything
in one combine (``shardset.plan_report.PlanTally``) and writes it as JSON to
a path of the caller's choosing.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Mapping

import apache_beam as beam
from apache_beam.io.filesystem import BeamIOError, CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms.build_steps import DEAD_LETTERS, DEFAULT_MAX_IMAGE_BYTES, ListingFacts, read_source
from transforms.errors import ImageError
from transforms.example.features import FeatureValueError
from transforms.example.schema import IMAGE_FEATURES
from transforms.images.annotations import RecordLayout, image_extras
from transforms.images.items import SPLIT_BY_CONTENT, ImageMeta, SourceImage
from transforms.images.objects import BoxError
from transforms.images.records import EncodeSettings, image_count_keys, image_example_size
from transforms.images.survey import survey_image
from transforms.progress import counters as progress
from transforms.shardset.dead_letters import DeadLetter
from transforms.shardset.plan_report import PlanTally
from transforms.shardset.planning import order_key, split_by_content
from transforms.tfrecord.framing import framed_size

__all__ = ["SurveyImages", "TallyPlan", "READS"]

# The tag of SurveyImages' ("read", bytes read, record size exact) facts, one per file read.
READS = "reads"


class _SurveyImageFn(beam.DoFn):
    """SourceImage -> ImageMeta (main), DeadLetter (DEAD_LETTERS), ("read", nbytes, exact) (READS).

    The ``ImageMeta`` is the one a build would plan with: its sha256, order
    key and record size (exact or estimated, ``images.survey``); it names no
    run file and carries no bytes.
    """

    def __init__(self, settings: EncodeSettings, seed: int, split_fractions: Mapping[str, float],
                 max_bytes: int) -> None:
        self._settings = settings
        self._seed = seed
        self._fractions = dict(split_fractions)
        self._max_bytes = max_bytes
        self._read = Metrics.counter("plan", "images_read")
        self._rejected = Metrics.counter("plan", "images_rejected")

    def process(self, source: SourceImage, labels: list[str], layout: RecordLayout | None = None):
        index_of = self._index_of(labels)
        unknown = [name for name in source.class_names() if name not in index_of]
        if unknown:
            yield from self._reject(DeadLetter(source.path, "unknown_label",
                                               f"class {unknown[0]!r} is not in the label list"))
            return
        try:
            data = read_source(source.path, self._max_bytes)
        except (OSError, BeamIOError) as err:
            yield from self._reject(DeadLetter(source.path, "unreadable", f"{type(err).__name__}: {err}"))
            return
        except ImageError as err:
            yield from self._reject(DeadLetter(source.path, err.reason, err.detail))
            return
        self._read.inc()
        try:
            surveyed = survey_image(data, self._settings)
            extra = image_extras(source, layout, index_of, data, surveyed.info.width, surveyed.info.height,
                                 pixels_transformed=self._settings.mode in ("reencode", "raw"),
                                 cropped=bool(self._settings.resize) and self._settings.resize_mode == "crop")
        except ImageError as err:
            yield from self._reject(DeadLetter(source.path, err.reason, err.detail), len(data))
            return
        except BoxError as err:
            yield from self._reject(DeadLetter(source.path, "bad_box", str(err)), len(data))
            return
        except FeatureValueError as err:
            yield from self._reject(DeadLetter(source.path, "bad_feature", str(err)), len(data))
            return
        digest = hashlib.sha256(data).digest()
        if source.split == SPLIT_BY_CONTENT:
            source = dataclasses.replace(source, split=split_by_content(digest.hex(), self._fractions))
        index = index_of.get(source.label, 0)
        size = image_example_size(surveyed.stored_bytes, surveyed.info, index, source.label, source.relpath,
                                  digest.hex(), extra)
        progress.note(progress.IMAGES_READ, 1, len(data))
        progress.note(progress.IMAGES_ACCEPTED)
        yield beam.pvalue.TaggedOutput(READS, ("read", len(data), surveyed.exact))
        yield ImageMeta(source=source, label_index=index, sha256=digest.hex(), info=surveyed.info,
                        record_size=framed_size(size), order_key=order_key(self._seed, digest),
                        source_crc32c=0, extra=extra)

    def finish_bundle(self):
        progress.flush()

    def _reject(self, dead: DeadLetter, bytes_read: int | None = None):
        """The outputs of a rejected input: the fact of its read, if it was read, and its dead letter."""
        self._rejected.inc()
        progress.note(progress.IMAGES_READ, 1, bytes_read or 0)
        if bytes_read is not None:
            yield beam.pvalue.TaggedOutput(READS, ("read", bytes_read, True))
        yield beam.pvalue.TaggedOutput(DEAD_LETTERS, dead)

    def _index_of(self, labels: list[str]) -> dict[str, int]:
        """Class name -> index; the table is built once per side input."""
        cached = getattr(self, "_index_cache", None)
        if cached is None or cached[0] is not labels:
            cached = (labels, {name: i for i, name in enumerate(labels)})
            self._index_cache = cached
        return cached[1]


class SurveyImages(beam.PTransform):
    """Reads each input once, checks its header and measures the record a build would make.

    Input: ``PCollection[SourceImage]``. Outputs: ``main`` (``ImageMeta``, as a
    build would plan with it, with no run file), ``DEAD_LETTERS``
    (``DeadLetter``: the inputs header checks reject) and ``READS``
    (``("read", bytes, exact)`` per file read).

    Args:
        settings: Image options of the build.
        seed: Shuffle seed (``--seed``).
        labels: Singleton side input with the class names in index order.
        split_fractions: ``--split_fractions``: the split of inputs that name none.
        max_bytes: Largest input read; larger ones are ``too_large`` dead letters.
        layout: Singleton side input with the build's ``RecordLayout``, or None.
    """

    def __init__(self, settings: EncodeSettings, seed: int, labels,
                 split_fractions: Mapping[str, float] | None = None,
                 max_bytes: int = DEFAULT_MAX_IMAGE_BYTES, layout=None) -> None:
        super().__init__()
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self._fn = _SurveyImageFn(settings, seed, split_fractions or {}, max_bytes)
        self._labels = labels
        self._layout = layout

    def expand(self, sources):
        extra = {} if self._layout is None else {"layout": self._layout}
        return sources | "SurveyImage" >> beam.ParDo(self._fn, labels=self._labels, **extra).with_outputs(
            DEAD_LETTERS, READS, main="main")


def _found(source: SourceImage) -> tuple:
    return ("found", source.split, source.label)


def _rejected(dead: DeadLetter) -> tuple:
    return ("rejected", dead.reason, dead.path, dead.error)


def _record(meta: ImageMeta) -> tuple:
    keys = dict(image_count_keys(meta.info))
    return ("record", meta.source.split, meta.source.label, keys["source_formats"], "converted" in keys,
            meta.record_size)


def _listing(facts: ListingFacts, fixed_labels: tuple[str, ...] | None) -> tuple:
    classes = fixed_labels if fixed_labels is not None else facts.classes
    return ("listing", facts.inputs, list(classes), {**IMAGE_FEATURES, **facts.layout.feature_spec()})


class _PlanTallyFn(beam.CombineFn):
    """Plan facts -> one ``PlanTally`` (as a dict, ``PlanTally.to_dict``)."""

    def create_accumulator(self) -> PlanTally:
        return PlanTally()

    def add_input(self, acc: PlanTally, fact: tuple) -> PlanTally:
        return acc.add(fact)

    def merge_accumulators(self, accs) -> PlanTally:
        accs = iter(accs)
        return next(accs).merge(accs)

    def extract_output(self, acc: PlanTally) -> dict:
        return acc.to_dict()


def _write_tally(tally: dict, path: str) -> None:
    with FileSystems.create(path, mime_type="application/json",
                            compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        fh.write(PlanTally.from_dict(tally).dumps())


class TallyPlan(beam.PTransform):
    """Gathers what the plan saw into one ``PlanTally`` and writes it as JSON to ``path``.

    Input: a dict of PCollections: ``listed`` (``SourceImage``), ``records``
    (``ImageMeta`` a build would write), ``reads`` (``SurveyImages``'
    ``READS``), ``facts`` (``ListingFacts``) and ``dead`` (a tuple of
    PCollections of ``DeadLetter``). One combine; with no input at all it
    writes an empty tally.

    Args:
        path: Where the tally goes (any FileSystems path; never the output folder).
        fixed_labels: ``--class_names``/``--labels_file``, or None for the listed classes.
    """

    def __init__(self, path: str, fixed_labels: tuple[str, ...] | None = None) -> None:
        super().__init__()
        self._path = path
        self._fixed = fixed_labels

    def expand(self, inputs):
        facts = [inputs["listed"] | "Found" >> beam.Map(_found),
                 inputs["records"] | "Records" >> beam.Map(_record),
                 inputs["reads"],
                 inputs["facts"] | "Listing" >> beam.Map(_listing, self._fixed)]
        facts += [dead | f"Rejected{i}" >> beam.Map(_rejected) for i, dead in enumerate(inputs["dead"])]
        return (facts
                | "AllFacts" >> beam.Flatten()
                | "Combine" >> beam.CombineGlobally(_PlanTallyFn())  # one PlanTally, as a dict
                | "Write" >> beam.Map(_write_tally, self._path))
